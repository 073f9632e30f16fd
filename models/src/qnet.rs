//! The Q-network: one queue's observation in, one value per template action out.

use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

/// A multilayer perceptron with ReLU activations, owning its variables.
pub struct QNetwork {
    vs: nn::VarStore,
    net: nn::Sequential,
    obs_dim: usize,
    actions: usize,
}

impl QNetwork {
    /// A freshly initialized network on `device`: `obs_dim` → `hidden`… → `actions`.
    pub fn new(device: Device, obs_dim: usize, hidden: &[usize], actions: usize) -> Self {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mut net = nn::seq();
        let mut width = obs_dim as i64;
        for (i, &h) in hidden.iter().enumerate() {
            net = net
                .add(nn::linear(&root / format!("hidden{i}"), width, h as i64, Default::default()))
                .add_fn(|x| x.relu());
            width = h as i64;
        }
        net = net.add(nn::linear(&root / "out", width, actions as i64, Default::default()));
        QNetwork { vs, net, obs_dim, actions }
    }

    /// The variables (for the optimizer, saving and loading).
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// Mutable variables (loading weights, copying into a target network).
    pub fn var_store_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    /// The device the variables live on.
    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// Observation length.
    pub fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    /// Number of actions.
    pub fn actions(&self) -> usize {
        self.actions
    }

    /// Q-values for a batch, `[n, obs_dim]` → `[n, actions]`.
    pub fn forward(&self, obs: &Tensor) -> Tensor {
        self.net.forward(obs)
    }

    /// Q-values for `n` observations given row-major in `obs`, without gradients, as
    /// `n × actions` values on the host.
    pub fn q_values(&self, obs: &[f32]) -> Vec<f32> {
        let n = obs.len() / self.obs_dim.max(1);
        if n == 0 {
            return Vec::new();
        }
        tch::no_grad(|| {
            let x = Tensor::from_slice(obs).view([n as i64, self.obs_dim as i64]).to_device(self.device());
            let q = self.forward(&x).to_device(Device::Cpu).to_kind(Kind::Float).contiguous();
            Vec::<f32>::try_from(q.view([-1])).unwrap_or_default()
        })
    }

    /// The greedy action of each of the `n` observations in `obs`; `None` where the
    /// network's values are not finite.
    pub fn act(&self, obs: &[f32]) -> Vec<Option<usize>> {
        self.q_values(obs).chunks(self.actions.max(1)).map(greedy).collect()
    }
}

/// The index of the largest value, or `None` if any value is NaN or infinite: a network
/// that outputs garbage must not choose a setting (the caller falls back to its baseline).
pub fn greedy(q: &[f32]) -> Option<usize> {
    if q.is_empty() || q.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut best = 0;
    for (i, v) in q.iter().enumerate() {
        if *v > q[best] {
            best = i;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_refuses_non_finite_values() {
        assert_eq!(greedy(&[0.1, 0.5, -1.0]), Some(1));
        assert_eq!(greedy(&[0.1, f32::NAN]), None);
        assert_eq!(greedy(&[f32::INFINITY, 0.0]), None);
        assert_eq!(greedy(&[]), None);
    }

    #[test]
    fn greedy_takes_the_first_of_equal_values() {
        // `run` and `recommend` both decide through this; a tie must not split them.
        assert_eq!(greedy(&[0.5, 0.5, 0.1]), Some(0));
        assert_eq!(greedy(&[0.1, 0.7, 0.7]), Some(1));
    }

    #[test]
    fn shapes() {
        tch::manual_seed(0);
        let net = QNetwork::new(Device::Cpu, 5, &[8, 8], 3);
        let q = net.q_values(&[0.0; 10]);
        assert_eq!(q.len(), 6);
        assert_eq!(net.act(&[0.0; 10]).len(), 2);
    }
}
