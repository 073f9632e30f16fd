//! The `sim` backend: a scenario of the packet-level simulator running in scaled wall-clock
//! time behind the actuator, standing in for a real fabric.
//!
//! The simulator runs on its own thread, one sample interval at a time, paced so that
//! `time_scale` simulated nanoseconds pass per wall-clock nanosecond. After each interval it
//! publishes the telemetry rows as one batch (a sample per data queue, in capabilities order).
//! ECN changes from the service are picked up between intervals, all queues at once, so an
//! apply is atomic in simulated time.
//!
//! When the scenario ends (all flows done, or its hard stop), the next run starts at once with
//! the next seed and the current ECN settings, so a long-running controller keeps getting
//! traffic. Telemetry timestamps (`ts_ns`) are simulated nanoseconds since the backend started
//! and keep growing across runs.

use super::backend::{
    Backend, BackendCaps, BackendError, Bounds, NoTelemetry, QueueCap, QueueKey, TelemetryReceiver, WriteTimes,
};
use super::pacer::Pacer;
use super::telemetry::batches_from_rows;
use super::ActuatorError;
use ecn_env::fabric::MarkingFault;
use ecn_env::scenario::Scenario;
use ecn_env::summary::Summary;
use ecn_env::{EcnSetting, Nanos, Simulator};
use ecn_proto::v1::TelemetryBatch;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::broadcast;
use tracing::{debug, error, info, warn};

/// Completed-run summaries kept in memory.
const RUNS_KEPT: usize = 100;
/// Telemetry batches buffered for slow subscribers before they skip ahead.
const TELEMETRY_BUFFER: usize = 1024;

/// How to run the simulated fabric.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// Built-in scenario name or scenario file.
    pub scenario: String,
    /// Seed of the first run (default: the scenario's); each restart uses the next one.
    pub seed: Option<u64>,
    /// Simulated nanoseconds per wall-clock nanosecond (0.01 = 100 times slower than real
    /// time). The simulator cannot run faster than its own speed; when asked to, it runs as fast
    /// as it can.
    pub time_scale: f64,
    /// Pause storms to inject (a test and demo knob).
    pub storms: Vec<StormSpec>,
    /// A write that lands mis-programmed (a test and demo knob).
    pub bad_write: Option<BadWrite>,
}

/// Fault injection, for tests and demos: write number `write` (1 = the first apply, rollback or
/// revert) lands mis-programmed, and each queue it changes marks as `fault` says until a later
/// write changes that queue again ([`Simulator::set_marking_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadWrite {
    /// Which write, counting from 1.
    pub write: u64,
    /// How the queues it changes mark.
    pub fault: MarkingFault,
}

/// Default `--time-scale`: 100 times slower than real time, so a 100 µs sample interval
/// arrives every 10 ms of wall-clock time, which a loaded laptop keeps up with.
pub const DEFAULT_TIME_SCALE: f64 = 0.01;

/// The scenario `--target sim` runs without `--scenario`.
pub const DEFAULT_SIM_SCENARIO: &str = "websearch-50";

/// Fault injection, for tests and demos: from simulated time `at` (since the backend
/// started, the clock of telemetry `ts_ns`), the device downstream of queue `queue` (an
/// index into the capabilities' queue list) holds PFC PAUSE on it for `duration`. A storm
/// still running when the scenario restarts ends with that run.
///
/// Command-line form: `QUEUE@SIMTIME:DURATION`, e.g. `3@5ms:20ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormSpec {
    /// Queue index in capabilities order.
    pub queue: usize,
    /// Simulated time of onset.
    pub at: Nanos,
    /// How long the pause holds.
    pub duration: Nanos,
}

