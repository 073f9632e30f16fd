//! The `dry-run` backend: settings kept in memory, nothing touched.
//!
//! It answers exactly like a real actuator (capabilities, validation, generations,
//! commit-confirm, the lease, the journal) so that a controller, a script or an operator can
//! rehearse against it. Its queues come from a scenario (what the simulator would build) or
//! from a recorded telemetry file. Telemetry: a recording if one is given (see
//! [`super::replay`]), otherwise none; StreamTelemetry then answers `UNIMPLEMENTED`.

use super::backend::{
    Backend, BackendCaps, BackendError, Bounds, NoTelemetry, QueueCap, QueueKey, TelemetryReceiver, WriteTimes,
};
use super::replay::{self, Recording};
use super::sim::capabilities;
use super::ActuatorError;
use ecn_env::scenario::Scenario;
use ecn_env::{EcnSetting, Simulator};
use ecn_proto::v1::TelemetryBatch;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use tracing::info;

/// Scenario used for the queue list when neither a scenario nor a recording is given.
pub const DEFAULT_SCENARIO: &str = "websearch-50";

/// What the dry-run backend pretends to control.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DryRunOptions {
    /// Take queues, link speeds, PFC levels, buffer and initial settings from this scenario.
    pub scenario: Option<String>,
    /// Scenario seed (only matters for a scenario whose topology depends on it).
    pub seed: Option<u64>,
    /// Replay this recorded telemetry (Parquet or CSV). Without a scenario, the queues are the
    /// recording's, with unknown PFC levels and buffer, and start at the first recorded setting.
    pub telemetry: Option<PathBuf>,
    /// Replay speed: recorded nanoseconds per wall-clock nanosecond.
    pub time_scale: f64,
}

/// Settings in memory.
pub struct DryRunBackend {
    caps: BackendCaps,
    settings: Mutex<Vec<EcnSetting>>,
    telemetry: Option<broadcast::Sender<Arc<TelemetryBatch>>>,
    /// The replay's clock: the `ts_ns` of the batch it sent last.
    replayed_to_ns: Option<Arc<AtomicU64>>,
    /// That clock when the last write was made.
    last_write_ns: AtomicU64,
    stop: Arc<AtomicBool>,
}

impl DryRunBackend {
    /// Build the queue list and, with a recording, start replaying it.
    pub fn start(opts: DryRunOptions) -> Result<DryRunBackend, ActuatorError> {
        let recording = opts.telemetry.as_deref().map(Recording::load).transpose()?;
        let scenario_name = match (&opts.scenario, &recording) {
            (Some(s), _) => Some(s.as_str()),
            (None, None) => Some(DEFAULT_SCENARIO),
            (None, Some(_)) => None,
        };
        let (mut caps, initial) = match scenario_name {
            Some(name) => {
                let sc = Scenario::load(name, opts.seed).map_err(|e| ActuatorError::BadInput(e.to_string()))?;
                let sim = Simulator::new(sc.fabric.clone(), Vec::new())
                    .map_err(|e| ActuatorError::BadInput(format!("{}: {e}", sc.source)))?;
                let caps = capabilities(&sim);
                let initial = (0..caps.queues.len()).map(|q| sim.ecn(q).expect("queue index")).collect();
                (caps, initial)
            }
            None => from_recording(recording.as_ref().expect("a recording")),
        };
        caps.backend = "dry-run".into();
        caps.min_telemetry_interval_ns = 0;
        let stop = Arc::new(AtomicBool::new(false));
        let (mut telemetry, mut replayed_to_ns) = (None, None);
        if let Some(rec) = recording {
            check_recording_queues(&caps, &rec, opts.telemetry.as_deref().expect("path"))?;
            super::pacer::check_time_scale(opts.time_scale)?;
            caps.min_telemetry_interval_ns = rec.interval_ns;
            caps.telemetry_time_scale = opts.time_scale;
            let (tx, _) = broadcast::channel(1024);
            let clock = Arc::new(AtomicU64::new(0));
            let (tx2, clock2, stop2, scale) = (tx.clone(), clock.clone(), stop.clone(), opts.time_scale);
            info!(rows = rec.rows.len(), interval_ns = rec.interval_ns, "replaying recorded telemetry");
            std::thread::Builder::new()
                .name("ecn-replay".into())
                .spawn(move || replay::play(rec, scale, tx2, &clock2, stop2))
                .map_err(|e| ActuatorError::Failed(format!("cannot start the replay thread: {e}")))?;
            telemetry = Some(tx);
            replayed_to_ns = Some(clock);
        }
        Ok(DryRunBackend {
            caps,
            settings: Mutex::new(initial),
            telemetry,
            replayed_to_ns,
            last_write_ns: AtomicU64::new(0),
            stop,
        })
    }
}

