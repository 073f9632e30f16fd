//! Rewards: one number per queue per control interval, computed from that interval's
//! telemetry alone, so that training in the simulator, training on recorded telemetry and
//! the online controller all score the same way.

use super::observation::QueueInterval;
use serde::{Deserialize, Serialize};

/// How to score an interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reward {
    /// ecn-tuner's reward:
    ///
    /// `r = utilization − depth·(depth_avg/BDP) − depth_max·(depth_max/BDP)
    ///      − pause·(paused_fraction + pauses_sent_per_100µs) − drop·[drops > 0]
    ///      − marked_idle·mark_fraction·(1 − utilization)
    ///      − change·[the setting differs from the previous interval's]`
    ///
    /// Depth in BDPs is queueing delay in units of the reference RTT, which is what a small
    /// flow's slowdown is made of; utilization is what a large flow's slowdown is made of;
    /// pauses and drops are penalised outright. Marking while the link is not full is
    /// over-marking: senders cut their rates though the port had room, which is how thresholds
    /// set too low slow large flows down, and mean utilization barely shows it, because over an
    /// interval it follows the offered load. The weights are chosen by the reward sanity
    /// check (README "Reward"), which ranks static settings by mean reward and by FCT. The
    /// change term, which static settings never pay, discourages flapping between settings
    /// that score alike: every change restarts DCQCN's reaction to a new marking curve.
    Tuner {
        /// Weight of utilization.
        utilization: f64,
        /// Weight of mean depth in BDPs.
        depth: f64,
        /// Weight of maximum depth in BDPs.
        depth_max: f64,
        /// Weight of pause activity.
        pause: f64,
        /// Weight of an interval with drops.
        drop: f64,
        /// Weight of marking while the link is not full (ECN-mark fraction × idle fraction).
        #[serde(default)]
        marked_idle: f64,
        /// Cost of changing the setting.
        change: f64,
    },
    /// ACC's linear reward (REFERENCE.md §6): `w1·utilization + w2·D(queue length)`, where D
    /// falls by 0.1 per step of the grid 20 KB·2ⁿ (1 at or below 20 KB, 0 above 10.24 MB).
    AccLinear {
        /// w1.
        utilization: f64,
        /// w2.
        queue: f64,
    },
}

impl Reward {
    /// ecn-tuner's default weights: queueing weighed heavily, with the over-marking term
    /// keeping the ranking of static settings in line with FCT (README "Reward").
    pub const TUNER: Reward = Reward::Tuner {
        utilization: 3.0,
        depth: 3.0,
        depth_max: 0.4,
        pause: 3.0,
        drop: 3.0,
        marked_idle: 40.0,
        change: 0.05,
    };
    /// ACC with the 0.5/0.5 weights of its reimplementations.
    pub const ACC: Reward = Reward::AccLinear { utilization: 0.5, queue: 0.5 };

    /// The reward of one queue over one interval; `previous` is the interval before, if any.
    pub fn of(&self, iv: &QueueInterval, previous: Option<&QueueInterval>) -> f64 {
        match *self {
            Reward::Tuner { utilization, depth, depth_max, pause, drop, marked_idle, change } => {
                let changed = previous.is_some_and(|p| p.setting() != iv.setting());
                utilization * iv.utilization()
                    - depth * iv.depth_avg_bdp()
                    - depth_max * iv.depth_max_bdp()
                    - pause * (iv.paused_fraction() + iv.pause_tx_rate())
                    - if iv.sample.drops > 0 { drop } else { 0.0 }
                    - marked_idle * iv.marked_idle()
                    - if changed { change } else { 0.0 }
            }
            Reward::AccLinear { utilization, queue } => {
                utilization * iv.utilization() + queue * acc_queue_score(iv.sample.queue_bytes_avg)
            }
        }
    }
}

impl Reward {
    /// The reward of each interval of a queue the fabric has left idle (nothing sent or
    /// queued, the setting kept), as every queue is for ever after the last flow ends. Where it
    /// is 0 (ecn-tuner's reward), a drained fabric is a terminal state worth nothing more; where
    /// it is not (ACC's pays for an empty queue), draining ends an episode but not the task.
    pub fn when_idle(&self) -> f64 {
        match *self {
            Reward::Tuner { .. } => 0.0,
            Reward::AccLinear { queue, .. } => queue * acc_queue_score(0.0),
        }
    }

    /// Every weight finite and within 0..=[`MAX_WEIGHT`], as [`Reward::with_weights`] makes
    /// them: a model card edited otherwise is refused. Errors name the weight.
    pub fn check(&self) -> Result<(), String> {
        let mut weights = *self;
        match weights.weights_mut().into_iter().find(|(_, w)| !weight_ok(**w)) {
            Some((name, w)) => Err(format!("{name} = {w}: a weight must be finite and within 0..={MAX_WEIGHT:e}")),
            None => Ok(()),
        }
    }

