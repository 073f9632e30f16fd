//! The run summary of PRODUCT.md "JSON outputs" (`sim --json`): slowdown percentiles per
//! flow-size bucket (REFERENCE.md §4), pauses, drops, utilization and queue depth.

use crate::fabric::stats::percentile_sorted;
use crate::fabric::Simulator;
use ecn_datasets::FlowRecord;
use serde::{Deserialize, Serialize};

/// Flows under this size are small flows: the `lt_100KB` bucket (REFERENCE.md §4's < 10 KB and
/// 10–100 KB buckets together), whose tail the FCT objective (README, "The FCT objective")
/// measures.
pub const SMALL_FLOW_BYTES: u64 = 100_000;
/// Flows of this size and more are large flows: the `ge_1MB` bucket, whose median the FCT
/// objective guards.
pub const LARGE_FLOW_BYTES: u64 = 1_000_000;

/// p50/p95/p99 of the slowdown of one bucket; `None` (JSON null) when it has no flows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Completed flows in the bucket.
    pub n: usize,
}

impl Percentiles {
    /// Percentiles of unsorted values.
    pub fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Percentiles {
            p50: percentile_sorted(&v, 50.0),
            p95: percentile_sorted(&v, 95.0),
            p99: percentile_sorted(&v, 99.0),
            n: v.len(),
        }
    }
}

/// Slowdown by flow-size bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowdownBuckets {
    /// Every completed flow.
    pub all: Percentiles,
    /// Flows under 10 KB.
    #[serde(rename = "lt_10KB")]
    pub lt_10kb: Percentiles,
    /// 10 KB to under 100 KB.
    #[serde(rename = "10KB_100KB")]
    pub kb10_kb100: Percentiles,
    /// 100 KB to under 1 MB.
    #[serde(rename = "100KB_1MB")]
    pub kb100_mb1: Percentiles,
    /// 1 MB and more.
    #[serde(rename = "ge_1MB")]
    pub ge_1mb: Percentiles,
    /// Every flow under 100 KB (the two small buckets together): its p99 is the headline
    /// "small-flow p99".
    #[serde(rename = "lt_100KB")]
    pub lt_100kb: Percentiles,
}

impl SlowdownBuckets {
    /// Bucket the completed flows of `records` (SI sizes: 10 KB = 10 000 bytes).
    pub fn from_records(records: &[FlowRecord]) -> Self {
        let mut b: [Vec<f64>; 6] = Default::default();
        for r in records {
            let Some(s) = r.slowdown else { continue };
            b[0].push(s);
            let i = match r.size_bytes {
                0..10_000 => 1,
                10_000..SMALL_FLOW_BYTES => 2,
                SMALL_FLOW_BYTES..LARGE_FLOW_BYTES => 3,
                _ => 4,
            };
            b[i].push(s);
            if r.size_bytes < SMALL_FLOW_BYTES {
                b[5].push(s);
            }
        }
        let [all, a, c, d, e, small] = b;
        SlowdownBuckets {
            all: Percentiles::of(all),
            lt_10kb: Percentiles::of(a),
            kb10_kb100: Percentiles::of(c),
            kb100_mb1: Percentiles::of(d),
            ge_1mb: Percentiles::of(e),
            lt_100kb: Percentiles::of(small),
        }
    }
}

/// Buckets of the HPCC analysis tool's report (REFERENCE.md §4): flows sorted by size, in 20
/// groups of 5% each.
pub const SIZE_QUANTILE_BUCKETS: usize = 20;

/// One 5% group of the completed flows, by size: the slowdown of flows of similar size however
/// the workload spreads them, where the fixed size buckets can hold very different numbers of
/// flows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SizeQuantile {
    /// The largest flow in the group, bytes: the size HPCC's tool labels the group with.
    pub max_size_bytes: u64,
    /// Slowdown percentiles of the group, and its flow count.
    #[serde(flatten)]
    pub slowdown: Percentiles,
}

