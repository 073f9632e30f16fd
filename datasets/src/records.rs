//! The row types of PRODUCT.md "Data contracts".

use serde::{Deserialize, Serialize};

/// Version of the telemetry schema below. Bump it whenever a column is added, removed or
/// changes meaning; readers refuse files of another major version. 1.1 added the optional
/// `span_ns` column.
pub const TELEMETRY_SCHEMA_VERSION: &str = "1.1";

/// One telemetry row: one egress queue of one switch port over one sample interval; the
/// queue's identity and its [`QueueSample`]. Files hold it flat, one column per field (README
/// "Telemetry schema").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetrySample {
    /// Switch name, e.g. `leaf0`.
    pub switch: String,
    /// Egress port name on that switch, e.g. `eth3`.
    pub port: String,
    /// Egress queue (priority) index, 0–7.
    pub queue: u8,
    /// What the queue did over the interval.
    #[serde(flatten)]
    pub sample: QueueSample,
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
    /// Nanoseconds from the start until the last byte first left the sender's NIC; `None` if
    /// it never did, or if the source (an HPCC FCT file) does not record it.
    pub sent_ns: Option<u64>,
    /// Nanoseconds from the start until the receiver first held every byte in order; `None` as
    /// for `sent_ns`. FCT − `delivered_ns` is the wait for the last ACK.
    pub delivered_ns: Option<u64>,
    /// The base RTT part of `ideal_ns` (propagation and one MTU's serialization per link, both
    /// ways); the rest is the flow's serialization at the bottleneck. `None` when unknown.
    pub base_rtt_ns: Option<u64>,
}

/// One queue over one sample interval: a telemetry row without the identity columns.
///
/// Counter fields are per-interval deltas. Rows read from a file of cumulative counters hold
/// them as written until validation turns them into deltas. Queue depths are instantaneous
/// (`queue_bytes`, at the end of the interval) or aggregated over the interval (`_avg`
/// time-weighted, `_max`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct QueueSample {
    /// End of the sample interval, nanoseconds since the start of the recording.
    pub ts_ns: u64,
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
    /// Nanoseconds the counters and depth aggregates cover, ending at `ts_ns`; 0 leaves it
    /// implicit: the step since the queue's previous row. A poller states it where a poll came
    /// late (the row then covers more than one interval) or after a counter reset (less), so
    /// that a late poll is not mistaken for lost rows. Optional in files (schema 1.1; a 1.0
    /// file reads as 0).
    #[serde(default)]
    pub span_ns: u64,
}