    /// These weights with some replaced, from `name=value` pairs separated by commas
    /// (`depth=2,depth_max=0.2`). Names are the fields of this reward kind; every weight
    /// must be finite and ≥ 0, since each term's sign is fixed by what it measures.
    pub fn with_weights(&self, spec: &str) -> Result<Reward, String> {
        let kind = match self {
            Reward::Tuner { .. } => "this reward",
            Reward::AccLinear { .. } => "ACC's reward",
        };
        let mut out = *self;
        for (pair, name, value) in crate::units::named_numbers(spec)? {
            if !weight_ok(value) {
                return Err(format!("'{pair}': a weight must be finite and within 0..={MAX_WEIGHT:e}"));
            }
            let mut weights = out.weights_mut();
            let names: Vec<&str> = weights.iter().map(|(n, _)| *n).collect();
            match weights.iter_mut().find(|(n, _)| *n == name) {
                Some((_, slot)) => **slot = value,
                None => return Err(format!("'{name}': not a weight of {kind} ({})", names.join(", "))),
            }
        }
        Ok(out)
    }

    /// Every weight, by the name flags and cards give it.
    fn weights_mut(&mut self) -> Vec<(&'static str, &mut f64)> {
        match self {
            Reward::Tuner { utilization, depth, depth_max, pause, drop, marked_idle, change } => vec![
                ("utilization", utilization),
                ("depth", depth),
                ("depth_max", depth_max),
                ("pause", pause),
                ("drop", drop),
                ("marked_idle", marked_idle),
                ("change", change),
            ],
            Reward::AccLinear { utilization, queue } => vec![("utilization", utilization), ("queue", queue)],
        }
    }
}

/// The largest reward weight: far above any useful one, and far enough below f32's range that
/// no reward overflows it.
pub const MAX_WEIGHT: f64 = 1e6;

/// Rewards are f32 for the learner: a weight of 3e38 passed as finite and every reward, loss
/// and Q-value became infinite, with exit 0.
fn weight_ok(w: f64) -> bool {
    w.is_finite() && (0.0..=MAX_WEIGHT).contains(&w)
}

/// ACC's D(q): 1 − n/10, where n is the first grid step 20 KB·2ⁿ that holds `q`.
fn acc_queue_score(queue_bytes: f64) -> f64 {
    let n = (0..10).find(|&n| queue_bytes <= (20_000u64 << n) as f64).unwrap_or(10);
    1.0 - n as f64 / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acc_queue_score_steps_down_the_exponential_grid() {
        assert_eq!(acc_queue_score(0.0), 1.0);
        assert_eq!(acc_queue_score(20_000.0), 1.0);
        assert!((acc_queue_score(20_001.0) - 0.9).abs() < 1e-12);
        assert!((acc_queue_score(10_240_000.0) - 0.1).abs() < 1e-12);
        assert_eq!(acc_queue_score(1e9), 0.0);
    }

    #[test]
    fn an_idle_interval_earns_what_when_idle_says() {
        let idle = QueueInterval {
            interval_ns: 100_000,
            sample: ecn_datasets::QueueSample {
                link_bps: 100_000_000_000,
                kmin_bytes: 100_000,
                kmax_bytes: 400_000,
                pmax: 0.2,
                ..Default::default()
            },
        };
        let tuner = Reward::TUNER.with_weights("utilization=2,change=1").unwrap();
        for reward in [Reward::TUNER, tuner, Reward::ACC, Reward::ACC.with_weights("queue=0.7").unwrap()] {
            assert_eq!(reward.of(&idle, Some(&idle)), reward.when_idle(), "{reward:?}");
        }
        assert_eq!(Reward::ACC.when_idle(), 0.5);
    }

    #[test]
    fn weights_are_replaced_by_name_and_bad_specs_are_refused() {
        let mut r = Reward::TUNER.with_weights("depth=2, depth_max=0.2").unwrap();
        let Reward::Tuner { utilization, depth, depth_max, marked_idle, .. } = r else { panic!("kind changed") };
        assert_eq!((utilization, depth, depth_max, marked_idle), (3.0, 2.0, 0.2, 40.0));
        assert_eq!(Reward::TUNER.with_weights("").unwrap(), Reward::TUNER);
        for bad in ["depth", "depth=x", "depth=-1", "depth=inf", "queue=1", "pause=3e38", "depth=1,depth=2"] {
            assert!(Reward::TUNER.with_weights(bad).is_err(), "{bad} accepted");
        }
        assert!(Reward::ACC.with_weights("queue=0.7").is_ok());
        assert!(Reward::TUNER.check().is_ok() && Reward::ACC.check().is_ok());
        let Reward::Tuner { depth, .. } = &mut r else { unreachable!() };
        *depth = -5.0;
        assert_eq!(r.check().unwrap_err(), "depth = -5: a weight must be finite and within 0..=1e6");
    }
}