/// Queues, link speeds and first settings of a recording, in order of first appearance.
fn from_recording(rec: &Recording) -> (BackendCaps, Vec<EcnSetting>) {
    let mut seen = HashMap::new();
    let (mut queues, mut initial) = (Vec::new(), Vec::new());
    for r in &rec.rows {
        let key = QueueKey { switch: r.switch.clone(), port: r.port.clone(), queue: u32::from(r.queue) };
        if seen.insert(key.clone(), ()).is_none() {
            queues.push(QueueCap { key, link_bps: r.sample.link_bps, pfc_xoff_bytes: 0 });
            initial.push(EcnSetting {
                kmin_bytes: r.sample.kmin_bytes,
                kmax_bytes: r.sample.kmax_bytes,
                pmax: r.sample.pmax,
            });
        }
    }
    let caps = BackendCaps {
        backend: "dry-run".into(),
        queues,
        buffer_bytes: 0,
        bounds: Bounds::for_buffer(0),
        min_telemetry_interval_ns: rec.interval_ns,
        telemetry_time_scale: 1.0,
    };
    (caps, initial)
}

fn check_recording_queues(caps: &BackendCaps, rec: &Recording, path: &std::path::Path) -> Result<(), ActuatorError> {
    let known: std::collections::HashSet<&QueueKey> = caps.queues.iter().map(|q| &q.key).collect();
    for r in &rec.rows {
        let key = QueueKey { switch: r.switch.clone(), port: r.port.clone(), queue: u32::from(r.queue) };
        if !known.contains(&key) {
            return Err(ActuatorError::BadInput(format!(
                "--telemetry {}: queue {key} is not a queue of the scenario",
                path.display()
            )));
        }
    }
    Ok(())
}

impl Backend for DryRunBackend {
    fn capabilities(&self) -> &BackendCaps {
        &self.caps
    }

    fn read_settings(&self) -> Vec<EcnSetting> {
        self.settings.lock().expect("dry-run settings lock").clone()
    }

    fn apply(&self, settings: &[EcnSetting]) -> Result<(), BackendError> {
        if settings.len() != self.caps.queues.len() {
            return Err(BackendError(format!("expected {} settings, got {}", self.caps.queues.len(), settings.len())));
        }
        *self.settings.lock().expect("dry-run settings lock") = settings.to_vec();
        if let Some(clock) = &self.replayed_to_ns {
            self.last_write_ns.store(clock.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        Ok(())
    }

    fn subscribe_telemetry(&self) -> Result<TelemetryReceiver, NoTelemetry> {
        self.telemetry.as_ref().map(|t| t.subscribe()).ok_or_else(|| {
            NoTelemetry::NoSource(
                "a dry-run actuator has no fabric, so no telemetry of its own; start it with --telemetry FILE \
                 to replay a recording"
                    .into(),
            )
        })
    }

    /// The recording does not change with the settings; what a controller judges after a
    /// change is what the recording holds from the replay's present on.
    fn write_times(&self) -> Option<WriteTimes> {
        self.replayed_to_ns.as_ref()?;
        let at = self.last_write_ns.load(Ordering::SeqCst);
        Some(WriteTimes { landed_ns: at, in_effect_from_ns: at })
    }

    /// The replay's present: the `ts_ns` of the batch it sent last.
    fn telemetry_now_ns(&self) -> Option<u64> {
        let at = self.replayed_to_ns.as_ref()?.load(Ordering::SeqCst);
        (at > 0).then_some(at)
    }

    fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for DryRunBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
