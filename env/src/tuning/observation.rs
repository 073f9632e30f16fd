//! Per-queue observations: what one interval of switch telemetry says about a queue,
//! normalized so that a policy trained at one link speed and control interval still reads
//! the same numbers at another.
//!
//! Depths and thresholds are measured against a reference bandwidth-delay product: the port's
//! line rate times [`REFERENCE_RTT_NS`]. Rates are fractions of line rate, pause activity is a
//! fraction of the interval. Every feature comes from counters that SONiC exposes
//! (REFERENCE.md §7), so the same code builds observations from the simulator, a live
//! actuator and a recorded file. One with a caveat: SONiC has no time-averaged depth, so on a
//! switch the average depth is the occupancy when polled, or failing that the shared watermark
//! (see the SONiC backend's `counters` module); the simulator's is time-weighted.

use crate::ecn::EcnSetting;
use ecn_datasets::QueueSample;
use serde::{Deserialize, Serialize};

/// The round-trip time that defines the reference BDP, nanoseconds. 10 µs is a typical
/// intra-datacenter RoCE base RTT; the value only sets a scale and is part of the schema.
pub const REFERENCE_RTT_NS: f64 = 10_000.0;

/// The version of the observation schema. A model card records it, and loading a model
/// whose card names another version fails.
pub const OBSERVATION_SCHEMA: &str = "ecn-tuner/obs-v1";

/// One queue over one control interval: a telemetry sample (PRODUCT.md "Data contracts"),
/// its counters as deltas over `interval_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueInterval {
    /// Length of the interval.
    pub interval_ns: u64,
    /// What the queue did over it.
    pub sample: QueueSample,
}

impl QueueInterval {
    /// Build from a telemetry row that covers `interval_ns`.
    pub fn from_sample(s: &ecn_datasets::TelemetrySample, interval_ns: u64) -> Self {
        Self::from_queue_sample(&s.sample, interval_ns)
    }

    /// Build from one queue's sample (a row without its identity) that covers `interval_ns`.
    pub fn from_queue_sample(s: &QueueSample, interval_ns: u64) -> Self {
        QueueInterval { interval_ns, sample: *s }
    }

    /// The ECN setting in effect.
    pub fn setting(&self) -> EcnSetting {
        EcnSetting::from(&self.sample)
    }

    /// The reference BDP of this port, bytes.
    pub fn bdp_bytes(&self) -> f64 {
        bdp_bytes(self.sample.link_bps)
    }

    /// Fraction of line rate used, in [0, ~1].
    pub fn utilization(&self) -> f64 {
        let s = &self.sample;
        if self.interval_ns == 0 || s.link_bps == 0 {
            return 0.0;
        }
        (s.tx_bytes as f64 * 8.0 / (s.link_bps as f64 * self.interval_ns as f64 * 1e-9)).min(1.0)
    }

    /// Mean depth in reference BDPs.
    pub fn depth_avg_bdp(&self) -> f64 {
        self.sample.queue_bytes_avg.max(0.0) / self.bdp_bytes()
    }

    /// Maximum depth in reference BDPs.
    pub fn depth_max_bdp(&self) -> f64 {
        self.sample.queue_bytes_max as f64 / self.bdp_bytes()
    }

    /// Fraction of sent packets that this queue marked.
    pub fn mark_fraction(&self) -> f64 {
        let s = &self.sample;
        if s.tx_pkts == 0 {
            0.0
        } else {
            (s.ecn_marked_pkts as f64 / s.tx_pkts as f64).min(1.0)
        }
    }

    /// Mark fraction × idle fraction: marking while the link had room, which makes senders cut
    /// rates they did not need to cut (the over-marking term of [`super::Reward::Tuner`]).
    pub fn marked_idle(&self) -> f64 {
        self.mark_fraction() * (1.0 - self.utilization()).max(0.0)
    }

    /// Fraction of the interval the queue was paused.
    pub fn paused_fraction(&self) -> f64 {
        if self.interval_ns == 0 {
            0.0
        } else {
            (self.sample.paused_ns as f64 / self.interval_ns as f64).min(1.0)
        }
    }