impl SizeQuantile {
    /// The groups of `records`' completed flows: sorted by size (ties in record order), group
    /// i holds flows floor(i·n/20) up to floor((i+1)·n/20), as HPCC's `fct_analysis.py` splits
    /// them. Empty with fewer than 20 completed flows, where a 5% group has no flow.
    pub fn of(records: &[FlowRecord]) -> Vec<SizeQuantile> {
        let mut done: Vec<(u64, f64)> = records.iter().filter_map(|r| Some((r.size_bytes, r.slowdown?))).collect();
        let n = done.len();
        if n < SIZE_QUANTILE_BUCKETS {
            return Vec::new();
        }
        done.sort_by_key(|&(size, _)| size);
        (0..SIZE_QUANTILE_BUCKETS)
            .map(|i| {
                let group = &done[i * n / SIZE_QUANTILE_BUCKETS..(i + 1) * n / SIZE_QUANTILE_BUCKETS];
                SizeQuantile {
                    max_size_bytes: group.last().map_or(0, |&(size, _)| size),
                    slowdown: Percentiles::of(group.iter().map(|&(_, s)| s).collect()),
                }
            })
            .collect()
    }
}

/// Where the slowest small flows lost their time: the flows under 100 KB whose slowdown is at
/// or above the bucket's p99, with each flow's FCT split at two instants. Before the last byte
/// leaves the sender's NIC, a flow waits for the NIC (round-robin with the host's other flows,
/// its DCQCN rate); until that byte arrives, for the switch queues on the data path; until the
/// last ACK returns, for the queues on the return path (ACKs share the data queues, README
/// "Fidelity"). The ideal FCT is split the same way: its serialization part to the sender, half
/// its base RTT to each direction. Each phase counts its time beyond that part, floored at zero.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TailAnatomy {
    /// Flows in the tail.
    pub flows: usize,
    /// Mean time beyond the ideal FCT, summed over the three phases, ns.
    pub excess_ns: f64,
    /// Share of that time spent before the last byte left the sender.
    pub sender: f64,
    /// Share spent on the data path.
    pub forward: f64,
    /// Share spent waiting for the last ACK.
    pub ack: f64,
}

impl TailAnatomy {
    /// The anatomy of the <100KB flows at or above `p99`; `None` when no such flow records the
    /// phase times (files from other simulators do not).
    pub fn of_small_flows(records: &[FlowRecord], p99: Option<f64>) -> Option<Self> {
        let p99 = p99?;
        let mut sums = [0f64; 3];
        let mut flows = 0;
        for r in records.iter().filter(|r| r.size_bytes < SMALL_FLOW_BYTES && r.slowdown.is_some_and(|s| s >= p99)) {
            let (Some(fct), Some(sent), Some(delivered), Some(base)) =
                (r.fct_ns, r.sent_ns, r.delivered_ns, r.base_rtt_ns)
            else {
                continue;
            };
            let over = |took: u64, ideal: u64| took.saturating_sub(ideal) as f64;
            let serialization = r.ideal_ns.saturating_sub(base);
            sums[0] += over(sent, serialization);
            sums[1] += over(delivered.saturating_sub(sent), base / 2);
            sums[2] += over(fct.saturating_sub(delivered), base - base / 2);
            flows += 1;
        }
        TailAnatomy::from_parts(flows, sums)
    }

    /// The anatomy of `flows` tail flows whose time beyond the ideal, summed over them, is
    /// `parts` (sender, forward, ACK), in ns; `None` without flows.
    pub fn from_parts(flows: usize, parts: [f64; 3]) -> Option<Self> {
        let total: f64 = parts.iter().sum();
        let share = |x: f64| if total > 0.0 { x / total } else { 0.0 };
        (flows > 0).then(|| TailAnatomy {
            flows,
            excess_ns: total / flows as f64,
            sender: share(parts[0]),
            forward: share(parts[1]),
            ack: share(parts[2]),
        })
    }
}

/// Flow counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCounts {
    /// Flows in the scenario.
    pub total: usize,
    /// Flows that completed.
    pub completed: usize,
}

