//! What the gRPC service needs from whatever owns the ECN settings: a switch, a simulated
//! fabric, or nothing at all (dry-run).
//!
//! The service does everything that is the same for every backend (generations,
//! commit-confirm, the writer lease, validation, the journal), so a backend only has to say
//! what it controls, read and write a complete set of settings, and publish telemetry.

use ecn_env::EcnSetting;
use ecn_proto::v1::{self as pb, TelemetryBatch};
use std::fmt;
use std::sync::Arc;
use tokio::sync::broadcast;

/// One egress queue: switch, port, priority. The identity the wire contract uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey {
    /// Switch name, e.g. `leaf0`.
    pub switch: String,
    /// Port name on that switch, e.g. `eth3`.
    pub port: String,
    /// Priority (egress queue index).
    pub queue: u32,
}

impl From<&pb::QueueId> for QueueKey {
    fn from(id: &pb::QueueId) -> Self {
        QueueKey { switch: id.switch.clone(), port: id.port.clone(), queue: id.queue }
    }
}

impl fmt::Display for QueueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.switch, self.port, self.queue)
    }
}

/// A queue the backend controls, with what the safety checks need to know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueCap {
    /// Identity.
    pub key: QueueKey,
    /// Line rate of the port, bits per second.
    pub link_bps: u64,
    /// PFC XOFF level, bytes, of the ingress on this queue's own port (its link's other
    /// direction) at an empty shared buffer; 0 when unknown. Not the level of the ingresses
    /// that feed the queue: a queue builds only when its feeders send faster than its port, so
    /// each holds a share of it, and in a leaf–spine fabric this level is the lower figure
    /// (`Simulator::pfc_xoff_bytes`).
    pub pfc_xoff_bytes: u64,
}

/// Limits every setting must respect (the wire `Bounds`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Smallest Kmin accepted, bytes.
    pub kmin_min_bytes: u64,
    /// Largest Kmax accepted, bytes.
    pub kmax_max_bytes: u64,
    /// Smallest Pmax accepted.
    pub pmax_min: f64,
    /// Largest Pmax accepted.
    pub pmax_max: f64,
    /// Kmin and Kmax must be multiples of this (1 = any byte count).
    pub granularity_bytes: u64,
}

impl Bounds {
    /// Limits for a fabric with the given per-switch buffer: any Kmin from 1 KB, any Kmax up to
    /// the buffer (a queue cannot grow beyond it), any Pmax in [0, 1], byte granularity.
    ///
    /// 1 KB is about one MTU-sized packet: a lower Kmin marks nearly every packet, which is a
    /// configuration mistake rather than a tuning choice.
    pub fn for_buffer(buffer_bytes: u64) -> Bounds {
        Bounds {
            kmin_min_bytes: 1_000,
            kmax_max_bytes: if buffer_bytes == 0 { u64::MAX } else { buffer_bytes },
            pmax_min: 0.0,
            pmax_max: 1.0,
            granularity_bytes: 1,
        }
    }
}

/// What a backend controls and within which limits (the wire `Capabilities`).
#[derive(Debug, Clone, PartialEq)]
pub struct BackendCaps {
    /// Backend kind for `Capabilities.backend`: `sim`, `dry-run`, ...
    pub backend: String,
    /// The queues, in a stable order; settings vectors are indexed the same way.
    pub queues: Vec<QueueCap>,
    /// Shared buffer per switch, bytes; 0 when unknown.
    pub buffer_bytes: u64,
    /// Limits on every setting.
    pub bounds: Bounds,
    /// Native telemetry interval in the telemetry's own clock (`ts_ns`); 0 = no telemetry.
    pub min_telemetry_interval_ns: u64,
    /// Telemetry-clock nanoseconds per wall-clock nanosecond, at most: 1 for a switch, the
    /// `--time-scale` of a simulated or replayed fabric.
    pub telemetry_time_scale: f64,
}

