//! Randomized training scenarios: the distribution a policy learns on, so that it adapts to
//! what it sees instead of memorizing one scenario.
//!
//! Every draw varies the workload (four flow-size distributions of REFERENCE.md §4), the load
//! (0.2–0.8), incast (fan-in 4–15, flow size, rate) and, in most draws, switches regime
//! mid-episode. The fabric is the built-in 16-host leaf-spine, so evaluation on the standard
//! scenarios uses seeds, not fabrics, that training never saw.

use crate::rng::Rng;
use crate::scenario::{Scenario, ScenarioError};
use std::fmt::Write;
use std::path::Path;

/// The training distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingMix {
    /// Length of the arrival window, milliseconds.
    pub duration_ms: u64,
    /// Range of the Poisson load.
    pub load: (f64, f64),
    /// Probability that the regime changes mid-episode.
    pub regime_change: f64,
    /// Probability that an incast workload runs.
    pub incast: f64,
}

impl Default for TrainingMix {
    fn default() -> Self {
        TrainingMix { duration_ms: 10, load: (0.2, 0.8), regime_change: 0.7, incast: 0.5 }
    }
}

/// Flow-size distributions a draw picks from, with weights: the evaluation workloads
/// (web search, Hadoop) most often.
const CDFS: &[(&str, f64)] = &[("websearch", 0.4), ("hadoop", 0.35), ("alistorage", 0.15), ("googlerpc", 0.1)];

impl TrainingMix {
    /// The scenario of draw `seed`, as TOML (readable in logs, and loadable by `sim`).
    pub fn toml(&self, seed: u64) -> String {
        let mut rng = Rng::new(seed, 0x0074_7261_696e);
        let mut t = String::new();
        let d = self.duration_ms as f64;
        let _ = writeln!(t, "name = \"train-{seed}\"\nduration = \"{}ms\"\ndrain = \"5ms\"", self.duration_ms);
        let pick_cdf = |rng: &mut Rng| {
            let mut x = rng.uniform();
            for (name, w) in CDFS {
                if x < *w {
                    return *name;
                }
                x -= w;
            }
            CDFS[0].0
        };
        let load = |rng: &mut Rng| self.load.0 + (self.load.1 - self.load.0) * rng.uniform();
        let poisson = |t: &mut String, cdf: &str, load: f64, start: Option<f64>, stop: Option<f64>| {
            let _ = writeln!(t, "[[workload]]\nkind = \"poisson\"\ncdf = \"{cdf}\"\nload = {load:.3}");
            if let Some(s) = start {
                let _ = writeln!(t, "start = \"{}us\"", (s * 1000.0) as u64);
            }
            if let Some(s) = stop {
                let _ = writeln!(t, "stop = \"{}us\"", (s * 1000.0) as u64);
            }
        };
        if rng.uniform() < self.regime_change {
            let at = d * (0.3 + 0.4 * rng.uniform());
            let (a, b) = (pick_cdf(&mut rng), pick_cdf(&mut rng));
            let (la, lb) = (load(&mut rng), load(&mut rng));
            poisson(&mut t, a, la, None, Some(at));
            poisson(&mut t, b, lb, Some(at), None);
        } else {
            let c = pick_cdf(&mut rng);
            let l = load(&mut rng);
            poisson(&mut t, c, l, None, None);
        }
        if rng.uniform() < self.incast {
            let fan_in = 4 + (rng.uniform() * 12.0) as u32;
            let size_kb = [100, 250, 500, 1000][(rng.uniform() * 4.0) as usize % 4];
            let load = 0.01 + 0.07 * rng.uniform();
            let _ = writeln!(
                t,
                "[[workload]]\nkind = \"incast\"\nfan_in = {fan_in}\nflow_size = \"{size_kb}KB\"\nload = {load:.3}"
            );
        }
        t
    }

    /// The scenario of draw `seed`.
    pub fn sample(&self, seed: u64) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml(&self.toml(seed), &format!("training-mix:{seed}"), Path::new("."), Some(seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_vary_and_are_reproducible() {
        let mix = TrainingMix::default();
        let texts: Vec<String> = (0..40).map(|s| mix.toml(s)).collect();
        assert_eq!(texts[3], mix.toml(3));
        let distinct: std::collections::HashSet<&String> = texts.iter().collect();
        assert_eq!(distinct.len(), texts.len());
        assert!(texts.iter().any(|t| t.contains("incast")));
        assert!(texts.iter().any(|t| !t.contains("incast")));
        assert!(texts.iter().any(|t| t.contains("start =")), "some draws change regime");
        for cdf in ["websearch", "hadoop", "alistorage", "googlerpc"] {
            assert!(texts.iter().any(|t| t.contains(cdf)), "{cdf} never drawn");
        }
        for s in 0..10 {
            let sc = mix.sample(s).unwrap();
            assert!(!sc.flows.is_empty());
        }
    }
}
