//! Double DQN (van Hasselt et al. 2016), as ACC uses it: an online network picks the next
//! action, a slowly synchronized target network values it; Huber loss, Adam, ε-greedy.
//!
//! With `conservative_alpha > 0` it becomes discrete conservative Q-learning (CQL(H), Kumar et
//! al. 2020) for learning from logged data: the loss also pushes down the log-sum-exp of all
//! Q-values of a state while pushing up the Q-value of the action that was logged, so actions
//! the data never tried in a situation cannot look better than the ones it did.

use super::replay::Batch;
use ecn_models::QNetwork;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tch::nn::OptimizerConfig;
use tch::{nn, Device, Kind, Reduction, Tensor};

/// The learner's hyperparameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DdqnConfig {
    /// Hidden layer widths.
    pub hidden: Vec<usize>,
    /// Discount per control interval.
    pub gamma: f64,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Transitions per gradient step.
    pub batch_size: usize,
    /// Gradient steps between copies of the online network into the target network.
    pub target_sync: u64,
    /// Replay capacity, transitions.
    pub replay_capacity: usize,
    /// Transitions collected before learning starts.
    pub warmup: usize,
    /// ε at the start.
    pub epsilon_start: f64,
    /// ε at the end of the decay.
    pub epsilon_end: f64,
    /// Fraction of the training steps over which ε decays linearly.
    pub epsilon_decay_fraction: f64,
    /// Gradient steps per environment step (all parallel environments together).
    pub updates_per_step: usize,
    /// Gradient norm clip.
    pub max_grad_norm: f64,
    /// Weight of the CQL regularizer; 0 is plain Double DQN (online learning).
    #[serde(default)]
    pub conservative_alpha: f64,
    /// Rewards summed before bootstrapping (n-step returns); 1 is one-step Q-learning.
    #[serde(default = "one")]
    pub n_step: usize,
}

fn one() -> usize {
    1
}

impl Default for DdqnConfig {
    fn default() -> Self {
        DdqnConfig {
            hidden: vec![64, 64],
            gamma: 0.8,
            learning_rate: 5e-4,
            batch_size: 256,
            target_sync: 500,
            replay_capacity: 200_000,
            warmup: 5_000,
            epsilon_start: 1.0,
            epsilon_end: 0.05,
            epsilon_decay_fraction: 0.5,
            updates_per_step: 2,
            max_grad_norm: 10.0,
            conservative_alpha: 0.0,
            n_step: 1,
        }
    }
}

impl DdqnConfig {
    /// ε after `step` of `total` environment steps.
    pub fn epsilon(&self, step: u64, total: u64) -> f64 {
        let horizon = (total as f64 * self.epsilon_decay_fraction).max(1.0);
        let f = (step as f64 / horizon).min(1.0);
        self.epsilon_start + (self.epsilon_end - self.epsilon_start) * f
    }
}

/// The online and target networks with their optimizer.
pub struct Ddqn {
    cfg: DdqnConfig,
    online: QNetwork,
    target: QNetwork,
    opt: nn::Optimizer,
    updates: u64,
}

impl Ddqn {
    /// Fresh networks on `device`.
    pub fn new(cfg: DdqnConfig, device: Device, obs_dim: usize, actions: usize) -> Result<Self, tch::TchError> {
        let online = QNetwork::new(device, obs_dim, &cfg.hidden, actions);
        let mut target = QNetwork::new(device, obs_dim, &cfg.hidden, actions);
        target.var_store_mut().copy(online.var_store())?;
        let opt = nn::Adam::default().build(online.var_store(), cfg.learning_rate)?;
        Ok(Ddqn { cfg, online, target, opt, updates: 0 })
    }

    /// The online network (what gets saved and deployed).
    pub fn online(&self) -> &QNetwork {
        &self.online
    }

    /// Gradient steps taken.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// ε-greedy actions for `obs` (row-major): with probability ε a uniform action, else
    /// the greedy one. A network output that is not finite also gets a random action
    /// during training (and a fallback at deployment).
    pub fn act(&self, obs: &[f32], epsilon: f64, rng: &mut impl Rng) -> Vec<usize> {
        let n_actions = self.online.actions();
        let greedy = self.online.act(obs);
        greedy
            .into_iter()
            .map(|g| match g {
                Some(a) if rng.gen::<f64>() >= epsilon => a,
                _ => rng.gen_range(0..n_actions),
            })
            .collect()
    }