impl FromStr for StormSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<StormSpec, String> {
        let form = || format!("'{s}': expected QUEUE@SIMTIME:DURATION, e.g. 3@5ms:20ms");
        let (q, rest) = s.split_once('@').ok_or_else(form)?;
        let (at, dur) = rest.split_once(':').ok_or_else(form)?;
        let queue = q.trim().parse().map_err(|_| format!("'{s}': QUEUE '{q}' is not a queue index"))?;
        let at: Nanos = at.trim().parse().map_err(|e| format!("'{s}': SIMTIME: {e}"))?;
        let duration: Nanos = dur.trim().parse().map_err(|e| format!("'{s}': DURATION: {e}"))?;
        if duration.0 == 0 {
            return Err(format!("'{s}': DURATION must be positive"));
        }
        Ok(StormSpec { queue, at, duration })
    }
}

/// What the service has written: the settings, the marking faults the injected bad write left
/// on the queues it changed, and a version bumped by every write.
#[derive(Debug)]
struct Written {
    settings: Vec<EcnSetting>,
    marking_faults: Vec<Option<MarkingFault>>,
    version: u64,
    /// When (backend clock, that of telemetry `ts_ns`) the simulator thread next reads the
    /// settings: a write made now is in effect from then. The interval it is simulating now
    /// (or pacing towards) already runs with the settings it read at its start.
    next_read_ns: u64,
    /// `next_read_ns` when the last write was made: when it took effect.
    last_write_ns: u64,
}

/// State shared between the service side and the simulator thread.
#[derive(Debug)]
struct Shared {
    written: Mutex<Written>,
    bad_write: Option<BadWrite>,
    runs: Mutex<Vec<Summary>>,
    /// Scenario runs completed, including those no longer kept; changed under `runs`' lock.
    runs_completed: AtomicU64,
    stop: AtomicBool,
    queue_count: usize,
    /// When the first run's first flow starts (its arrival window), on the telemetry clock.
    first_flow_ns: u64,
}

/// In-process controls of a running simulated fabric, for the embedded demo and tests.
#[derive(Debug, Clone)]
pub struct SimControl {
    shared: Arc<Shared>,
}

impl SimControl {
    /// Summaries of the scenario runs completed so far (the last 100), oldest first, and how
    /// many completed in all, read together.
    pub fn completed_runs(&self) -> (Vec<Summary>, u64) {
        let runs = self.shared.runs.lock().expect("sim runs lock");
        // Counted under the same lock as the runs are kept.
        (runs.clone(), self.shared.runs_completed.load(Ordering::Relaxed))
    }

    /// When the first run's first flow starts, on the telemetry clock (`ts_ns`): an HPCC
    /// configuration's come seconds in, after a lead-in the fabric runs at once, unpaced.
    pub fn first_flow_ns(&self) -> u64 {
        self.shared.first_flow_ns
    }
}

