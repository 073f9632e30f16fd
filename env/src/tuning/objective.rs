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
//!
//! A flow still unfinished when the run stops counts at the slowdown it has reached by then, a
//! lower bound of its real one. Leaving it out would reward a policy for starving flows past the
//! end of the run, since those are the slowest of all; `eval` reports completed/total beside
//! the percentiles.

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
    /// Read them off a finished simulation. Buckets without flows count as slowdown 1; a flow
    /// started but unfinished counts at its slowdown so far.
    pub fn of(sim: &Simulator) -> Self {
        let now = sim.now().0;
        let mut small = Vec::new();
        let mut large = Vec::new();
        for r in sim.flow_records() {
            let s = match r.slowdown {
                Some(s) => s,
                None if r.start_ns < now => ((now - r.start_ns) as f64 / r.ideal_ns.max(1) as f64).max(1.0),
                None => continue,
            };
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

    /// A 50 KB flow sharing its receiver's link with two 1 MB flows that start with it, so that
    /// it runs slower than alone; the run stops at `stop_us`.
    fn a_slowed_small_flow(stop_us: u64) -> Simulator {
        use crate::fabric::FabricConfig;
        use crate::topology::Topology;
        use crate::units::{BitsPerSec, Nanos};
        use crate::workload::FlowSpec;
        let g100 = BitsPerSec::from_gbps(100);
        let mut cfg = FabricConfig::new(Topology::leaf_spine(4, 1, 1, g100, g100, Nanos(1000)).unwrap());
        cfg.window_end = Nanos::from_micros(1);
        cfg.stop_at = Nanos::from_micros(stop_us);
        let flow = |src, size_bytes| FlowSpec { src, dst: 3, size_bytes, start: Nanos(0), priority: 3, dport: 100 };
        let mut sim = Simulator::new(cfg, vec![flow(0, 50_000), flow(1, 1_000_000), flow(2, 1_000_000)]).unwrap();
        sim.run(|_| {});
        sim
    }

    #[test]
    fn an_unfinished_flow_counts_at_its_slowdown_so_far() {
        let done = a_slowed_small_flow(1_000);
        let full = FctMetrics::of(&done).small_p99;
        let record = done.flow_records().into_iter().find(|r| r.size_bytes == 50_000).unwrap();
        assert_eq!(record.slowdown, Some(full), "the flow completes given 1 ms");
        assert!(full > 1.5, "the 1 MB flows slow it down: slowdown {full}");
        // Stopped at 90% of its FCT, the flow is unfinished but already past its ideal FCT.
        let cut = a_slowed_small_flow(record.fct_ns.unwrap() * 9 / 10 / 1000);
        assert_eq!(cut.flow_records().iter().filter(|r| r.slowdown.is_some()).count(), 0);
        let censored = FctMetrics::of(&cut).small_p99;
        let so_far = cut.now().0 as f64 / record.ideal_ns as f64;
        assert!(so_far > 1.2, "{so_far}");
        assert!((censored - so_far).abs() < 1e-12, "{censored} vs {so_far}");
        assert!(censored < full, "a lower bound: {censored} vs {full}");
    }
}
