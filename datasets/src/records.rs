//! The row types of PRODUCT.md "Data contracts".

use serde::{Deserialize, Serialize};

/// Version of the telemetry schema below. Bump it whenever a column is added, removed or
/// changes meaning; readers refuse files of another major version.
pub const TELEMETRY_SCHEMA_VERSION: &str = "1.0";

/// One telemetry row: one egress queue of one switch port over one sample interval.
///
/// Counter fields are per-interval deltas; queue depths are instantaneous (`queue_bytes`, at
/// the end of the interval) or aggregated over the interval (`_avg` time-weighted, `_max`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetrySample {
    /// End of the sample interval, nanoseconds since the start of the recording.
    pub ts_ns: u64,
    /// Switch name, e.g. `leaf0`.
    pub switch: String,
    /// Egress port name on that switch, e.g. `eth3`.
    pub port: String,
    /// Egress queue (priority) index, 0–7.
    pub queue: u8,
    /// Line rate of the port, bits per second.
    pub link_bps: u64,
    /// Queue depth at the end of the interval, bytes.
    pub queue_bytes: u64,
    /// Time-weighted mean queue depth over the interval, bytes.
    pub queue_bytes_avg: f64,
    /// Maximum queue depth seen during the interval, bytes.
    pub queue_bytes_max: u64,
    /// Bytes transmitted from this queue during the interval.
    pub tx_bytes: u64,
    /// Packets transmitted from this queue during the interval.
    pub tx_pkts: u64,
    /// Packets that left this queue with the CE mark set by this queue.
    pub ecn_marked_pkts: u64,
    /// PFC PAUSE frames for this priority received on this port (the port was told to stop).
    pub pfc_pause_rx: u64,
    /// PFC PAUSE frames for this priority sent out of this port (its ingress buffer was full).
    pub pfc_pause_tx: u64,
    /// Nanoseconds of the interval during which this egress queue was paused.
    pub paused_ns: u64,
    /// Packets dropped at admission whose egress was this queue.
    pub drops: u64,
    /// ECN setting in effect at the end of the interval.
    pub kmin_bytes: u64,
    /// ECN setting in effect at the end of the interval.
    pub kmax_bytes: u64,
    /// ECN setting in effect at the end of the interval, probability in [0, 1].
    pub pmax: f64,
}

/// One flow: its identity, size, timing and slowdown (REFERENCE.md §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRecord {
    /// Source host (node id).
    pub src: u32,
    /// Destination host (node id).
    pub dst: u32,
    /// Source UDP port (HPCC convention: 10000, 10001, ... per (src, dst) pair).
    pub sport: u16,
    /// Destination UDP port.
    pub dport: u16,
    /// Priority group (PFC priority) the flow runs on.
    pub priority: u8,
    /// Application bytes.
    pub size_bytes: u64,
    /// Start time, nanoseconds since the start of the simulation.
    pub start_ns: u64,
    /// Flow completion time in nanoseconds; `None` if the flow had not completed.
    pub fct_ns: Option<u64>,
    /// Standalone (ideal) FCT in nanoseconds, REFERENCE.md §4.
    pub ideal_ns: u64,
    /// max(1, fct / ideal); `None` if the flow had not completed.
    pub slowdown: Option<f64>,
}

/// One validated sample of one queue: a [`TelemetrySample`] without the identity columns.
/// Counters are always per-interval deltas here, whatever the file held.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueueSample {
    /// End of the interval, ns.
    pub ts_ns: u64,
    /// Line rate, b/s.
    pub link_bps: u64,
    /// Depth at the end of the interval, bytes.
    pub queue_bytes: u64,
    /// Time-weighted mean depth, bytes.
    pub queue_bytes_avg: f64,
    /// Maximum depth, bytes.
    pub queue_bytes_max: u64,
    /// Bytes sent in the interval.
    pub tx_bytes: u64,
    /// Packets sent in the interval.
    pub tx_pkts: u64,
    /// Packets CE-marked in the interval.
    pub ecn_marked_pkts: u64,
    /// PAUSE frames received in the interval.
    pub pfc_pause_rx: u64,
    /// PAUSE frames sent in the interval.
    pub pfc_pause_tx: u64,
    /// Paused time in the interval, ns.
    pub paused_ns: u64,
    /// Admission drops in the interval.
    pub drops: u64,
    /// Kmin in effect, bytes.
    pub kmin_bytes: u64,
    /// Kmax in effect, bytes.
    pub kmax_bytes: u64,
    /// Pmax in effect.
    pub pmax: f64,
}

impl QueueSample {
    /// The sample part of a full row.
    pub fn from_row(r: &TelemetrySample) -> Self {
        QueueSample {
            ts_ns: r.ts_ns,
            link_bps: r.link_bps,
            queue_bytes: r.queue_bytes,
            queue_bytes_avg: r.queue_bytes_avg,
            queue_bytes_max: r.queue_bytes_max,
            tx_bytes: r.tx_bytes,
            tx_pkts: r.tx_pkts,
            ecn_marked_pkts: r.ecn_marked_pkts,
            pfc_pause_rx: r.pfc_pause_rx,
            pfc_pause_tx: r.pfc_pause_tx,
            paused_ns: r.paused_ns,
            drops: r.drops,
            kmin_bytes: r.kmin_bytes,
            kmax_bytes: r.kmax_bytes,
            pmax: r.pmax,
        }
    }
}