/// The simulated fabric behind the actuator.
pub struct SimBackend {
    caps: BackendCaps,
    shared: Arc<Shared>,
    /// Weak, so that the channel closes (and subscribers see the stream end) if the simulator
    /// thread dies: the thread holds the only strong sender.
    telemetry: broadcast::WeakSender<Arc<TelemetryBatch>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl SimBackend {
    /// Load the scenario, build the simulator and start its thread.
    pub fn start(opts: SimOptions) -> Result<SimBackend, ActuatorError> {
        super::pacer::check_time_scale(opts.time_scale)?;
        let scenario = Scenario::load(&opts.scenario, opts.seed)
            .map_err(|e| ActuatorError::BadInput(format!("--scenario {e}")))?;
        let sim = build(&scenario).map_err(ActuatorError::BadInput)?;
        let caps = BackendCaps { telemetry_time_scale: opts.time_scale, ..capabilities(&sim) };
        for s in &opts.storms {
            if s.queue >= caps.queues.len() {
                return Err(ActuatorError::BadInput(format!(
                    "--inject-storm {}@{}:{}: queue {} does not exist (scenario {} has {} queues, 0..{})",
                    s.queue,
                    s.at,
                    s.duration,
                    s.queue,
                    scenario.name,
                    caps.queues.len(),
                    caps.queues.len() - 1
                )));
            }
        }
        let initial: Vec<EcnSetting> = (0..caps.queues.len()).map(|q| sim.ecn(q).expect("queue index")).collect();
        let shared = Arc::new(Shared {
            written: Mutex::new(Written {
                marking_faults: vec![None; initial.len()],
                settings: initial,
                version: 0,
                next_read_ns: 0,
                last_write_ns: 0,
            }),
            bad_write: opts.bad_write,
            runs: Mutex::new(Vec::new()),
            runs_completed: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            queue_count: caps.queues.len(),
            first_flow_ns: scenario.fabric.window_start.0,
        });
        let (telemetry, _) = broadcast::channel(TELEMETRY_BUFFER);
        info!(
            scenario = %scenario.name,
            source = %scenario.source,
            seed = scenario.seed,
            queues = caps.queues.len(),
            sample_interval = %scenario.fabric.sample_interval,
            time_scale = opts.time_scale,
            storms = opts.storms.len(),
            "simulated fabric starting"
        );
        let mut storms = opts.storms.clone();
        storms.sort_by_key(|s| s.at);
        let weak = telemetry.downgrade();
        let runner = Runner {
            source: opts.scenario.clone(),
            scenario,
            sim,
            shared: shared.clone(),
            telemetry,
            time_scale: opts.time_scale,
            storms,
        };
        let thread = std::thread::Builder::new()
            .name("ecn-sim".into())
            .spawn(move || runner.run())
            .map_err(|e| ActuatorError::Failed(format!("cannot start the simulator thread: {e}")))?;
        Ok(SimBackend { caps, shared, telemetry: weak, thread: Mutex::new(Some(thread)) })
    }

    /// True while the simulator thread runs.
    fn running(&self) -> bool {
        !self.shared.stop.load(Ordering::Relaxed)
            && self.thread.lock().expect("sim thread lock").as_ref().is_some_and(|t| !t.is_finished())
    }

    /// In-process controls (run summaries, pause storms).
    pub fn control(&self) -> SimControl {
        SimControl { shared: self.shared.clone() }
    }
}

impl Backend for SimBackend {
    fn capabilities(&self) -> &BackendCaps {
        &self.caps
    }

    fn read_settings(&self) -> Vec<EcnSetting> {
        self.shared.written.lock().expect("sim settings lock").settings.clone()
    }

    fn apply(&self, settings: &[EcnSetting]) -> Result<(), BackendError> {
        if settings.len() != self.caps.queues.len() {
            return Err(BackendError(format!("expected {} settings, got {}", self.caps.queues.len(), settings.len())));
        }
        if let Some((q, e)) = settings.iter().enumerate().find_map(|(q, s)| s.validate().err().map(|e| (q, e))) {
            return Err(BackendError(format!("queue {}: {e}", self.caps.queues[q].key)));
        }
        if !self.running() {
            return Err(BackendError("the simulator has stopped (see the log)".into()));
        }
        let mut w = self.shared.written.lock().expect("sim settings lock");
        w.version += 1;
        w.last_write_ns = w.next_read_ns;
        let fault = self.shared.bad_write.filter(|b| b.write == w.version).map(|b| b.fault);
        for (q, s) in settings.iter().enumerate() {
            if *s != w.settings[q] {
                w.settings[q] = *s;
                w.marking_faults[q] = fault;
            }
        }
        if let Some(fault) = fault {
            let queues = w.marking_faults.iter().filter(|f| f.is_some()).count();
            let marks = match fault {
                MarkingFault::MarkEvery => "every packet",
                MarkingFault::MarkNone => "no packet",
            };
            warn!(
                write = w.version,
                queues, "injected fault: this write lands mis-programmed, its queues mark {marks}"
            );
        }
        Ok(())
    }

    fn subscribe_telemetry(&self) -> Result<TelemetryReceiver, NoTelemetry> {
        self.telemetry
            .upgrade()
            .map(|t| t.subscribe())
            .ok_or_else(|| NoTelemetry::Stopped("the simulator has stopped (see the actuator's log)".into()))
    }

    /// Settings change between intervals, so the write lands and takes effect at once.
    fn write_times(&self) -> Option<WriteTimes> {
        let at = self.shared.written.lock().expect("sim settings lock").last_write_ns;
        Some(WriteTimes { landed_ns: at, in_effect_from_ns: at })
    }

