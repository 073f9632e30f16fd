//! The FCT objective that "better" means (README "The FCT objective"): small-flow tail
//! slowdown, penalised when large flows slow down or pauses rise, relative to a reference
//! run of the same scenario and seed.
//!
//! `cost = S99 · (1 + 2·max(0, L50/L50_ref − 1)) · (1 + max(0, P − P_ref)/(P_ref + 1000))`
//!
//! - S99: p99 slowdown of flows under 100 KB;
//! - L50: median slowdown of flows of 1 MB and more;
//! - P: PFC pause frames.
//!
//! Lower is better. A run that matches the reference on large flows and pauses costs
//! exactly its small-flow p99.

use crate::fabric::stats::percentile_sorted;
use crate::fabric::Simulator;
use serde::{Deserialize, Serialize};

pub use crate::summary::{LARGE_FLOW_BYTES, SMALL_FLOW_BYTES};

/// The three numbers the objective reads from a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FctMetrics {
    /// p99 slowdown of flows under 100 KB.
    pub small_p99: f64,
    /// Median slowdown of flows of 1 MB and more.
    pub large_p50: f64,
    /// PFC pause frames sent in the fabric.
    pub pause_frames: u64,
}

impl FctMetrics {
    /// Read them off a finished simulation. Buckets without flows count as slowdown 1.
    pub fn of(sim: &Simulator) -> Self {
        let mut small = Vec::new();
        let mut large = Vec::new();
        for r in sim.flow_records() {
            let Some(s) = r.slowdown else { continue };
            if r.size_bytes < SMALL_FLOW_BYTES {
                small.push(s);
            } else if r.size_bytes >= LARGE_FLOW_BYTES {
                large.push(s);
            }
        }
        small.sort_by(f64::total_cmp);
        large.sort_by(f64::total_cmp);
        FctMetrics {
            small_p99: percentile_sorted(&small, 99.0).unwrap_or(1.0),
            large_p50: percentile_sorted(&large, 50.0).unwrap_or(1.0),
            pause_frames: sim.counters().pause_frames,
        }
    }

    /// The cost of this run against `reference` (lower is better).
    pub fn cost(&self, reference: &FctMetrics) -> f64 {
        let large = 1.0 + 2.0 * (self.large_p50 / reference.large_p50.max(1.0) - 1.0).max(0.0);
        let extra_pauses = self.pause_frames.saturating_sub(reference.pause_frames) as f64;
        let pauses = 1.0 + extra_pauses / (reference.pause_frames as f64 + 1000.0);
        self.small_p99 * large * pauses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_small_p99_unless_large_flows_or_pauses_get_worse() {
        let r = FctMetrics { small_p99: 5.0, large_p50: 4.0, pause_frames: 100 };
        let same = FctMetrics { small_p99: 3.0, large_p50: 3.5, pause_frames: 50 };
        assert_eq!(same.cost(&r), 3.0);
        let slower = FctMetrics { large_p50: 4.4, ..same };
        assert!((slower.cost(&r) - 3.0 * 1.2).abs() < 1e-12);
        let paused = FctMetrics { pause_frames: 1200, ..same };
        assert!((paused.cost(&r) - 3.0 * 2.0).abs() < 1e-12);
    }
}