/// `interval_ns` on the telemetry clock, in wall-clock time at `time_scale` telemetry ns per
/// wall-clock ns (0, or anything not a positive number, counts as 1: real time).
pub fn wall_interval(interval_ns: u64, time_scale: f64) -> std::time::Duration {
    let scale = if time_scale.is_finite() && time_scale > 0.0 { time_scale } else { 1.0 };
    std::time::Duration::try_from_secs_f64(interval_ns as f64 / scale / 1e9).unwrap_or(std::time::Duration::MAX)
}

/// When a write changed the device, on the telemetry's clock (`ts_ns`), so that a health
/// check compares intervals measured wholly before it with intervals measured wholly after.
/// Erring outwards is safe (an interval left out of both windows); erring inwards is not (a
/// change judged on intervals from before it, or against intervals from after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTimes {
    /// No interval that ends at or before this saw the write.
    pub landed_ns: u64,
    /// Every interval that starts at or after this was measured under the write.
    pub in_effect_from_ns: u64,
}

/// A backend could not do what was asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BackendError(pub String);

/// Why a backend cannot serve telemetry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoTelemetry {
    /// It has no telemetry source at all (`UNIMPLEMENTED`); the text says how to get one.
    NoSource(String),
    /// Its source has stopped (`UNAVAILABLE`), e.g. the simulator thread died.
    Stopped(String),
}

/// Receiving end of a backend's telemetry: one batch (a sample per queue) per native interval.
pub type TelemetryReceiver = broadcast::Receiver<Arc<TelemetryBatch>>;

/// The device side of the actuator.
///
/// Implementations must be cheap to call from async code: [`Backend::apply`] and
/// [`Backend::read_settings`] run under the service's state lock, so they must not block for
/// long (hand work to a thread instead, as the simulator backend does).
pub trait Backend: Send + Sync + 'static {
    /// What this backend controls. Fixed for the backend's lifetime.
    fn capabilities(&self) -> &BackendCaps;

    /// The settings in effect, one per queue of [`BackendCaps::queues`], in that order.
    fn read_settings(&self) -> Vec<EcnSetting>;

    /// Put a complete set of settings (one per queue, already validated) in effect at once.
    ///
    /// All-or-nothing: on error nothing may have changed.
    fn apply(&self, settings: &[EcnSetting]) -> Result<(), BackendError>;

    /// A new subscription to the telemetry stream, or why there is none.
    fn subscribe_telemetry(&self) -> Result<TelemetryReceiver, NoTelemetry>;

    /// Called right after [`Backend::apply`] succeeded: when, on the telemetry's clock, the
    /// write landed and from when it is in effect. `None`: no telemetry clock, as a backend
    /// without telemetry has none.
    fn write_times(&self) -> Option<WriteTimes> {
        None
    }

    /// The present on the telemetry's clock: no earlier than the `ts_ns` of any batch already
    /// published, and at most one native interval later. A controller compares it with the
    /// newest `ts_ns` it has read to see how far behind the fabric it is. `None`: no telemetry
    /// clock, or none running yet.
    fn telemetry_now_ns(&self) -> Option<u64> {
        None
    }

    /// Whether the device keeps what it was given when the actuator dies, as a switch does
    /// and a simulator started afresh does not. An actuator for such a device refuses a
    /// journal that ends on an unconfirmed change: nothing would revert it.
    fn keeps_changes_across_restarts(&self) -> bool {
        false
    }

    /// Whether a failed [`Backend::apply`] may still take effect: the device did not answer,
    /// and the write can still land (SONiC: a transaction held on the network path that could
    /// not be fenced off). The backend must then put the settings last applied back by itself
    /// once it can, and report false from then on. While it reports true the device may hold
    /// settings that nobody confirmed. The default (a device that always answers) is false.
    fn in_doubt(&self) -> bool {
        false
    }

    /// Stop background work. Called once when the server stops; the default does nothing.
    fn shutdown(&self) {}
}