    /// The end of the interval the simulator is running or pacing towards: the `ts_ns` of the
    /// next batch it publishes.
    fn telemetry_now_ns(&self) -> Option<u64> {
        let at = self.shared.written.lock().expect("sim settings lock").next_read_ns;
        (at > 0).then_some(at)
    }

    fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.lock().expect("sim thread lock").take() {
            let _ = t.join();
        }
    }
}

impl Drop for SimBackend {
    fn drop(&mut self) {
        // Never leave the thread running without a server in front of it.
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

fn build(scenario: &Scenario) -> Result<Simulator, String> {
    Simulator::new(scenario.fabric.clone(), scenario.flows.clone()).map_err(|e| format!("{}: {e}", scenario.source))
}

/// Capabilities of a simulated fabric (also what dry-run advertises for a scenario).
pub fn capabilities(sim: &Simulator) -> BackendCaps {
    let queues = sim
        .queues()
        .iter()
        .enumerate()
        .map(|(i, q)| QueueCap {
            key: QueueKey { switch: q.switch.clone(), port: q.port.clone(), queue: u32::from(q.queue) },
            link_bps: q.link.0,
            pfc_xoff_bytes: sim.pfc_xoff_bytes(i).unwrap_or(0),
        })
        .collect();
    BackendCaps {
        backend: "sim".into(),
        queues,
        buffer_bytes: sim.buffer_bytes(),
        bounds: Bounds::for_buffer(sim.buffer_bytes()),
        min_telemetry_interval_ns: sim.config().sample_interval.0,
        telemetry_time_scale: 1.0,
    }
}

/// The simulator thread.
struct Runner {
    source: String,
    scenario: Scenario,
    sim: Simulator,
    shared: Arc<Shared>,
    telemetry: broadcast::Sender<Arc<TelemetryBatch>>,
    time_scale: f64,
    /// Scheduled storms not yet started, by onset.
    storms: Vec<StormSpec>,
}

impl Runner {
    /// Send the intervals the simulator has closed, on the backend clock (`offset` + run time).
    fn publish_telemetry(&mut self, offset: u64) {
        // The simulator counts every mark.
        for b in batches_from_rows(&self.sim.take_telemetry(), offset, true) {
            // No subscriber is not an error: telemetry of an unwatched fabric is dropped.
            let _ = self.telemetry.send(Arc::new(b));
        }
    }

    fn run(mut self) {
        let interval = self.sim.config().sample_interval.0.max(1);
        // Simulated time (backend clock) at which the current run started.
        let mut offset = 0u64;
        let mut version = 0u64;
        let mut pacer = Pacer::new(self.time_scale, 0);
        let mut run_wall = Instant::now();
        let mut runs = 0u64;
        loop {
            if self.shared.stop.load(Ordering::Relaxed) {
                break;
            }
            // Nothing happens in a fabric before its first flow, and no sample is taken. An
            // HPCC configuration's flows start late (ls16's at 2 s): paced, that lead-in kept
            // subscribers waiting 200 s at the default time scale for nothing. It runs at
            // once, and pacing starts from its end.
            let lead_in = self.sim.config().window_start.0;
            if self.sim.now().0 < lead_in {
                self.sim.run_until(Nanos(lead_in));
                pacer = Pacer::new(self.time_scale, offset + lead_in);
            }
            let local = self.sim.now().0;
            self.start_due_storms(offset + local);
            let stop_at = self.sim.config().stop_at.0;
            let mut target = (local / interval + 1) * interval;
            if let Some(s) = self.storms.first() {
                target = target.min(s.at.0.saturating_sub(offset).max(local + 1));
            }
            let target = target.min(stop_at.max(local + 1));
            version = self.sync_settings(version, false, offset + target);
            if !pacer.wait_until(offset + target, &self.shared.stop) {
                break;
            }
            self.sim.run_until(Nanos(target));
            self.publish_telemetry(offset);
            let all_done = self.sim.all_flows_done() && !self.scenario.flows.is_empty();
            if all_done || self.sim.now().0 >= stop_at {
                // A run that ends between sample times (a hard stop off the grid, a storm's
                // onset) closes its last, partial interval: its counters are telemetry too.
                self.sim.close_partial_interval();
                self.publish_telemetry(offset);
                runs += 1;
                let s = Summary::new(
                    &self.sim,
                    &self.scenario.name,
                    "actuator",
                    self.scenario.seed,
                    run_wall.elapsed().as_secs_f64(),
                );
                info!(
                    run = runs,
                    seed = s.seed,
                    flows = s.flows.total,
                    completed = s.flows.completed,
                    p99_slowdown = s.slowdown.all.p99,
                    pause_frames = s.pfc.pause_frames,
                    "scenario run finished; restarting with the next seed"
                );
                {
                    let mut r = self.shared.runs.lock().expect("sim runs lock");
                    r.push(s);
                    if r.len() > RUNS_KEPT {
                        r.remove(0);
                    }
                    self.shared.runs_completed.fetch_add(1, Ordering::Relaxed);
                }
                offset += self.sim.now().0.max(interval);
                self.restart();
                version = self.sync_settings(version, true, offset);
                run_wall = Instant::now();
            }
        }
        debug!("simulator thread stopped");
    }

    /// Put the written settings (and injected marking faults) in effect if they changed, or
    /// always, on a fresh simulator; the next read is at `next_read_ns` (backend clock).
    fn sync_settings(&mut self, seen: u64, force: bool, next_read_ns: u64) -> u64 {
        let mut w = self.shared.written.lock().expect("sim settings lock");
        w.next_read_ns = next_read_ns;
        if w.version == seen && !force {
            return seen;
        }
        for (q, (s, fault)) in w.settings.iter().zip(&w.marking_faults).enumerate() {
            // The service validated the set; an error here would be a bug, not bad input.
            if let Err(e) = self.sim.set_ecn(q, *s).and_then(|()| self.sim.set_marking_fault(q, *fault)) {
                error!(queue = q, "cannot set ECN in the simulator: {e}");
            }
        }
        debug!(version = w.version, at_ns = self.sim.now().0, "ECN settings in effect");
        w.version
    }

    fn start_due_storms(&mut self, now: u64) {
        while self.storms.first().is_some_and(|s| s.at.0 <= now) {
            let s = self.storms.remove(0);
            self.storm(s.queue, s.duration, now);
        }
    }

    fn storm(&mut self, q: usize, duration: Nanos, now: u64) {
        match self.sim.inject_pause_storm(q, duration) {
            Ok(()) => warn!(queue = q, at_ns = now, duration = %duration, "injected a PFC pause storm"),
            Err(e) => error!(queue = q, "cannot inject a pause storm: {e}"),
        }
    }

    /// A fresh simulator for the next seed; on any problem, the same scenario again.
    fn restart(&mut self) {
        let seed = self.scenario.seed.wrapping_add(1);
        match Scenario::load(&self.source, Some(seed)) {
            Ok(next) => match build(&next) {
                Ok(sim) if sim.queues().len() == self.shared.queue_count => {
                    self.scenario = next;
                    self.sim = sim;
                    return;
                }
                Ok(_) => error!(source = %self.source, "the scenario's queues changed; repeating the previous run"),
                Err(e) => error!("cannot build the next run: {e}; repeating the previous run"),
            },
            Err(e) => error!("cannot reload the scenario: {e}; repeating the previous run"),
        }
        match build(&self.scenario) {
            Ok(sim) => self.sim = sim,
            Err(e) => {
                error!("cannot rebuild the simulator: {e}; telemetry stops");
                self.shared.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storm_specs() {
        let s: StormSpec = "3@5ms:20ms".parse().unwrap();
        assert_eq!(s, StormSpec { queue: 3, at: Nanos(5_000_000), duration: Nanos(20_000_000) });
        for bad in ["3", "x@1ms:1ms", "3@1:1ms", "3@1ms:0ms", "3@1ms"] {
            assert!(bad.parse::<StormSpec>().is_err(), "{bad}");
        }
    }
}