/// PFC activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PfcSummary {
    /// XOFF frames sent by switches.
    pub pause_frames: u64,
    /// Paused time summed over ports and priorities, ns.
    pub paused_ns: u64,
}

/// Queue depth over every switch data queue and telemetry interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueDepth {
    /// Mean of the time-weighted average depth, bytes.
    pub avg: f64,
    /// 99th percentile of the per-interval maximum depth, bytes.
    pub p99: f64,
}

/// The summary of one run (`sim --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Policy, as given on the command line.
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// Flow counts.
    pub flows: FlowCounts,
    /// Slowdown by size bucket.
    pub slowdown: SlowdownBuckets,
    /// Slowdown by 5% group of flows sorted by size, HPCC's report; empty under 20 completed
    /// flows.
    #[serde(default)]
    pub slowdown_by_size_quantile: Vec<SizeQuantile>,
    /// Where the <100KB p99 tail waited; absent for runs without phase times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_flow_tail: Option<TailAnatomy>,
    /// PFC activity.
    pub pfc: PfcSummary,
    /// Packets dropped.
    pub drops: u64,
    /// CE-marked packets.
    pub ecn_marks: u64,
    /// Congestion notifications sent by receivers (CNP-flagged ACKs or stand-alone CNPs);
    /// absent from summaries written before it was counted.
    #[serde(default)]
    pub cnps: u64,
    /// Mean utilization of host downlinks during the arrival window.
    pub utilization: f64,
    /// Queue depth.
    pub queue_bytes: QueueDepth,
    /// Simulated time at the end of the run, ns.
    pub sim_ns: u64,
    /// Events processed.
    pub events: u64,
    /// Wall-clock seconds of the simulation.
    pub wall_seconds: f64,
}