    /// The batch as tensors on the networks' device: (obs, actions as n×1, TD targets).
    fn tensors(&self, batch: &Batch) -> (Tensor, Tensor, Tensor) {
        let device = self.online.device();
        let n = batch.actions.len() as i64;
        let dim = self.online.obs_dim() as i64;
        let obs = Tensor::from_slice(&batch.obs).view([n, dim]).to_device(device);
        let next_obs = Tensor::from_slice(&batch.next_obs).view([n, dim]).to_device(device);
        let actions = Tensor::from_slice(&batch.actions).view([n, 1]).to_device(device);
        let rewards = Tensor::from_slice(&batch.rewards).to_device(device);
        let not_terminal = 1.0 - Tensor::from_slice(&batch.terminal).to_device(device);
        let target = tch::no_grad(|| {
            // Double DQN: the online network chooses, the target network evaluates.
            let next_action = self.online.forward(&next_obs).argmax(1, true);
            let next_value = self.target.forward(&next_obs).gather(1, &next_action, false).squeeze_dim(1);
            let bootstrap = not_terminal * next_value * self.cfg.gamma;
            // An n-step transition bootstraps γⁿ⁻¹ further out; one-step batches skip this,
            // so their arithmetic is exactly that of plain Double DQN.
            let bootstrap = if batch.steps.iter().any(|&m| m > 1.0) {
                let extra: Vec<f32> = batch.steps.iter().map(|&m| self.cfg.gamma.powf(m as f64 - 1.0) as f32).collect();
                bootstrap * Tensor::from_slice(&extra).to_device(device)
            } else {
                bootstrap
            };
            rewards + bootstrap
        });
        (obs, actions, target)
    }

    /// The TD error of `net` on every transition of `batch` against this learner's targets,
    /// without learning.
    pub fn td_errors(&self, net: &QNetwork, batch: &Batch) -> Vec<f32> {
        let (obs, actions, target) = self.tensors(batch);
        tch::no_grad(|| {
            let q = net.forward(&obs).gather(1, &actions, false).squeeze_dim(1);
            let e = (q - target).to_device(Device::Cpu).to_kind(Kind::Float);
            Vec::<f32>::try_from(&e).unwrap_or_default()
        })
    }

    /// One gradient step on `batch`; returns the loss (Huber, plus the CQL term when
    /// `conservative_alpha > 0`).
    pub fn update(&mut self, batch: &Batch) -> Result<f64, tch::TchError> {
        let (obs, actions, target) = self.tensors(batch);
        let q_all = self.online.forward(&obs);
        let q = q_all.gather(1, &actions, false).squeeze_dim(1);
        let td_loss = q.huber_loss(&target, Reduction::Mean, 1.0);
        let loss = if self.cfg.conservative_alpha > 0.0 {
            let gap = (q_all.logsumexp([1i64].as_slice(), false) - &q).mean(Kind::Float);
            td_loss + gap * self.cfg.conservative_alpha
        } else {
            td_loss
        };
        self.opt.zero_grad();
        loss.backward();
        self.opt.clip_grad_norm(self.cfg.max_grad_norm);
        self.opt.step();
        self.updates += 1;
        if self.updates.is_multiple_of(self.cfg.target_sync) {
            self.target.var_store_mut().copy(self.online.var_store())?;
        }
        Ok(loss.to_kind(Kind::Double).double_value(&[]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::replay::ReplayBuffer;
    use rand::SeedableRng;

    /// A two-state bandit: in state A action 1 pays 1, in state B action 0 pays 1. DDQN
    /// must learn both, from random play, in a few hundred updates.
    #[test]
    fn learns_a_contextual_bandit() {
        tch::manual_seed(3);
        let cfg =
            DdqnConfig { hidden: vec![16], gamma: 0.0, learning_rate: 1e-2, batch_size: 64, ..Default::default() };
        let mut agent = Ddqn::new(cfg.clone(), Device::Cpu, 2, 3).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut replay = ReplayBuffer::new(2, 10_000);
        let states = [[1.0f32, 0.0], [0.0, 1.0]];
        for i in 0..2000 {
            let s = states[i % 2];
            let a = rng.gen_range(0..3);
            let r = if (i % 2 == 0 && a == 1) || (i % 2 == 1 && a == 0) { 1.0 } else { 0.0 };
            replay.push(&s, a, r, &s, true);
        }
        for _ in 0..400 {
            agent.update(&replay.sample(cfg.batch_size, &mut rng)).unwrap();
        }
        let greedy = agent.online().act(&[1.0, 0.0, 0.0, 1.0]);
        assert_eq!(greedy, vec![Some(1), Some(0)]);
        assert_eq!(agent.act(&[1.0, 0.0], 0.0, &mut rng), vec![1]);
        assert!(cfg.epsilon(0, 100) == 1.0 && (cfg.epsilon(100, 100) - 0.05).abs() < 1e-12);
    }
}