    /// PAUSE frames sent per 100 µs.
    pub fn pause_tx_rate(&self) -> f64 {
        if self.interval_ns == 0 {
            0.0
        } else {
            self.sample.pfc_pause_tx as f64 * 100_000.0 / self.interval_ns as f64
        }
    }
}

/// The reference BDP of a port of this speed, bytes.
pub fn bdp_bytes(link_bps: u64) -> f64 {
    (link_bps.max(1) as f64 / 8.0 * REFERENCE_RTT_NS * 1e-9).max(1.0)
}

/// A threshold as a feature: log2 of its size in reference BDPs, scaled to about [-1, 1].
fn threshold_feature(bytes: u64, bdp: f64) -> f32 {
    ((bytes.max(1) as f64 / bdp).log2() / 8.0) as f32
}

/// Which features a policy sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeatureSet {
    /// ecn-tuner's features: mean and max depth, utilization, mark fraction, pauses received
    /// and sent, drops, over `history` intervals; then the current setting.
    Tuner,
    /// ACC's features exactly (REFERENCE.md §6): queue length, output rate, output rate of
    /// marked packets and the ECN setting, for each of `history` intervals.
    Acc,
}

impl FeatureSet {
    /// Features per interval in the history.
    fn per_interval(self) -> usize {
        match self {
            FeatureSet::Tuner => 7,
            FeatureSet::Acc => 6,
        }
    }

    /// Features that appear once, after the history.
    fn trailing(self) -> usize {
        match self {
            FeatureSet::Tuner => 3,
            FeatureSet::Acc => 0,
        }
    }

    /// Length of the observation vector for a history of `history` intervals.
    pub fn dim(self, history: usize) -> usize {
        self.per_interval() * history + self.trailing()
    }

    /// Names of the features, in order, for model cards and decision logs.
    pub fn names(self, history: usize) -> Vec<String> {
        let per: &[&str] = match self {
            FeatureSet::Tuner => {
                &["depth_avg", "depth_max", "utilization", "mark_fraction", "paused_fraction", "pause_tx_rate", "drops"]
            }
            FeatureSet::Acc => &["queue_length", "output_rate", "marked_rate", "kmin", "kmax", "pmax"],
        };
        let mut names = Vec::new();
        for h in 0..history {
            names.extend(per.iter().map(|n| format!("{n}[t-{h}]")));
        }
        if self == FeatureSet::Tuner {
            names.extend(["kmin", "kmax", "pmax"].map(String::from));
        }
        names
    }

    /// Append the per-interval features of `iv` to `out`.
    fn push_interval(self, iv: &QueueInterval, out: &mut Vec<f32>) {
        let bdp = iv.bdp_bytes();
        match self {
            FeatureSet::Tuner => out.extend([
                iv.depth_avg_bdp().ln_1p() as f32,
                iv.depth_max_bdp().ln_1p() as f32,
                iv.utilization() as f32,
                iv.mark_fraction() as f32,
                iv.paused_fraction() as f32,
                iv.pause_tx_rate().ln_1p() as f32,
                (iv.sample.drops as f64).ln_1p() as f32,
            ]),
            FeatureSet::Acc => {
                let util = iv.utilization();
                out.extend([
                    iv.depth_avg_bdp().ln_1p() as f32,
                    util as f32,
                    (util * iv.mark_fraction()) as f32,
                    threshold_feature(iv.setting().kmin_bytes, bdp),
                    threshold_feature(iv.setting().kmax_bytes, bdp),
                    iv.setting().pmax as f32,
                ])
            }
        }
    }
}

/// The last few intervals of one queue, newest first, turned into an observation.
#[derive(Debug, Clone, Default)]
pub struct QueueHistory {
    intervals: std::collections::VecDeque<QueueInterval>,
}

impl QueueHistory {
    /// Record a new interval, keeping at most `history`.
    pub fn push(&mut self, iv: QueueInterval, history: usize) {
        self.intervals.push_front(iv);
        self.intervals.truncate(history.max(1));
    }

    /// The newest interval.
    pub fn latest(&self) -> Option<&QueueInterval> {
        self.intervals.front()
    }

    /// The intervals held, newest first.
    pub fn intervals(&self) -> impl Iterator<Item = &QueueInterval> {
        self.intervals.iter()
    }