impl Summary {
    /// Summarize a finished simulation.
    pub fn new(sim: &Simulator, scenario: &str, policy: &str, seed: u64, wall_seconds: f64) -> Self {
        let records = sim.flow_records();
        let c = sim.counters();
        let slowdown = SlowdownBuckets::from_records(&records);
        Summary {
            scenario: scenario.into(),
            policy: policy.into(),
            seed,
            flows: FlowCounts {
                total: records.len(),
                completed: records.iter().filter(|r| r.fct_ns.is_some()).count(),
            },
            small_flow_tail: TailAnatomy::of_small_flows(&records, slowdown.lt_100kb.p99),
            slowdown_by_size_quantile: SizeQuantile::of(&records),
            slowdown,
            pfc: PfcSummary { pause_frames: c.pause_frames, paused_ns: c.paused_ns },
            drops: c.drops,
            ecn_marks: c.ecn_marks,
            cnps: c.cnps,
            utilization: c.utilization,
            queue_bytes: QueueDepth { avg: c.queue_bytes_avg, p99: c.queue_bytes_p99 },
            sim_ns: sim.now().0,
            events: sim.events_processed(),
            wall_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(size_bytes: u64, slowdown: Option<f64>) -> FlowRecord {
        FlowRecord {
            src: 0,
            dst: 1,
            sport: 10_000,
            dport: 100,
            priority: 3,
            size_bytes,
            start_ns: 0,
            fct_ns: slowdown.map(|s| (s * 1_000.0) as u64),
            ideal_ns: 1_000,
            slowdown,
            sent_ns: None,
            delivered_ns: None,
            base_rtt_ns: None,
        }
    }

    #[test]
    fn lt_100kb_holds_every_completed_flow_under_100kb() {
        let records = [
            record(1_000, Some(2.0)),
            record(9_999, Some(3.0)),
            record(10_000, Some(4.0)),
            record(99_999, Some(5.0)),
            record(50_000, None),
            record(100_000, Some(6.0)),
            record(2_000_000, Some(7.0)),
        ];
        let b = SlowdownBuckets::from_records(&records);
        assert_eq!((b.all.n, b.lt_10kb.n, b.kb10_kb100.n, b.kb100_mb1.n, b.ge_1mb.n), (6, 2, 2, 1, 1));
        assert_eq!(b.lt_100kb.n, b.lt_10kb.n + b.kb10_kb100.n);
        assert_eq!(b.lt_100kb.p99, Some(5.0));
        let json = serde_json::to_value(&b).unwrap();
        for key in ["all", "lt_10KB", "10KB_100KB", "100KB_1MB", "ge_1MB", "lt_100KB"] {
            assert!(json[key]["p99"].is_number(), "{key}");
        }
    }

    /// 45 completed flows in 20 groups: group i holds flows floor(45i/20) up to
    /// floor(45(i+1)/20), 2 or 3 each, as HPCC's tool splits them; unfinished flows stay out.
    #[test]
    fn size_quantiles_split_the_completed_flows_sorted_by_size_into_twenty_groups() {
        // Sizes 1000, 2000, ... in reverse order; slowdown = size / 1000.
        let mut records: Vec<FlowRecord> = (1..=45).rev().map(|k| record(k * 1_000, Some(k as f64))).collect();
        records.push(record(500, None));
        let q = SizeQuantile::of(&records);
        assert_eq!(q.len(), SIZE_QUANTILE_BUCKETS);
        let sizes: Vec<usize> = q.iter().map(|g| g.slowdown.n).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 45);
        assert_eq!(&sizes[..4], &[2, 2, 2, 3]);
        assert_eq!(q[0].max_size_bytes, 2_000);
        assert_eq!((q[0].slowdown.p50, q[0].slowdown.p99), (Some(2.0), Some(2.0)));
        assert_eq!(q[3].max_size_bytes, 9_000);
        assert_eq!(q[3].slowdown.p50, Some(8.0), "flows 7, 8, 9 KB: the middle one");
        assert_eq!(q[19].max_size_bytes, 45_000);
        assert!(q.windows(2).all(|w| w[0].max_size_bytes < w[1].max_size_bytes));
        let json = serde_json::to_value(q[3]).unwrap();
        assert_eq!((json["max_size_bytes"].as_u64(), json["n"].as_u64()), (Some(9_000), Some(3)));
        assert!(SizeQuantile::of(&records[..19]).is_empty(), "under 20 flows a group would be empty");
    }

    #[test]
    fn tail_anatomy_splits_the_excess_of_the_tail_flows_by_phase() {
        // Ideal 1 000 ns: 600 ns of base RTT (300 each way) and 400 ns of serialization.
        let timed = |size_bytes: u64, sent: u64, delivered: u64, fct: u64| FlowRecord {
            fct_ns: Some(fct),
            slowdown: Some((fct as f64 / 1_000.0).max(1.0)),
            sent_ns: Some(sent),
            delivered_ns: Some(delivered),
            base_rtt_ns: Some(600),
            ..record(size_bytes, None)
        };
        let records = [
            // The tail: 1 600 ns late at the sender, 1 000 ns forward, 400 ns on the ACK.
            timed(1_000, 2_000, 3_300, 4_000),
            timed(2_000, 400, 1_700, 2_000),
            // Below p99, a large flow, and a flow without phase times: not counted.
            timed(3_000, 400, 700, 1_000),
            timed(500_000, 9_000, 9_300, 9_600),
            record(4_000, Some(9.0)),
        ];
        let a = TailAnatomy::of_small_flows(&records, Some(2.0)).unwrap();
        assert_eq!(a.flows, 2);
        assert_eq!(a.excess_ns, (3_000.0 + 1_000.0) / 2.0);
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
        assert!(close(a.sender, 1_600.0 / 4_000.0), "{a:?}");
        assert!(close(a.forward, (1_000.0 + 1_000.0) / 4_000.0), "{a:?}");
        assert!(close(a.ack, 400.0 / 4_000.0), "{a:?}");
        assert_eq!(TailAnatomy::of_small_flows(&records[4..], Some(2.0)), None);
        assert_eq!(TailAnatomy::of_small_flows(&records, None), None);
    }
}
