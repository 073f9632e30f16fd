//! The replay buffer: a fixed-capacity ring of transitions shared by every agent (ACC's
//! "global replay pool"), sampled uniformly.

use rand::Rng;

/// One batch of transitions, row-major, ready to become tensors.
#[derive(Debug, Default)]
pub struct Batch {
    /// Observations, `n × dim`.
    pub obs: Vec<f32>,
    /// Actions taken.
    pub actions: Vec<i64>,
    /// Rewards received.
    pub rewards: Vec<f32>,
    /// Next observations, `n × dim`.
    pub next_obs: Vec<f32>,
    /// 1 where the episode terminated after this transition (no bootstrap), else 0.
    pub terminal: Vec<f32>,
    /// Control intervals between `obs` and `next_obs`: 1, or n for an n-step return, whose
    /// bootstrap is discounted by γⁿ.
    pub steps: Vec<f32>,
}

/// A ring buffer of `(obs, action, reward, next_obs, terminal)`.
pub struct ReplayBuffer {
    dim: usize,
    capacity: usize,
    len: usize,
    next: usize,
    obs: Vec<f32>,
    next_obs: Vec<f32>,
    actions: Vec<u16>,
    rewards: Vec<f32>,
    terminal: Vec<bool>,
    steps: Vec<u8>,
}

impl ReplayBuffer {
    /// An empty buffer for observations of length `dim`.
    pub fn new(dim: usize, capacity: usize) -> Self {
        ReplayBuffer {
            dim,
            capacity: capacity.max(1),
            len: 0,
            next: 0,
            obs: vec![0.0; capacity.max(1) * dim],
            next_obs: vec![0.0; capacity.max(1) * dim],
            actions: vec![0; capacity.max(1)],
            rewards: vec![0.0; capacity.max(1)],
            terminal: vec![false; capacity.max(1)],
            steps: vec![1; capacity.max(1)],
        }
    }

    /// Transitions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every observation held, row-major (in ring order, not time order).
    pub fn observations(&self) -> &[f32] {
        &self.obs[..self.len * self.dim]
    }

    /// Add one transition, overwriting the oldest when full.
    pub fn push(&mut self, obs: &[f32], action: usize, reward: f32, next_obs: &[f32], terminal: bool) {
        self.push_n(obs, action, reward, next_obs, terminal, 1);
    }

    /// Add an n-step transition: `reward` is the discounted sum of the `steps` rewards between
    /// `obs` and `next_obs`.
    pub fn push_n(&mut self, obs: &[f32], action: usize, reward: f32, next_obs: &[f32], terminal: bool, steps: u8) {
        let (i, d) = (self.next, self.dim);
        self.obs[i * d..(i + 1) * d].copy_from_slice(obs);
        self.next_obs[i * d..(i + 1) * d].copy_from_slice(next_obs);
        self.actions[i] = action as u16;
        self.rewards[i] = reward;
        self.terminal[i] = terminal;
        self.steps[i] = steps.max(1);
        self.next = (i + 1) % self.capacity;
        self.len = (self.len + 1).min(self.capacity);
    }

    /// `n` transitions drawn uniformly with replacement.
    pub fn sample(&self, n: usize, rng: &mut impl Rng) -> Batch {
        let d = self.dim;
        let mut b = Batch {
            obs: Vec::with_capacity(n * d),
            actions: Vec::with_capacity(n),
            rewards: Vec::with_capacity(n),
            next_obs: Vec::with_capacity(n * d),
            terminal: Vec::with_capacity(n),
            steps: Vec::with_capacity(n),
        };
        if self.is_empty() {
            return b;
        }
        for _ in 0..n {
            let i = rng.gen_range(0..self.len);
            b.obs.extend_from_slice(&self.obs[i * d..(i + 1) * d]);
            b.next_obs.extend_from_slice(&self.next_obs[i * d..(i + 1) * d]);
            b.actions.push(self.actions[i] as i64);
            b.rewards.push(self.rewards[i]);
            b.terminal.push(self.terminal[i] as u8 as f32);
            b.steps.push(self.steps[i] as f32);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn the_ring_keeps_the_newest_transitions() {
        let mut r = ReplayBuffer::new(2, 3);
        for i in 0..5 {
            let x = i as f32;
            r.push(&[x, x], i, x, &[x + 1.0, x + 1.0], i == 4);
        }
        assert_eq!(r.len(), 3);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let b = r.sample(200, &mut rng);
        assert_eq!(b.obs.len(), 400);
        assert!(b.rewards.iter().all(|&x| x >= 2.0), "0 and 1 were overwritten");
        for k in 0..200 {
            assert_eq!(b.next_obs[2 * k], b.obs[2 * k] + 1.0);
            assert_eq!(b.actions[k] as f32, b.rewards[k]);
            assert_eq!(b.terminal[k] == 1.0, b.rewards[k] == 4.0);
        }
    }
}
