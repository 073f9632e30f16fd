//! Which switch data queues each flow's packets cross, and how much slowdown flows accrued
//! beyond their ideal FCT while crossing them.
//!
//! Switch counters cannot see a flow that waits at its own NIC because marks cut its rate, and
//! in websearch-50 that is where half or more of the small-flow tail waits once marking is
//! aggressive (docs/learning-experiments.md, "Where the tail waits, measured"). The simulator
//! can: this is a training signal that only a simulator has.

use super::{queue_slot, Simulator, PRIORITIES};
use crate::topology::NodeKind;
use crate::units::Nanos;
use std::ops::Range;

/// The data queues (indices into [`Simulator::queues`]) that every flow's data packets cross,
/// in hop order, flow after flow.
#[derive(Debug)]
pub(super) struct FlowPaths {
    /// Per flow, where its queues start in `queues` (one extra at the end).
    start: Vec<u32>,
    queues: Vec<u32>,
}

impl Simulator {
    /// Every flow's data path: the same ECMP choices the packets make (REFERENCE.md §3).
    fn data_paths(&self) -> FlowPaths {
        let mut queue_of = vec![u32::MAX; self.ports.len() * PRIORITIES];
        for (q, info) in self.data_queues.iter().enumerate() {
            queue_of[queue_slot(info.port_id as usize, info.queue as usize)] = q as u32;
        }
        let (mut start, mut hops) = (Vec::with_capacity(self.flows.len() + 1), Vec::new());
        for f in &self.flows {
            start.push(hops.len() as u32);
            let (dst, prio) = (f.spec.dst as usize, f.spec.priority as usize);
            let nic_port = self.nics[self.node_nic[f.spec.src as usize] as usize].port;
            let mut node = self.ports[(nic_port ^ 1) as usize].node as usize;
            // A path in a validated topology is shorter than the node count.
            for _ in 0..self.n_nodes {
                if self.node_kind[node] != NodeKind::Switch {
                    break;
                }
                let Some(egress) = self.ecmp_egress(node, dst, f.key_fwd) else { break };
                if let Some(&q) = queue_of.get(queue_slot(egress as usize, prio)).filter(|&&q| q != u32::MAX) {
                    hops.push(q);
                }
                node = self.ports[(egress ^ 1) as usize].node as usize;
            }
        }
        start.push(hops.len() as u32);
        FlowPaths { start, queues: hops }
    }

    /// Adds to `out[q]`, for every flow of a size in `sizes` whose data crosses queue `q`, how
    /// much of its slowdown accrued within `[from, to)`. With `power` 1 that is the time the
    /// flow spent past its ideal FCT then, in units of that ideal FCT, and over the flow's life
    /// it sums to slowdown − 1. With `power` p it is the same stretch of excess x measured as
    /// x^p / p, summing to (slowdown − 1)^p / p: a flow already far behind weighs more, as the
    /// tail percentiles do. `out` has one slot per queue.
    pub fn flow_wait(&self, from: Nanos, to: Nanos, sizes: Range<u64>, power: f64, out: &mut [f64]) {
        let paths = self.flow_paths.get_or_init(|| self.data_paths());
        for (i, f) in self.flows[..self.next_flow].iter().enumerate() {
            if !sizes.contains(&f.spec.size_bytes) {
                continue;
            }
            let late_from = (f.spec.start.0 + f.ideal_ns).max(from.0);
            let until = f.finished_at.unwrap_or(u64::MAX).min(to.0).min(self.now);
            if until <= late_from {
                continue;
            }
            let excess = |t: u64| (t - f.spec.start.0 - f.ideal_ns) as f64 / f.ideal_ns.max(1) as f64;
            let wait = (excess(until).powf(power) - excess(late_from).powf(power)) / power;
            let (a, b) = (paths.start[i] as usize, paths.start[i + 1] as usize);
            for &q in &paths.queues[a..b] {
                out[q as usize] += wait;
            }
        }
    }
}