    /// Forget everything (a new episode, or telemetry that cannot be trusted).
    pub fn clear(&mut self) {
        self.intervals.clear();
    }

    /// Append the observation to `out`: `features.dim(history)` values. Before `history`
    /// intervals exist, the oldest one known stands in for the missing ones; with none at
    /// all, nothing is appended and `false` is returned.
    pub fn observe(&self, features: FeatureSet, history: usize, out: &mut Vec<f32>) -> bool {
        let Some(latest) = self.intervals.front() else { return false };
        let oldest = self.intervals.back().expect("non-empty");
        for h in 0..history {
            features.push_interval(self.intervals.get(h).unwrap_or(oldest), out);
        }
        if features == FeatureSet::Tuner {
            let bdp = latest.bdp_bytes();
            out.extend([
                threshold_feature(latest.setting().kmin_bytes, bdp),
                threshold_feature(latest.setting().kmax_bytes, bdp),
                latest.setting().pmax as f32,
            ]);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn interval(link_bps: u64, interval_ns: u64, depth: f64, tx_bytes: u64) -> QueueInterval {
        QueueInterval {
            interval_ns,
            sample: QueueSample {
                link_bps,
                queue_bytes_avg: depth,
                queue_bytes_max: (depth * 2.0) as u64,
                tx_bytes,
                tx_pkts: tx_bytes / 1000,
                ecn_marked_pkts: tx_bytes / 4000,
                pfc_pause_rx: 0,
                pfc_pause_tx: 2,
                paused_ns: interval_ns / 10,
                drops: 0,
                kmin_bytes: 5_000 * link_bps / 100_000_000_000,
                kmax_bytes: 200_000 * link_bps / 100_000_000_000,
                pmax: 0.2,
                ..QueueSample::default()
            },
        }
    }

    /// The same situation at 25G over 400 µs and at 100G over 100 µs (the same fraction of line
    /// rate, depth in BDPs, marks, time paused) reads the same, but for the pause frame rate:
    /// it is per 100 µs of time, not per interval, so the fabric four times slower, sending
    /// the same 2 frames an interval, reads a quarter of the rate (README "Observation").
    #[test]
    fn features_do_not_depend_on_link_speed_or_interval() {
        let slow = interval(25_000_000_000, 400_000, 31_250.0 / 2.0, 25_000_000_000 / 8 * 400 / 1_000_000 / 2);
        let fast = interval(100_000_000_000, 100_000, 62_500.0, 100_000_000_000 / 8 * 100 / 1_000_000 / 2);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (iv, out) in [(slow, &mut a), (fast, &mut b)] {
            let mut h = QueueHistory::default();
            h.push(iv, 3);
            assert!(h.observe(FeatureSet::Tuner, 3, out));
        }
        assert_eq!(a.len(), FeatureSet::Tuner.dim(3));
        const PAUSE_RATE: usize = 5;
        for (i, (x, y)) in a.iter().zip(&b).enumerate().filter(|(i, _)| i % 7 != PAUSE_RATE) {
            assert!((x - y).abs() < 1e-3, "feature {i}: {x} vs {y}");
        }
        assert!((a[PAUSE_RATE] - 0.5f32.ln_1p()).abs() < 1e-6 && (b[PAUSE_RATE] - 2f32.ln_1p()).abs() < 1e-6);
        assert!((a[2] - 0.5).abs() < 1e-6, "utilization {}", a[2]);
    }

    #[test]
    fn history_is_newest_first_and_padded() {
        let mut h = QueueHistory::default();
        let mut out = Vec::new();
        assert!(!h.observe(FeatureSet::Acc, 3, &mut out));
        h.push(interval(100_000_000_000, 100_000, 0.0, 0), 3);
        h.push(interval(100_000_000_000, 100_000, 0.0, 1_250_000), 3);
        assert!(h.observe(FeatureSet::Acc, 3, &mut out));
        assert_eq!(out.len(), FeatureSet::Acc.dim(3));
        assert_eq!(FeatureSet::Acc.names(3).len(), out.len());
        assert!((out[1] - 1.0).abs() < 1e-6, "newest first");
        assert_eq!(out[7], 0.0);
        assert_eq!(out[13], 0.0, "the oldest interval pads the missing one");
    }
}
