//! The online controller: watch telemetry, decide per-queue ECN settings, and (in enforce
//! mode) apply them through an actuator with commit-confirm, health checks and rollback.
//!
//! One decision round per `interval`:
//! 1. the policy proposes a setting for every queue;
//! 2. [`guardrails`] bound it, or fall back to the baseline on bad telemetry;
//! 3. shadow mode logs the decision; enforce mode applies the changed queues in one atomic
//!    Apply with a confirm deadline, then watches [`health`] for `window` telemetry intervals
//!    and confirms, or rolls back and keeps the rolled-back queues on their known-good setting
//!    for a quarantine period.
//!
//! This module holds the loop and its decisions; module `changes` holds enforce mode's writes
//! (apply, health check, confirm or roll back, read-back after an unknown outcome, kill switch),
//! `freshness` how far behind the fabric the telemetry is, and `client` the connection to the
//! actuator.
//!
//! The actuator enforces its own limits and reverts unconfirmed changes by itself, so a
//! controller that dies or hangs leaves the last confirmed settings in place.

pub mod exporter;
pub mod guardrails;
pub mod health;
pub mod log;
pub mod metrics;
pub mod requests;
pub mod telemetry;

mod changes;
mod client;
mod freshness;

pub use client::{connect, Client};

use crate::actuator::backend::wall_interval;
use crate::error::CliError;
use crate::learned::{Proposal, Untrained};
use crate::policy::Policy;
use changes::{count_rollback, Pending};
use ecn_env::EcnSetting;
use ecn_proto::v1 as pb;
use freshness::Freshness;
use guardrails::{ChangeBudget, Clamp, GuardrailConfig, Guardrails, QueueContext};
use health::HealthConfig;
use log::{unix_ms, Decision, DecisionLog};
use metrics::{Metrics, QueueLabels, TargetSeries};
use requests::{Requests, StopReason};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use telemetry::QueueWatch;
use tracing::{debug, info, warn, Instrument};

/// Watch only, or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Decide and log; never write.
    Shadow,
    /// Decide, apply with commit-confirm, check health, confirm or roll back.
    Enforce,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Shadow => "shadow",
            Mode::Enforce => "enforce",
        }
    }
}

/// Everything `ecn-tuner run` configures.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Actuator URL (`http://127.0.0.1:50051`, `https://...`).
    pub target: String,
    /// Shadow or enforce.
    pub mode: Mode,
    /// What proposes settings.
    pub policy: Policy,
    /// The known-good fallback for every queue, scaled to its speed.
    pub baseline: ecn_env::Baseline,
    /// Time between decision rounds.
    pub interval: Duration,
    /// Unconfirmed changes revert after this.
    pub confirm_within: Duration,
    /// A call to the actuator without a reply after this has failed.
    pub call_timeout: Duration,
    /// Stop after this long (None: until interrupted).
    pub duration: Option<Duration>,
    /// Decision log file.
    pub decision_log: Option<PathBuf>,
    /// Engage the kill switch while this file exists.
    pub kill_file: Option<PathBuf>,
    /// Prometheus endpoint.
    pub metrics: Option<std::net::SocketAddr>,
    /// Bearer token for the actuator.
    pub token: Option<String>,
    /// CA certificate (PEM) to trust for `https` targets.
    pub tls_ca: Option<Vec<u8>>,
    /// Guardrail limits (bounds are tightened to the actuator's).
    pub guardrails: GuardrailConfig,
    /// Which of `confirm_within` and `guardrails.stale_after` are defaults, which each target
    /// raises to fit its telemetry interval.
    pub follows_telemetry: FollowsTelemetry,
    /// Health-check thresholds.
    pub health: HealthConfig,
    /// After a rollback, a queue keeps its known-good setting for this long.
    pub quarantine: Duration,
    /// Name used for the writer lease and the journal.
    pub controller_id: String,
    /// Let a learned policy decide for ports at line rates its card does not list. Off, such
    /// queues keep their current setting: the model's choices there are untested, and the
    /// shipped model loses at 25G (README "Scenarios it was not trained on").
    pub allow_untrained_rates: bool,
    /// Let a learned policy decide from telemetry intervals other than its card's control
    /// interval (within [`crate::learned::INTERVAL_TOLERANCE`]). Off, such queues keep their
    /// current setting: the model's features mean something else over another interval.
    pub allow_untrained_intervals: bool,
}

/// Default `--confirm-within`, for telemetry of a second or faster.
pub const DEFAULT_CONFIRM_WITHIN: Duration = Duration::from_secs(10);

/// `--stale-after` and `--confirm-within` left to their defaults (3 s and 10 s), which suit
/// telemetry of a second or faster: each target raises them to fit its own telemetry interval,
/// where that is slower (a SONiC switch refreshes its queue counters every 10 s out of the box),
/// instead of refusing to start ([`stale_after_fits_interval`], [`window_fits_confirm`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct FollowsTelemetry {
    /// `--stale-after` was not given: at least [`STALE_INTERVALS`] telemetry intervals.
    pub stale_after: bool,
    /// `--confirm-within` was not given: long enough to watch the health window, and to judge
    /// before the deadline.
    pub confirm_within: bool,
}

/// Telemetry intervals a default `--stale-after` spans at least: one sample late, or lost, is
/// not yet stale.
const STALE_INTERVALS: u32 = 3;

impl ControllerConfig {
    /// How long before its confirm deadline a change is judged at the latest (two
    /// `interval`s), whatever its health window holds by then.
    pub fn judging_margin(&self) -> Duration {
        self.interval * 2
    }
}

/// What a run did, for the caller's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Decision rounds.
    pub rounds: u64,
    /// Apply calls that succeeded.
    pub applies: u64,
    /// Apply calls that failed (refused, or no reply).
    pub failed_applies: u64,
    /// Confirmed changes.
    pub confirms: u64,
    /// Rolled-back changes.
    pub rollbacks: u64,
    /// Changes left unconfirmed at the end, as (target, generation): their rollback at
    /// shutdown failed (the actuator unreachable), so the actuator's confirm deadline reverts
    /// them.
    pub left_unconfirmed: Vec<(String, u64)>,
    /// Targets on which every Apply failed, none succeeding, as (target, failures, the last
    /// failure): an enforce run that changed nothing there while it tried to.
    pub nothing_landed: Vec<(String, u64, String)>,
    /// With several targets, each one's own report, in the order their loops ended (the
    /// totals above add them up).
    pub targets: Vec<(String, RunReport)>,
    /// Whether a stop request (a signal, another target's failure) ended a loop, rather than
    /// `--duration`.
    pub stopped: bool,
}

impl RunReport {
    /// What a stop left to the actuators' deadlines, in words, or `None` when it left nothing.
    pub fn left_unconfirmed_said(&self) -> Option<String> {
        if self.left_unconfirmed.is_empty() {
            return None;
        }
        let list: Vec<String> = self.left_unconfirmed.iter().map(|(t, g)| format!("generation {g} on {t}")).collect();
        Some(format!(
            "stopped with {} unconfirmed: it could not be rolled back (nor, at times, read back), so the actuator \
             reverts it at its confirm deadline",
            list.join(", ")
        ))
    }

    /// The targets where every Apply failed, in words, or `None` when there is none.
    pub fn nothing_landed_said(&self) -> Option<String> {
        if self.nothing_landed.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .nothing_landed
            .iter()
            .map(|(t, n, last)| format!("on {t} every Apply failed ({n}; the last: {last})"))
            .collect();
        Some(format!("no change landed: {}", list.join("; ")))
    }

    /// What makes a clean stop a failure (exit 1 after the report), in words: a change left to
    /// an actuator's deadline, or a target that refused every change.
    pub fn failure_said(&self) -> Option<String> {
        match (self.left_unconfirmed_said(), self.nothing_landed_said()) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        }
    }

    /// Error `e`, with what the run left behind said after it ([`RunReport::failure_said`]):
    /// a run that ends on an error has no report of its own to say it.
    pub fn said_with(&self, e: CliError) -> CliError {
        match self.failure_said() {
            Some(left) => e.and(&left),
            None => e,
        }
    }
}

fn to_setting(s: Option<&pb::EcnSetting>) -> Option<EcnSetting> {
    s.map(|s| EcnSetting { kmin_bytes: s.kmin_bytes, kmax_bytes: s.kmax_bytes, pmax: s.pmax })
}

fn to_pb(s: EcnSetting) -> pb::EcnSetting {
    pb::EcnSetting { kmin_bytes: s.kmin_bytes, kmax_bytes: s.kmax_bytes, pmax: s.pmax }
}

fn setting_json(s: EcnSetting) -> serde_json::Value {
    serde_json::json!({"kmin_bytes": s.kmin_bytes, "kmax_bytes": s.kmax_bytes, "pmax": s.pmax})
}

/// Per-queue controller state.
struct QueueState {
    id: pb::QueueId,
    link: ecn_env::BitsPerSec,
    xoff_bytes: Option<u64>,
    current: EcnSetting,
    baseline: EcnSetting,
    last_change: Option<Instant>,
    quarantine_until: Option<Instant>,
    watch: QueueWatch,
    /// Shadow mode: the setting the queue's last would-be change set, and when. The guardrails
    /// judge the next proposal from it, as enforce mode's from the change it made, so that a
    /// would-be change is logged and spends the change budget once, not every round.
    would_be: Option<(EcnSetting, Instant)>,
    /// When the actuator last refused a fallback of this queue: for a minute after, the next
    /// one waits for room in the change budget, as other changes do.
    fallback_refused_at: Option<Instant>,
}

impl QueueState {
    /// Take `setting` as the queue's current one, in effect from `in_effect_from_ns` on the
    /// telemetry's clock (`None`: unknown); returns whether it changed. A new setting starts
    /// the window a health check compares before the next change again: intervals at the old
    /// one do not describe it.
    fn set_current(&mut self, setting: EcnSetting, in_effect_from_ns: Option<u64>) -> bool {
        let changed = setting != self.current;
        if changed {
            self.current = setting;
            self.watch.setting_changed(in_effect_from_ns);
        }
        changed
    }
}

/// Feed telemetry samples to their queues, and the intervals they complete to the pending
/// change's windows ([`Pending::take`]). Only a valid sample that moved its queue's clock
/// forward completes one: a batch without a new sample for a queue (a repeated timestamp, a
/// counter reset, nothing at all) must not count that queue's previous interval again.
fn feed_samples(
    queues: &mut [QueueState],
    index: &HashMap<String, usize>,
    pending: Option<&mut Pending>,
    samples: &[pb::TelemetrySample],
) {
    let mut completed = Vec::new();
    for s in samples {
        let Some(&i) = s.id.as_ref().and_then(|id| index.get(&id.to_string())) else { continue };
        if let Some(stats) = queues[i].watch.push(s) {
            completed.push((i, stats));
        }
    }
    if let Some(p) = pending {
        for (i, stats) in completed {
            if let Some(&k) = p.slots.get(&i) {
                p.take(k, stats);
            }
        }
    }
}

/// A change a round decided on, and its decision-log line, written once the apply's
/// outcome is known.
struct Planned {
    queue: usize,
    setting: EcnSetting,
    /// A fallback to the baseline because the queue's telemetry is stale or invalid: it
    /// cannot be judged on telemetry, so it is confirmed at once instead of watched.
    telemetry_fallback: bool,
    proposed: Option<serde_json::Value>,
    reason: String,
}

/// Run one control loop per target in this process, sharing the metrics endpoint and the
/// decision log, until `duration`, a stop request (SIGINT/SIGTERM, once
/// [`requests::Requester::listen_for_signals`] was called), or a fatal error in any loop.
pub async fn run_all(
    cfg: ControllerConfig,
    targets: Vec<String>,
    (requester, requests): (requests::Requester, requests::Requests),
) -> Result<RunReport, CliError> {
    let metrics = Metrics::new();
    if let Some(addr) = cfg.metrics {
        let bound = metrics.serve(addr).await.map_err(|e| CliError::BadInput(format!("--metrics {addr}: {e}")))?;
        info!(%bound, "serving Prometheus metrics at /metrics");
    }
    let decisions = DecisionLog::open(cfg.decision_log.as_deref()).map_err(|e| {
        let path = cfg.decision_log.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        CliError::output_path(format!("--decision-log {path}: {e}"), &e)
    })?;
    decisions
        .reopen_on_hangup()
        .map_err(|e| CliError::Failed(format!("cannot install a signal handler (SIGHUP): {e}")))?;
    // The kill switch is the process's, and shows whatever its loops are doing when scraped.
    let (kill, kill_file) = (requests.kill.clone(), cfg.kill_file.clone());
    metrics.watch_kill_switch(move || kill.is_thrown() || kill_file.as_deref().is_some_and(kill_file_present));
    let mut tasks = tokio::task::JoinSet::new();
    // `--max-changes-per-minute` counts the changes of every target together.
    let budget = ChangeBudget::default();
    // With several targets, every log line of a loop names its target (a span); one target
    // needs no such prefix.
    let several = targets.len() > 1;
    let peers = Peers::new(requester.clone(), several);
    for target in targets {
        let cfg = ControllerConfig { target: target.clone(), ..cfg.clone() };
        let (metrics, decisions, requests) = (metrics.clone(), decisions.clone(), requests.clone());
        let budget = budget.clone();
        let peers = peers.clone();
        let span = if several { tracing::info_span!("target", url = %target) } else { tracing::Span::none() };
        tasks.spawn(
            async move {
                let r = run(cfg, metrics, decisions, requests, budget, peers).await;
                (r.map_err(|e| e.about("--target", &target)), target)
            }
            .instrument(span),
        );
    }
    let mut total = RunReport::default();
    let mut first_error = None;
    while let Some(done) = tasks.join_next().await {
        let (r, target) = match done {
            Ok((r, target)) => (r, target),
            Err(e) => (Err(CliError::Failed(format!("a control loop panicked: {e}"))), String::new()),
        };
        match r {
            Ok(r) => {
                total.rounds += r.rounds;
                total.applies += r.applies;
                total.failed_applies += r.failed_applies;
                total.confirms += r.confirms;
                total.rollbacks += r.rollbacks;
                total.left_unconfirmed.extend(r.left_unconfirmed.iter().cloned());
                total.nothing_landed.extend(r.nothing_landed.iter().cloned());
                total.stopped |= r.stopped;
                if several {
                    total.targets.push((target, r));
                }
            }
            Err(e) => {
                // One target's fatal error stops the others cleanly (pending changes rolled
                // back, leases released) instead of abandoning them mid-change at exit; the
                // loop asked them as it failed ([`run`]), this covers one that failed to start.
                requester.stop(StopReason::PeerFailed);
                // The first error is the command's; any other is said here, or it was lost.
                match &first_error {
                    None => first_error = Some(e),
                    Some(_) => warn!("another target failed as well: {e}"),
                }
            }
        }
    }
    // Decisions still waiting are written before the report: as long as the log takes them.
    if let Err(e) = decisions.close(Duration::from_secs(2)) {
        match &first_error {
            None => first_error = Some(CliError::Failed(format!("decision log: {e}"))),
            Some(_) => warn!("decision log: {e}"),
        }
    }
    match first_error {
        // The other targets' reports are lost with the error, but not what they left behind
        // nor where they changed nothing.
        Some(e) => Err(total.said_with(e)),
        None => Ok(total),
    }
}

/// What one target's loop shares with the others': a way to stop them, and the actuators the
/// loops have reached, by [`pb::Capabilities::instance_id`].
#[derive(Clone)]
pub struct Peers {
    stop: requests::Requester,
    reached: Arc<Mutex<HashMap<String, String>>>,
    /// Whether there are other loops at all.
    several: bool,
}

impl Peers {
    /// Loops that `stop` stops, none of which has reached an actuator yet; `several` where
    /// there is more than one.
    pub fn new(stop: requests::Requester, several: bool) -> Peers {
        Peers { stop, reached: Arc::default(), several }
    }

    /// Note that `target` reached the actuator `instance_id`; one another target reached is
    /// refused (exit 2). `run` refuses two URLs of one address before connecting; this
    /// catches what no address tells (`0.0.0.0` and `127.0.0.1`, a VIP, a forwarder).
    fn reach(&self, instance_id: &str, target: &str) -> Result<(), CliError> {
        if instance_id.is_empty() {
            // An actuator from before the id: this check cannot see it twice, so say so where
            // there is another target it could be.
            if self.several {
                warn!(
                    %target,
                    "the actuator reports no instance id (a version before it): were it also reached through another \
                     --target (a forwarder, a VIP), the two loops would undo each other's changes unseen"
                );
            }
            return Ok(());
        }
        let mut reached = self.reached.lock().unwrap_or_else(|e| e.into_inner());
        match reached.get(instance_id) {
            Some(other) => Err(CliError::BadInput(format!(
                "--target {target} is the actuator --target {other} reaches (the same instance id): one actuator \
                 given twice, whose two control loops would roll back each other's changes"
            ))),
            None => {
                reached.insert(instance_id.to_string(), target.to_string());
                Ok(())
            }
        }
    }
}

/// Run the control loop of one actuator until `duration`, a stop request, or a fatal error;
/// on a fatal error the other targets' loops (`peers`) are asked to stop at once, before this
/// one's own clean stop, which may take a `--call-timeout` or more.
pub async fn run(
    cfg: ControllerConfig,
    metrics: Metrics,
    log: DecisionLog,
    mut requests: Requests,
    budget: ChangeBudget,
    peers: Peers,
) -> Result<RunReport, CliError> {
    let mut lp = ControlLoop::start(cfg, metrics, log, budget, &peers).await?;
    // An actuator restarting just now (its capabilities read, its stream not yet open) is a
    // lost stream like any other: reopened below, not the end of the controller.
    let mut stream = match lp.open_stream().await {
        Ok(s) => Some(s),
        // An actuator with no telemetry at all (dry-run without a recording) will not have any.
        Err(s) if s.code() == tonic::Code::Unimplemented => return Err(status("StreamTelemetry", s)),
        Err(s) => {
            let e = status("StreamTelemetry", s);
            warn!(target = %lp.cfg.target, "cannot open the telemetry stream yet ({e}); reopening it");
            None
        }
    };
    let now = Instant::now();
    lp.freshness.watching_from(now);
    // A lost stream is reopened with a growing pause between tries; its queues go stale
    // meanwhile, and are held at the baseline like any queue without fresh telemetry.
    let mut reopening = Reopening::new();
    let mut reconnect_at = tokio::time::Instant::now();
    // When the stream in use was opened: a stall counts from the later of this and the last batch.
    let mut stream_opened_at = now;

    let started = Instant::now();
    let mut ticker = tokio::time::interval(lp.cfg.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    // A fatal error (a lost lease, a decision log that cannot be written) still stops
    // cleanly: the pending change rolled back and the lease given back, not both left to
    // the actuator's deadline and TTL.
    let mut busy = Busy::new();
    let ended: Result<(), CliError> = async {
        loop {
            lp.export_state();
            busy.check(&lp.cfg.target, lp.queues.len());
            let connected = stream.is_some();
            let waiting_from = Instant::now();
            // Wait for something to do; decisions follow the first telemetry batch of each interval,
            // and the ticker keeps deciding (and falling back) when telemetry stops.
            let woke = tokio::select! {
                // A stop goes first when several are ready: a round begun after it would make
                // calls the stop then waits for.
                biased;
                why = requests.stop.stopped() => {
                    lp.report.stopped = true;
                    if why == StopReason::PeerFailed {
                        warn!(target = %lp.cfg.target, "another target failed; stopping this one cleanly");
                    } else {
                        info!(target = %lp.cfg.target, ?why, "stopping");
                    }
                    break;
                }
                _ = requests.kill.thrown(), if !lp.killed => { lp.killed = true; Wake::Other }
                msg = next_batch(&mut stream) => Wake::Telemetry(msg),
                _ = tokio::time::sleep_until(reconnect_at), if !connected => Wake::Reconnect,
                _ = ticker.tick() => Wake::Other,
            };
            busy.waited += waiting_from.elapsed();
            let arrived = match woke {
                Wake::Telemetry(Ok(Some(batch))) => {
                    reopening = Reopening::new();
                    Some(lp.take_batch(&batch))
                }
                Wake::Telemetry(Ok(None)) => {
                    stream = None;
                    lp.freshness.stream_lost();
                    reconnect_at = reopening.lost(&lp.cfg.target, "the actuator closed the telemetry stream");
                    None
                }
                Wake::Telemetry(Err(s)) => {
                    stream = None;
                    lp.freshness.stream_lost();
                    reconnect_at = reopening.lost(&lp.cfg.target, &format!("telemetry stream failed: {}", said(&s)));
                    None
                }
                Wake::Reconnect => {
                    match lp.open_stream().await {
                        Ok(s) => {
                            info!(target = %lp.cfg.target, "telemetry stream reopened");
                            lp.refit_to_telemetry().await;
                            // The actuator may have restarted meanwhile: ask for the lease now, not
                            // at the next renewal, so that its settings are read back before rounds
                            // decide from the new telemetry against the old ones.
                            lp.renew_now = lp.lease.is_some();
                            lp.series.telemetry_reconnects.inc();
                            stream = Some(s);
                            stream_opened_at = Instant::now();
                        }
                        Err(s) => {
                            let e = status("StreamTelemetry", s);
                            reconnect_at =
                                reopening.lost(&lp.cfg.target, &format!("cannot reopen the telemetry stream: {e}"));
                        }
                    }
                    None
                }
                Wake::Other => None,
            };
            if lp.cfg.duration.is_some_and(|d| started.elapsed() >= d) {
                info!("duration reached");
                break;
            }
            let now = Instant::now();
            // A stream can stall without failing: a hung actuator, a connection whose peer vanished
            // without a reset. By the staleness limit its queues are already held at the baseline;
            // reopen it, as if it had failed, so that decisions resume when the actuator does. Not
            // sooner than STREAM_STALL_MIN: a reopened stream misses the batches sent meanwhile, and
            // an actuator that samples more slowly than the staleness limit must not be cut off
            // before its first batch.
            let silent_for = now.duration_since(lp.freshness.last_batch_at().max(stream_opened_at));
            if stream.is_some() && silent_for > lp.cfg.guardrails.stale_after.max(STREAM_STALL_MIN) {
                stream = None;
                lp.freshness.stream_lost();
                let why = format!("telemetry stream stalled: no batch for {:.1} s", silent_for.as_secs_f64());
                reconnect_at = reopening.lost(&lp.cfg.target, &why);
            }
            let renewed = lp.renew_lease(now).await?;
            // The kill switch does not wait for a pending change's health check.
            if lp.kill_requested() {
                // Once while it stays thrown: after it nothing writes (this controller holds the
                // lease), and reading the actuator back at every batch left the telemetry piling up
                // behind. A kill file removed and created again throws it again.
                if !lp.kill_done && lp.kill_retry_at.is_none_or(|t| now >= t) {
                    // The lease renewed first: an actuator restarted since the last renewal would
                    // refuse the kill switch's writes. A failure (the actuator just restarted, its
                    // connection not yet back) is tried again every --interval, not the end of the
                    // controller, which would leave the queues off their baseline. Not after a
                    // routine renewal just above that renewed or timed out: a hung actuator held
                    // the kill switch up for two --call-timeouts before its own calls.
                    if lp.lease.is_some() && !renewed {
                        lp.renew_now = true;
                        lp.renew_lease(now).await?;
                    }
                    match lp.kill_switch().await {
                        Ok(()) => (lp.kill_done, lp.kill_retry_at) = (true, None),
                        Err(e) => {
                            warn!(target = %lp.cfg.target, "kill switch not carried out yet ({e}); trying again");
                            lp.kill_retry_at = Some(now + lp.cfg.interval);
                        }
                    }
                }
                continue;
            }
            if lp.kill_done {
                info!(target = %lp.cfg.target, "kill switch released (the kill file is gone): deciding again");
            }
            (lp.kill_done, lp.kill_retry_at) = (false, None);
            if let Some(config) = lp.freshness.probe(&lp.client, now) {
                // In shadow mode the answer's settings are taken as each queue's current one:
                // nothing else reads them back there, and a change made by another writer,
                // outside ecn-tuner or by an actuator restart left the gauges and the decision
                // log on settings no longer in effect.
                if lp.cfg.mode == Mode::Shadow {
                    lp.take_settings(&config);
                }
            }
            if lp.check_pending().await? {
                continue;
            }
            if lp.needs_resync && !lp.try_resync().await? {
                continue;
            }
            if !lp.round_due(now, arrived.is_some()) {
                continue;
            }
            lp.report.rounds += 1;
            let round = lp.decide(now)?;
            if let Some(t) = arrived {
                lp.series.decision_latency_seconds.observe(t.elapsed().as_secs_f64());
            }
            // A stop asked for while this round renewed the lease, confirmed or rolled back
            // (a slow actuator, a name lookup that hangs) does not get the round's Apply: the
            // stop then waited for it, its read-back and its rollback, a call timeout each.
            if requests.stop.is_requested() {
                lp.report.stopped = true;
                if round.is_empty() {
                    info!(target = %lp.cfg.target, "stopping");
                } else {
                    info!(target = %lp.cfg.target, changes = round.len(), "stopping: this round's changes are not applied");
                    lp.record_planned(&round, false, "; not applied: the controller is stopping")?;
                }
                break;
            }
            if !round.is_empty() {
                lp.apply_round(round).await?;
            }
        }
        Ok(())
    }
    .await;
    match ended {
        Ok(()) => lp.shutdown().await,
        Err(e) => {
            warn!(target = %lp.cfg.target, "stopping on an error: {e}");
            peers.stop.stop(StopReason::PeerFailed);
            match lp.shutdown().await {
                Ok(report) => Err(report.said_with(e)),
                // The same failure again (the decision log, still full) is said once.
                Err(also) if also.to_string().starts_with(&e.to_string()) => Err(also),
                Err(also) => Err(e.and(&also.to_string())),
            }
        }
    }
}

/// Whether the kill file is there: any entry at its path throws the switch, a dangling
/// symbolic link included, and so does a path that cannot be looked at (a folder the controller
/// may not enter, said once): a kill switch that cannot be checked must not read as off.
/// `Path::exists` said "no" to both, and the controller went on writing.
fn kill_file_present(path: &std::path::Path) -> bool {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    match std::fs::symlink_metadata(path) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                warn!(path = %path.display(), error = %e, "cannot tell whether the kill file is there: taken as thrown");
            }
            true
        }
    }
}

/// Rounds sit on a grid of `interval`: the next slot if a round is due at `now` (after the
/// slot `next_due`), `None` if not. A batch may trigger its round up to half an interval early
/// (arrival jitter), the ticker only half an interval late (no telemetry). The grid holds while
/// a round comes at most half an interval past the slot after `next_due`: the ticker's rounds
/// come half an interval late by design, and taking one of those for a missed slot moved the
/// grid on by a whole interval, so that without telemetry a target decided every second
/// interval.
fn round_grid(next_due: Option<Instant>, now: Instant, arrived: bool, interval: Duration) -> Option<Instant> {
    let half = interval / 2;
    let due = match next_due {
        None => true,
        Some(d) if arrived => now + half >= d,
        Some(d) => now >= d + half,
    };
    due.then(|| match next_due {
        Some(d) if now < d + interval + half => d + interval,
        _ => now + interval,
    })
}

/// A change is judged at the latest two intervals before its confirm deadline. A health window
/// that takes longer than that even at the actuator's fastest telemetry could never be
/// complete: every change would be rolled back for its deadline. The window's first interval
/// can start up to two intervals after the apply: the one in progress when the change lands
/// does not count, nor, on a switch, the one its agent may still be programming it in (the
/// actuator's `in_effect_from_ts_ns`). The deadline runs on the wall clock, and telemetry on
/// the actuator's, which a simulated fabric slows by its time scale.
fn window_fits_confirm(cfg: &ControllerConfig, caps: &pb::Capabilities) -> Result<(), CliError> {
    let native = Duration::from_nanos(caps.min_telemetry_interval_ns);
    let interval = wall_interval(caps.min_telemetry_interval_ns, caps.telemetry_time_scale);
    let intervals = u32::try_from(cfg.health.window).unwrap_or(u32::MAX).saturating_add(2);
    let watch = interval.saturating_mul(intervals);
    let time_to_judge = cfg.confirm_within.saturating_sub(cfg.judging_margin());
    if watch >= time_to_judge {
        let clock = if interval == native {
            String::new()
        } else {
            format!(" ({interval:?} of wall-clock time at its time scale {})", caps.telemetry_time_scale)
        };
        return Err(CliError::BadInput(format!(
            "--health-window {} takes at least {watch:?} (two intervals more than the window itself, to \
             start after the change) at the {native:?} telemetry interval of {}{clock}, \
             which does not fit in --confirm-within {:?} less two --interval ({time_to_judge:?}): every change \
             would be rolled back for its deadline",
            cfg.health.window, cfg.target, cfg.confirm_within
        )));
    }
    Ok(())
}

/// Raise the defaults of `--stale-after` and `--confirm-within` to fit this target's telemetry
/// interval ([`FollowsTelemetry`]), and say so; or why the health window cannot fit in any
/// confirm window an actuator grants.
fn fit_to_telemetry(cfg: &mut ControllerConfig, caps: &pb::Capabilities) -> Result<(), CliError> {
    let interval = wall_interval(caps.min_telemetry_interval_ns, caps.telemetry_time_scale);
    if cfg.follows_telemetry.stale_after {
        let fit = interval.saturating_mul(STALE_INTERVALS);
        if fit > cfg.guardrails.stale_after {
            info!(
                target = %cfg.target,
                telemetry_interval = ?interval,
                "--stale-after {fit:?}: {STALE_INTERVALS} of this target's telemetry intervals, as the default \
                 {:?} is shorter",
                cfg.guardrails.stale_after
            );
            cfg.guardrails.stale_after = fit;
        }
    }
    if cfg.follows_telemetry.confirm_within && cfg.mode == Mode::Enforce {
        // The window, two intervals to start after the change, one for a late sample, and the
        // judging margin: what `window_fits_confirm` asks, with a sample to spare (and at
        // least one --interval, where the actuator sends no telemetry at all).
        let window = u32::try_from(cfg.health.window).unwrap_or(u32::MAX);
        let needed = interval.saturating_mul(window.saturating_add(2)).saturating_add(cfg.judging_margin());
        let spare = interval.max(cfg.interval);
        let max = crate::actuator::service::MAX_CONFIRM_WITHIN;
        let fit = needed.saturating_add(spare).min(max);
        if fit <= needed {
            return Err(CliError::BadInput(format!(
                "--health-window {} at the {interval:?} telemetry interval of {} needs a confirm window of more than \
                 {needed:?}, and an actuator grants at most {} minutes: give a shorter --health-window (or a \
                 shorter --interval)",
                cfg.health.window,
                cfg.target,
                max.as_secs() / 60
            )));
        }
        if fit > cfg.confirm_within {
            info!(
                target = %cfg.target,
                telemetry_interval = ?interval,
                "--confirm-within {fit:?}: the health window of {} intervals at this target's telemetry interval, \
                 two more before it starts, one to spare, and two --interval to judge it, as the default {:?} is \
                 shorter",
                cfg.health.window,
                cfg.confirm_within
            );
            cfg.confirm_within = fit;
        }
    }
    Ok(())
}

/// Telemetry counts as stale once no sample came for `--stale-after`. Shorter than two of the
/// actuator's telemetry intervals, that is every gap between samples, or one a little late:
/// every queue would fall back to the baseline (enforce) or be logged as stale (shadow) for no
/// fault at all. A switch polled every 10 s (SONiC's default for queue counters) needs more
/// than the default 3 s.
fn stale_after_fits_interval(stale_after: Duration, target: &str, caps: &pb::Capabilities) -> Result<(), CliError> {
    let interval = wall_interval(caps.min_telemetry_interval_ns, caps.telemetry_time_scale);
    if stale_after < interval.saturating_mul(2) {
        return Err(CliError::BadInput(format!(
            "--stale-after {stale_after:?} is shorter than two telemetry intervals of {target} ({interval:?} each): \
             telemetry would count as stale between samples and every queue fall back; give at least \
             --stale-after {}ms (more leaves room for a late sample)",
            interval.saturating_mul(2).as_millis()
        )));
    }
    Ok(())
}

/// Consecutive rounds in which a learned model decides for no queue before the controller says
/// so (at least the model's history and one more: a single late poll holds every queue that long).
const ALL_UNTRAINED_ROUNDS: u32 = 10;

/// The first pause before reopening a lost telemetry stream; it doubles while tries fail.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The shortest silence after which a telemetry stream counts as stalled and is reopened.
const STREAM_STALL_MIN: Duration = Duration::from_secs(10);
/// The longest pause between two tries to reopen the telemetry stream.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What woke the control loop.
enum Wake {
    /// The telemetry stream yielded a batch, ended, or failed.
    Telemetry(Result<Option<pb::TelemetryBatch>, tonic::Status>),
    /// Time to try reopening the telemetry stream.
    Reconnect,
    /// The ticker or the kill signal.
    Other,
}

/// Reopening a lost telemetry stream. The pause doubles with every loss until a batch arrives
/// again, so that a stream that fails as soon as it opens is not reopened in a tight loop.
struct Reopening {
    backoff: Duration,
    /// Losses since the last batch.
    losses: u32,
}

impl Reopening {
    fn new() -> Reopening {
        Reopening { backoff: RECONNECT_BACKOFF_MIN, losses: 0 }
    }

    /// Log a lost stream; returns when to try reopening it. At the longest pause an actuator
    /// that stays gone fails every few seconds for as long as it is gone: said once a minute
    /// then (with the count), each try in between at debug.
    fn lost(&mut self, target: &str, why: &str) -> tokio::time::Instant {
        self.losses += 1;
        if self.loud() {
            warn!(%target, retry_in = ?self.backoff, losses = self.losses, "{why}; reopening it");
        } else {
            debug!(%target, retry_in = ?self.backoff, losses = self.losses, "{why}; reopening it");
        }
        let at = tokio::time::Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(RECONNECT_BACKOFF_MAX);
        at
    }

    /// Whether the latest loss is warned of: while the pause still grows, then once a minute.
    fn loud(&self) -> bool {
        let every = (60 / RECONNECT_BACKOFF_MAX.as_secs().max(1)).max(1) as u32;
        self.backoff < RECONNECT_BACKOFF_MAX || self.losses.is_multiple_of(every)
    }
}

/// How much of its time a target's loop spends working rather than waiting, over windows of
/// [`BUSY_WINDOW`]: a loop busy nearly all the time cannot keep up (too many queues for the
/// interval, a slow machine), its rounds come late and the telemetry falls behind, and without
/// this the only sign was telemetry warned of as lagging, and queues falling back for it.
struct Busy {
    since: Instant,
    waited: Duration,
    warned: bool,
}

/// The window [`Busy`] measures over.
const BUSY_WINDOW: Duration = Duration::from_secs(10);

/// The share of its time above which a loop is said not to keep up.
const BUSY_SHARE: f64 = 0.9;

impl Busy {
    fn new() -> Busy {
        Busy { since: Instant::now(), waited: Duration::ZERO, warned: false }
    }

    /// At each window's end, say when the loop was busy past [`BUSY_SHARE`], and when it keeps
    /// up again.
    fn check(&mut self, target: &str, queues: usize) {
        self.check_at(Instant::now(), target, queues);
    }

    /// [`Busy::check`] at `now`.
    fn check_at(&mut self, now: Instant, target: &str, queues: usize) {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed < BUSY_WINDOW {
            return;
        }
        let busy = 1.0 - self.waited.as_secs_f64() / elapsed.as_secs_f64();
        if busy > BUSY_SHARE && !self.warned {
            warn!(
                %target,
                busy = format!("{:.0}%", busy * 100.0),
                queues,
                "the controller is busy nearly all the time for this target and cannot keep up: rounds come late and \
                 telemetry falls behind. Busy is deciding or waiting for the actuator's answers: where its calls are \
                 slow (the network, a busy switch), they are the cause; otherwise a longer --interval, fewer queues \
                 per controller, or a faster machine"
            );
            self.warned = true;
        } else if busy <= BUSY_SHARE && self.warned {
            info!(%target, busy = format!("{:.0}%", busy * 100.0), "the controller keeps up again");
            self.warned = false;
        }
        (self.since, self.waited) = (now, Duration::ZERO);
    }
}

/// The next message of the telemetry stream; never, while there is none.
async fn next_batch(
    stream: &mut Option<tonic::Streaming<pb::TelemetryBatch>>,
) -> Result<Option<pb::TelemetryBatch>, tonic::Status> {
    match stream {
        Some(s) => s.message().await,
        None => std::future::pending().await,
    }
}

fn status(what: &str, s: tonic::Status) -> CliError {
    CliError::Failed(format!("{what}: {}", said(&s)))
}

/// Whether a call failed for want of an answer within `--call-timeout` (the channel's timeout
/// says `Cancelled`, as a call cancelled by a reconnecting channel does).
pub(crate) fn timed_out(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Cancelled && s.message() == "Timeout expired"
}

/// A failed call's status for a log line or an error. A call the channel's timeout cut short
/// reads "Cancelled: Timeout expired", as if someone had cancelled it: it says so instead.
pub(crate) fn said(s: &tonic::Status) -> String {
    if timed_out(s) {
        "no answer within --call-timeout (the actuator did not reply, or no connection to it opened)".to_string()
    } else {
        // The transport's causes: "tcp open error" alone hid "Too many open files" (and a
        // refused connection), and read as trouble on the network.
        let text = crate::error::causes_after(format!("{:?}: {}", s.code(), s.message()), std::error::Error::source(s));
        // What a TLS server's first bytes look like to a plain HTTP/2 client.
        match text.contains("frame with invalid size") {
            true => format!("{text} (does the actuator speak TLS? then use https:// and --tls-ca)"),
            false => text,
        }
    }
}

async fn current_generation(client: &mut Client) -> Option<u64> {
    client.get_config(pb::GetConfigRequest {}).await.ok().map(|c| c.into_inner().generation)
}

/// Why a queue's decision is what it is, beyond its policy: the decision log's `reason`.
struct Why<'a> {
    quarantined: bool,
    /// The telemetry lags the fabric past `--stale-after`: by this much, or not yet measured.
    lagging: Option<Option<Duration>>,
    clamps: &'a [Clamp],
    arrived: bool,
    /// Intervals at the current setting, of the health window's, while fewer.
    warming_up: Option<(usize, usize)>,
    /// The history the model observes, while the queue's is still filling.
    filling: Option<usize>,
    untrained: Option<String>,
    /// The model's input outside its training range, where it decided all the same.
    extrapolation: Option<&'a str>,
}

impl Why<'_> {
    fn said(&self, policy: &Policy) -> String {
        let mut reason = format!("policy {policy}");
        if self.quarantined {
            reason.push_str("; quarantined after a rollback, keeping the known-good setting");
        }
        match self.lagging {
            Some(None) => {
                reason.push_str("; telemetry back after a silence, its lag behind the fabric not yet measured")
            }
            Some(Some(lag)) => {
                reason.push_str(&format!("; the telemetry is {lag:.1?} behind the fabric, past --stale-after"))
            }
            None => {}
        }
        if !self.clamps.is_empty() {
            let names: Vec<&str> = self.clamps.iter().map(|c| c.name()).collect();
            reason.push_str(&format!("; guardrails: {}", names.join(", ")));
        }
        if !self.arrived {
            reason.push_str("; no telemetry yet, keeping the current setting");
        } else if let Some((have, want)) = self.warming_up {
            reason.push_str(&format!(
                "; {have} of the {want} intervals at this setting a health check compares before a change, keeping it"
            ));
        }
        if let Some(want) = self.filling {
            reason.push_str(&format!(
                "; the model observes {want} intervals, fewer of which have arrived since the queue's \
                 telemetry began or broke, keeping the current setting"
            ));
        }
        if let Some(why) = &self.untrained {
            reason.push_str(&format!("; {why}, keeping the current setting"));
        }
        if let Some(outside) = self.extrapolation {
            reason
                .push_str(&format!("; the model's input is outside its training range ({outside}): an extrapolation"));
        }
        reason
    }
}

/// A decision about queue `q` that left it on `after`; callers adjust the rest.
fn decision<'a>(
    cfg: &'a ControllerConfig,
    q: &QueueState,
    after: EcnSetting,
    applied: bool,
    reason: String,
) -> Decision<'a> {
    Decision {
        ts: unix_ms(),
        target: &cfg.target,
        mode: cfg.mode.name(),
        queue: q.id.to_string(),
        observation: q.watch.observation(),
        proposed: None,
        after_guardrails: setting_json(after),
        applied,
        reason,
    }
}

fn record(log: &DecisionLog, d: &Decision<'_>) -> Result<(), CliError> {
    log.write(d).map_err(|e| CliError::Failed(format!("decision log: {e}")))
}

fn set_queue_metrics(m: &Metrics, target: &str, q: &QueueState) {
    let labels = QueueLabels {
        target: target.to_string(),
        switch: q.id.switch.clone(),
        port: q.id.port.clone(),
        queue: q.id.queue,
    };
    m.kmin_bytes.get_or_create(&labels).set(q.current.kmin_bytes as i64);
    m.kmax_bytes.get_or_create(&labels).set(q.current.kmax_bytes as i64);
    m.pmax.get_or_create(&labels).set(q.current.pmax);
}

/// The state of one actuator's control loop.
struct ControlLoop {
    cfg: ControllerConfig,
    client: Client,
    metrics: Metrics,
    /// This target's series in `metrics`.
    series: TargetSeries,
    log: DecisionLog,
    guardrails: Guardrails,
    /// The actuator's telemetry interval (ns) and time scale, as its capabilities last said.
    telemetry: (u64, f64),
    queues: Vec<QueueState>,
    index: HashMap<String, usize>,
    /// Writer lease id and TTL; enforce mode only.
    lease: Option<(String, Duration)>,
    generation: u64,
    pending: Option<Pending>,
    report: RunReport,
    /// When telemetry last came, and how far behind the fabric it was when last measured
    /// (at a probe, an apply or a read-back).
    freshness: Freshness,
    last_renew: Instant,
    killed: bool,
    /// The kill switch has run: every queue is on its baseline.
    kill_done: bool,
    /// Consecutive rounds in which a learned model could decide for no queue, and whether the
    /// warning about it has been given.
    all_untrained_rounds: u32,
    warned_all_untrained: bool,
    /// Queues whose telemetry the last round could not trust (stale or invalid): their start
    /// and end are logged, the rounds between only counted (`guardrail_clamps_total`).
    untrusted_queues: usize,
    next_due: Option<Instant>,
    /// A write's outcome is unknown and reading the actuator back failed: no new change until
    /// a read succeeds, since `generation` and the queues' `current` may be wrong.
    needs_resync: bool,
    /// The generation before an Apply with a confirm window whose reply and read-back were both
    /// lost: the first read-back that succeeds tells whether it landed (and counts it so); the
    /// stop reads back for it (`generation + 1` is what it left if that read fails too).
    unread_apply: Option<u64>,
    /// An unconfirmed generation found in effect whose rollback failed, until a read-back shows
    /// none or a rollback goes through: the stop tries again.
    unrolled: Option<u64>,
    /// A change whose Confirm failed (with that failure) and whose fate the actuator could not
    /// be read for yet: settled at the next read-back that succeeds.
    unsettled: Option<(Pending, tonic::Status)>,
    /// A write was refused for want of a lease (the actuator restarted): renew at once.
    renew_now: bool,
    /// When to try a kill switch that failed again.
    kill_retry_at: Option<Instant>,
    /// Telemetry batches taken since the last decision round.
    batches_since_round: u64,
    /// The actuator's generation before the first failed Apply, and the last failure's error:
    /// for the end of a run where none succeeded.
    apply_failure: Option<(u64, String)>,
}

impl ControlLoop {
    /// Connect, read the actuator's capabilities and config, tighten the guardrails to its
    /// bounds, and (in enforce mode) take the writer lease.
    async fn start(
        mut cfg: ControllerConfig,
        metrics: Metrics,
        log: DecisionLog,
        budget: ChangeBudget,
        peers: &Peers,
    ) -> Result<Self, CliError> {
        let mut client = connect(&cfg.target, cfg.token.as_deref(), cfg.tls_ca.as_deref(), cfg.call_timeout).await?;
        let caps =
            client.get_capabilities(pb::GetCapabilitiesRequest {}).await.map_err(|s| status("GetCapabilities", s))?;
        let caps = caps.into_inner();
        peers.reach(&caps.instance_id, &cfg.target)?;
        let config = client.get_config(pb::GetConfigRequest {}).await.map_err(|s| status("GetConfig", s))?.into_inner();
        let generation = config.generation;

        fit_to_telemetry(&mut cfg, &caps)?;
        let guard_cfg = cfg.guardrails.tightened(caps.bounds.as_ref()).map_err(|why| {
            CliError::Failed(format!("the actuator at {} reports bounds no setting can meet: {why}", cfg.target))
        })?;
        let stale_after = guard_cfg.stale_after;
        stale_after_fits_interval(stale_after, &cfg.target, &caps)?;
        let guardrails = Guardrails::sharing(guard_cfg, budget);
        if cfg.mode == Mode::Enforce {
            window_fits_confirm(&cfg, &caps)?;
        }

        let current: HashMap<String, EcnSetting> = config
            .queues
            .iter()
            .filter_map(|q| Some((q.id.as_ref()?.to_string(), to_setting(q.setting.as_ref())?)))
            .collect();
        let mut queues: Vec<QueueState> = Vec::new();
        for c in &caps.queues {
            let Some(id) = c.id.clone() else { continue };
            let link = ecn_env::BitsPerSec(c.link_bps);
            let baseline = cfg.baseline.setting(link);
            let current = current.get(&id.to_string()).copied().unwrap_or(baseline);
            queues.push(QueueState {
                xoff_bytes: (c.pfc_xoff_bytes > 0).then_some(c.pfc_xoff_bytes),
                link,
                current,
                baseline,
                last_change: None,
                quarantine_until: None,
                would_be: None,
                fallback_refused_at: None,
                watch: QueueWatch::keeping(cfg.health.window)
                    .with_feature_history(cfg.policy.model().map_or(1, |m| m.tuning().history)),
                id,
            });
        }
        let index: HashMap<String, usize> = queues.iter().enumerate().map(|(i, q)| (q.id.to_string(), i)).collect();
        if queues.is_empty() {
            return Err(CliError::Failed(format!("the actuator at {} reports no queues", cfg.target)));
        }

        // Every series of a target appears at once: a scrape that sees its queues also sees how
        // old its telemetry is (counted from the connection until the first batch).
        metrics.telemetry_arrived(&cfg.target, Instant::now());
        let series = metrics.target(&cfg.target);
        for q in &queues {
            set_queue_metrics(&metrics, &cfg.target, q);
        }

        let mut lease = None;
        // The lease's TTL runs on the actuator from its grant: counted here from the request,
        // not from the end of start-up, some round trips later (a 4.8 s round trip let the
        // first renewal arrive after the lease had lapsed).
        let asked_for_lease = Instant::now();
        if cfg.mode == Mode::Enforce {
            let ttl = (cfg.interval * 10).max(Duration::from_secs(10));
            let l = client
                .acquire_writer(pb::AcquireWriterRequest {
                    controller_id: cfg.controller_id.clone(),
                    ttl_ms: ttl.as_millis() as u64,
                })
                .await
                .map_err(|s| status("AcquireWriter", s))?
                .into_inner();
            lease = Some((l.lease_id, ttl));
            // Once the lease is held: a controller the actuator refuses never said it would write.
            warn!(
                target = %cfg.target,
                backend = %caps.backend,
                queues = queues.len(),
                "ENFORCE mode: ecn-tuner will write ECN settings on this actuator"
            );
            info!(health = ?cfg.health, "health checks");
        } else {
            info!(target = %cfg.target, backend = %caps.backend, queues = queues.len(), "shadow mode: nothing will be written");
        }

        let now = Instant::now();
        let freshness = Freshness::new(&cfg.target, metrics.clone(), stale_after, caps.telemetry_time_scale, now);
        let mut lp = ControlLoop {
            cfg,
            client,
            metrics,
            series,
            log,
            guardrails,
            telemetry: (caps.min_telemetry_interval_ns, caps.telemetry_time_scale),
            queues,
            index,
            lease,
            generation,
            pending: None,
            report: RunReport::default(),
            freshness,
            last_renew: asked_for_lease,
            killed: false,
            kill_done: false,
            all_untrained_rounds: 0,
            warned_all_untrained: false,
            untrusted_queues: 0,
            next_due: None,
            needs_resync: false,
            unread_apply: None,
            unrolled: None,
            unsettled: None,
            renew_now: false,
            kill_retry_at: None,
            batches_since_round: 0,
            apply_failure: None,
        };
        // An unconfirmed change left by a writer before this one (this controller's previous
        // run under the same --controller-id keeps its lease, so the actuator does not revert
        // it) is nobody's to judge: never inherited. Read after the lease: taking it over from
        // a writer whose lease lapsed reverts that writer's change, which the config read
        // before would still show.
        if let Some((_, ttl)) = lp.lease {
            // An actuator restarting just after it granted the lease (tests caught it) is not
            // lost: read again while it comes back, for as long as the lease would have
            // lived; the loop then takes a new lease from it.
            let give_up = Instant::now() + ttl;
            let mut backoff = RECONNECT_BACKOFF_MIN;
            let config = loop {
                match lp.resync().await {
                    Ok(c) => break c,
                    Err(s) if s.code() == tonic::Code::Unavailable && Instant::now() + backoff < give_up => {
                        warn!(code = ?s.code(), retry_in = ?backoff, "cannot read the actuator back at start; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                    }
                    Err(s) => return Err(status("GetConfig", s)),
                }
            };
            lp.roll_back_unwatched(&config, "at this controller's start").await?;
        }
        Ok(lp)
    }

    /// After the telemetry stream reopens: the actuator may have restarted with another
    /// telemetry interval (SONiC's follows its `counterpoll` intervals). `--stale-after` and
    /// `--confirm-within` left out are fitted to it afresh; where they were given, or cannot
    /// fit, this is warned of (at start it would have been refused) and the run goes on with
    /// them as they are. Capabilities that cannot be read now leave everything as it was.
    async fn refit_to_telemetry(&mut self) {
        let caps = match self.client.get_capabilities(pb::GetCapabilitiesRequest {}).await {
            Ok(caps) => caps.into_inner(),
            Err(s) => {
                debug!(target = %self.cfg.target, "capabilities not read after the reconnect: {}", said(&s));
                return;
            }
        };
        let telemetry = (caps.min_telemetry_interval_ns, caps.telemetry_time_scale);
        if telemetry == self.telemetry {
            return;
        }
        let was = wall_interval(self.telemetry.0, self.telemetry.1);
        self.telemetry = telemetry;
        warn!(
            target = %self.cfg.target,
            "the actuator's telemetry interval is now {:?}, {was:?} before (it restarted)",
            wall_interval(telemetry.0, telemetry.1)
        );
        let mut cfg = self.cfg.clone();
        if cfg.follows_telemetry.stale_after {
            cfg.guardrails.stale_after = GuardrailConfig::default().stale_after;
        }
        if cfg.follows_telemetry.confirm_within {
            cfg.confirm_within = DEFAULT_CONFIRM_WITHIN;
        }
        let fits = fit_to_telemetry(&mut cfg, &caps)
            .and_then(|()| stale_after_fits_interval(cfg.guardrails.stale_after, &cfg.target, &caps))
            .and_then(|()| if cfg.mode == Mode::Enforce { window_fits_confirm(&cfg, &caps) } else { Ok(()) });
        if let Err(e) = fits {
            warn!(
                target = %self.cfg.target,
                "{e}; going on with --stale-after {:?} and --confirm-within {:?}",
                self.cfg.guardrails.stale_after,
                self.cfg.confirm_within
            );
            return;
        }
        (self.cfg.guardrails.stale_after, self.cfg.confirm_within) = (cfg.guardrails.stale_after, cfg.confirm_within);
        self.freshness.retune(cfg.guardrails.stale_after, caps.telemetry_time_scale);
    }

    /// Open the telemetry stream.
    async fn open_stream(&mut self) -> Result<tonic::Streaming<pb::TelemetryBatch>, tonic::Status> {
        let req = pb::StreamTelemetryRequest { interval_ns: 0 };
        Ok(self.client.stream_telemetry(req).await?.into_inner())
    }

    /// Feed a telemetry batch to the queues (and to the pending change's health window);
    /// returns its arrival time.
    fn take_batch(&mut self, batch: &pb::TelemetryBatch) -> Instant {
        let now = Instant::now();
        self.freshness.batch_arrived(batch.ts_ns, now);
        self.batches_since_round = self.batches_since_round.saturating_add(1);
        feed_samples(&mut self.queues, &self.index, self.pending.as_mut(), &batch.samples);
        now
    }

    /// Renew the writer lease every third of its TTL (at once after a write refused for want of
    /// one); losing it to another writer is fatal. Returns whether it renewed it, or tried and
    /// got no answer (none within `--call-timeout`, or a failure that took half of it).
    async fn renew_lease(&mut self, now: Instant) -> Result<bool, CliError> {
        if let Some((id, ttl)) = &self.lease {
            if self.renew_now || now.duration_since(self.last_renew) >= *ttl / 3 {
                self.renew_now = false;
                let req = pb::AcquireWriterRequest {
                    controller_id: self.cfg.controller_id.clone(),
                    ttl_ms: ttl.as_millis() as u64,
                };
                let asked_at = Instant::now();
                match self.client.acquire_writer(req).await {
                    Ok(l) if l.get_ref().lease_id == *id => self.last_renew = now,
                    // Granted anew (another writer holding it is refused, not granted): the
                    // actuator restarted, holding no lease, or let this one lapse. Either way it
                    // reverted whatever was unconfirmed, and its settings may not be the ones
                    // this controller last saw (a restarted simulated fabric starts afresh).
                    Ok(l) => {
                        let ttl = *ttl;
                        warn!(
                            target = %self.cfg.target,
                            "the actuator granted a new writer lease (it restarted, or let the last one lapse): \
                             reading its settings back before any change"
                        );
                        self.lease = Some((l.into_inner().lease_id, ttl));
                        self.last_renew = now;
                        self.lease_regranted().await?;
                    }
                    // The actuator has let the lease go by now: this controller is no longer its
                    // writer, whether or not it had anything to write. Without this, a target
                    // lost while idle (nothing pending, nothing to change) went unnoticed. Timed
                    // as the call ends, not as it began: a hung actuator's call waits out
                    // `--call-timeout`, and the lease was taken for lost a call late (26 s after
                    // a hang under a 10 s TTL, with the writes between).
                    Err(s) if self.last_renew.elapsed() >= *ttl => {
                        return Err(CliError::Failed(format!(
                            "lost the writer lease on {}: not renewed for {} s ({})",
                            self.cfg.target,
                            ttl.as_secs(),
                            said(&s)
                        )))
                    }
                    Err(s) => {
                        warn!(error = %said(&s), "could not renew the writer lease");
                        // A quick failure (a connection an actuator restart cut) is worth
                        // another try at once; one that ran out of --call-timeout, or took half
                        // of it to fail (a connection the keepalive gave up on), is not.
                        return Ok(timed_out(&s) || asked_at.elapsed() >= self.cfg.call_timeout / 2);
                    }
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The gauges of this loop's state, set before it waits: what a scrape sees meanwhile.
    fn export_state(&self) {
        self.series.change_pending.set(i64::from(self.pending.is_some()));
    }

    /// Count a failed Apply; `error` says why, `generation` is the actuator's before it.
    fn apply_failed(&mut self, generation: u64, error: String) {
        self.report.failed_applies += 1;
        self.series.apply_failures.inc();
        let before = self.apply_failure.take().map_or(generation, |(g, _)| g);
        self.apply_failure = Some((before, error));
    }

    /// SIGUSR1 was received or the kill file exists.
    fn kill_requested(&self) -> bool {
        self.killed || self.cfg.kill_file.as_deref().is_some_and(kill_file_present)
    }

    /// Whether a decision round is due now; if so, schedules the next one.
    fn round_due(&mut self, now: Instant, arrived: bool) -> bool {
        // A round decides on telemetry that came since the last one: with `--interval` shorter
        // than the actuator's telemetry interval, the ticker would otherwise decide (and log)
        // again and again on one sample. Until the first batch, and once telemetry is stale,
        // rounds go on without one (to say so, and to fall back).
        if self.batches_since_round == 0 && self.freshness.has_sample() && !self.freshness.silent(now) {
            return false;
        }
        let Some(next) = round_grid(self.next_due, now, arrived, self.cfg.interval) else { return false };
        self.next_due = Some(next);
        self.batches_since_round = 0;
        true
    }

    /// One decision round: logs a decision per queue that stays as it is, and returns the
    /// changes (`queues[i].current` changes only once an apply succeeds). Each change counts
    /// against the per-minute budget as it is decided, so one round cannot exceed it (a
    /// fallback to the baseline is not held back by it: see the guardrails).
    fn decide(&mut self, now: Instant) -> Result<Vec<Planned>, CliError> {
        let untrained = self.untrained_queues();
        let learned = self.learned_proposals(&untrained);
        let (cfg, series, log) = (&self.cfg, &self.series, &self.log);
        let stale_after = cfg.guardrails.stale_after;
        let mut changes = Vec::new();
        let stream_stale = self.freshness.stale(now);
        let (mut stale, mut invalid, mut example) = (0usize, 0usize, None::<String>);
        for (i, q) in self.queues.iter_mut().enumerate() {
            series.decisions.inc();
            let telemetry =
                if stream_stale { guardrails::TelemetryHealth::Stale } else { q.watch.health(now, stale_after) };
            let quarantined = q.quarantine_until.is_some_and(|t| now < t);
            let model_choice = learned.as_ref().and_then(|l| l[i].setting);
            // After a start or a break in its telemetry a queue has less history than the model
            // observes: it stays as it is meanwhile, rather than fall back to the baseline and
            // back again a few intervals later. Telemetry gone stale or invalid meanwhile still
            // falls back (guardrails).
            let filling = matches!(cfg.policy, Policy::Model(_))
                && learned.as_ref().is_some_and(|l| !l[i].observed)
                && q.watch.has_arrived()
                && untrained[i].is_none()
                && matches!(telemetry, guardrails::TelemetryHealth::Good);
            // Decided all the same, unlike `recommend`, which keeps such a queue: from a setting
            // the model never trained from (the hpcc-alibaba baseline, for the shipped models),
            // holding would keep it there for good, while the step limit walks it into range.
            let outside_training = learned.as_ref().and_then(|l| l[i].outside_training.as_deref());
            let proposed = if untrained[i].is_some() {
                None
            } else if quarantined {
                Some(q.current)
            } else if let Policy::Explore(e) = &cfg.policy {
                e.setting(i, self.report.rounds, q.link, model_choice)
            } else if let (Some(m), Some(choice)) = (cfg.policy.model(), model_choice) {
                if outside_training.is_some() {
                    series.outside_training_decisions.inc();
                }
                // A queue on the setting it had when this run began (a switch's own profile):
                // a model trained offline knows it as its nearest template entry.
                let untouched = q.last_change.is_none() && q.would_be.is_none();
                Some(if untouched && m.keeps(&q.current, q.link, &choice) { q.current } else { choice })
            } else if learned.is_some() {
                model_choice
            } else {
                cfg.policy.propose(q.link)
            };
            let (current, last_change) = match q.would_be {
                Some((setting, at)) => (setting, Some(at)),
                None => (q.current, q.last_change),
            };
            let fallback_refused =
                q.fallback_refused_at.is_some_and(|t| now.saturating_duration_since(t) < guardrails::BUDGET_WINDOW);
            let ctx = QueueContext {
                current,
                baseline: q.baseline,
                xoff_bytes: q.xoff_bytes,
                last_change,
                telemetry,
                fallback_refused,
            };
            // Before its first sample a queue is left as it is: there is nothing to decide on,
            // and no reason yet to fall back. A queue the model may not decide for stays too, and
            // so does one whose history the model observes is still filling.
            let mut verdict = if q.watch.has_arrived() && untrained[i].is_none() && !filling {
                self.guardrails.check(proposed, &ctx, now)
            } else {
                guardrails::Verdict { setting: q.current, clamps: Vec::new(), spent: false }
            };
            for c in &verdict.clamps {
                series.clamp(*c);
            }
            let telemetry_fallback =
                verdict.clamps.iter().any(|c| matches!(c, Clamp::StaleTelemetry | Clamp::InvalidTelemetry));
            if verdict.clamps.contains(&Clamp::InvalidTelemetry) {
                invalid += 1;
                example.get_or_insert_with(|| format!("{}: {}", q.id, q.watch.problem().unwrap_or("invalid")));
            } else if verdict.clamps.contains(&Clamp::StaleTelemetry) {
                stale += 1;
            }
            // A change is judged against the queue's window before it (health.rs), so the queue
            // waits until that window is complete and all at its current setting: against a
            // partial one, or none at all (the first rounds after a start), the utilization guard
            // cannot fire and the depth guard compares with an empty queue; against intervals
            // from under a rolled-back change, the fabric's recovery reads as harm. A telemetry
            // fallback is not judged, so it need not wait.
            let warming_up = q.watch.intervals_at_setting() < cfg.health.window && !telemetry_fallback;
            if warming_up {
                verdict.setting = current;
            }
            let change = verdict.setting != current;
            if !change {
                // Allowed, but held for the health window: its room in the budget goes back.
                self.guardrails.refund(&verdict, now);
            }
            // The log line costs a JSON observation and a reason string: build them only if kept.
            let mut reason = String::new();
            if log.enabled() {
                let models_choice = !quarantined && !matches!(cfg.policy, Policy::Explore(_));
                reason = Why {
                    quarantined,
                    lagging: self.freshness.lag_said(),
                    clamps: &verdict.clamps,
                    arrived: q.watch.has_arrived(),
                    warming_up: warming_up.then(|| (q.watch.intervals_at_setting(), cfg.health.window)),
                    filling: (filling && !quarantined).then(|| cfg.policy.model().map_or(0, |m| m.tuning().history)),
                    untrained: untrained[i].map(|why| {
                        cfg.policy.model().expect("only a model leaves queues untrained").untrained_reason(why)
                    }),
                    extrapolation: outside_training.filter(|_| model_choice.is_some() && models_choice),
                }
                .said(&cfg.policy);
                if !change {
                    reason.push_str("; no change");
                    let d = decision(cfg, q, verdict.setting, false, reason);
                    record(log, &Decision { proposed: proposed.map(setting_json), ..d })?;
                    continue;
                }
            }
            if change {
                if cfg.mode == Mode::Shadow {
                    q.would_be = Some((verdict.setting, now));
                }
                changes.push(Planned {
                    queue: i,
                    setting: verdict.setting,
                    telemetry_fallback,
                    proposed: proposed.map(setting_json),
                    reason,
                });
            }
        }
        self.log_untrusted(stale, invalid, example, stream_stale);
        Ok(changes)
    }

    /// Per queue, why a learned model may not decide for it. A learned model decides only for
    /// queues at the line rates and telemetry intervals it trained on, unless the operator
    /// allowed the rest; an exploring policy uses it as an anchor only. Each decision says
    /// why; a model that can decide for no queue at all (on a switch polled every second, one
    /// trained on 100 µs telemetry) is said once, loudly, once it has lasted longer than one
    /// late poll (which holds every queue for `history` rounds) can explain.
    fn untrained_queues(&mut self) -> Vec<Option<Untrained>> {
        let cfg = &self.cfg;
        let untrained: Vec<Option<Untrained>> = match &cfg.policy {
            Policy::Model(m) => {
                let (rates, intervals) = (cfg.allow_untrained_rates, cfg.allow_untrained_intervals);
                self.queues.iter().map(|q| m.untrained(q.link, q.watch.features(), rates, intervals)).collect()
            }
            _ => vec![None; self.queues.len()],
        };
        let all_untrained = !untrained.is_empty() && untrained.iter().all(Option::is_some);
        self.all_untrained_rounds = if all_untrained { self.all_untrained_rounds.saturating_add(1) } else { 0 };
        if let (Policy::Model(m), Some(Some(why))) = (&cfg.policy, untrained.first()) {
            let lasting = self.all_untrained_rounds > ALL_UNTRAINED_ROUNDS.max(m.tuning().history as u32 + 1);
            if lasting && !self.warned_all_untrained {
                self.warned_all_untrained = true;
                warn!(
                    target = %cfg.target,
                    rounds = self.all_untrained_rounds,
                    "model:{} has held every queue for {} rounds: {} (and so on for the rest); while that lasts this \
                     run changes nothing. A model for this target: `record --target` it, then `train --telemetry` \
                     (README \"Offline learning and recommendations\")",
                    m.spec,
                    self.all_untrained_rounds,
                    m.untrained_reason(*why)
                );
            }
        }
        for why in untrained.iter().flatten() {
            match why {
                Untrained::Rate(_) => self.series.untrained_rate_holds.inc(),
                Untrained::Interval(_) => self.series.untrained_interval_holds.inc(),
            };
        }
        untrained
    }

    /// A learned model's proposals, one per queue. It decides for the queues it may decide for
    /// in one batch, from the same features it was trained on; a queue with no history yet gets
    /// no proposal (guardrails fall back).
    fn learned_proposals(&self, untrained: &[Option<Untrained>]) -> Option<Vec<Proposal>> {
        self.cfg.policy.model().map(|m| {
            let decided: Vec<usize> = (0..self.queues.len()).filter(|&i| untrained[i].is_none()).collect();
            let queues: Vec<_> =
                decided.iter().map(|&i| (self.queues[i].link, self.queues[i].watch.features())).collect();
            let mut out = vec![Proposal::default(); self.queues.len()];
            for (&i, p) in decided.iter().zip(m.propose(&queues)) {
                out[i] = p;
            }
            out
        })
    }

    /// Says when queues start falling back to the baseline for want of telemetry to trust,
    /// and when every queue's telemetry is good again; the rounds between are only counted.
    fn log_untrusted(&mut self, stale: usize, invalid: usize, example: Option<String>, stream_stale: bool) {
        let (cfg, untrusted) = (&self.cfg, stale + invalid);
        if untrusted > 0 && self.untrusted_queues == 0 {
            let why = match (stale, example) {
                (0, Some(e)) => format!("invalid samples (e.g. {e})"),
                (_, Some(e)) => format!("{stale} stale, the rest invalid (e.g. {e})"),
                _ if stream_stale => {
                    format!("no fresh batch for --stale-after ({:?}) or lagging", self.cfg.guardrails.stale_after)
                }
                _ => "their samples stopped or froze".to_string(),
            };
            let what = match cfg.mode {
                Mode::Enforce => "they fall back to the baseline",
                Mode::Shadow => "they would fall back to the baseline (shadow mode: nothing written)",
            };
            warn!(
                target = %cfg.target,
                queues = untrusted,
                baseline = %cfg.baseline.name(),
                "telemetry cannot be trusted on {untrusted} of {} queues: {why}; {what} until it can",
                self.queues.len()
            );
        } else if untrusted == 0 && self.untrusted_queues > 0 {
            info!(target = %cfg.target, "telemetry trusted again on every queue");
        }
        self.untrusted_queues = untrusted;
    }

    /// Write the decision-log lines of a round's changes, now that it is known whether they
    /// were applied.
    fn record_planned(&self, planned: &[Planned], applied: bool, note: &str) -> Result<(), CliError> {
        if !self.log.enabled() {
            return Ok(());
        }
        for p in planned {
            let q = &self.queues[p.queue];
            let d = decision(&self.cfg, q, p.setting, applied, format!("{}{note}", p.reason));
            record(&self.log, &Decision { proposed: p.proposed.clone(), ..d })?;
        }
        Ok(())
    }

    /// Leave only confirmed settings behind, and give the writer lease back. A hung actuator
    /// holds each call for `--call-timeout`: the calls share one such wait, so that a stop
    /// (SIGTERM, with `docker stop`'s 10 s behind it) takes no longer than one call after the
    /// step in progress (a call already waiting is waited for). A rollback whose reply comes
    /// after that wait counts as failed: the change is reported left to the actuator's
    /// deadline, the safe side. A failed decision-log write does not stop the rollback or the
    /// release; it is returned after them.
    async fn shutdown(mut self) -> Result<RunReport, CliError> {
        let give_up = tokio::time::Instant::now() + self.cfg.call_timeout;
        let mut log_failure = None;
        // A write whose outcome went unread (its reply and its read-back lost), or an unwatched
        // change whose rollback failed: the loop reads back before any new change, but a stop
        // that came first skipped that, and left the change unsaid (exit 0).
        let unread = (self.unread_apply.is_some() || self.unrolled.is_some())
            && self.pending.is_none()
            && self.unsettled.is_none();
        if let (Some(p), Some((lease_id, _))) = (self.pending.take(), self.lease.clone()) {
            let ended = if tokio::time::timeout_at(give_up, self.reverted_at_deadline(&p)).await.unwrap_or(false) {
                self.reverted_by_actuator(&p, " (controller stopping)")
            } else {
                let req = pb::RollbackRequest {
                    lease_id,
                    to_generation: None,
                    reason: format!("controller stopping; generation {} was never confirmed", p.generation),
                };
                let answer = tokio::time::timeout_at(give_up, self.client.rollback(req))
                    .await
                    .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer within --call-timeout")));
                match answer {
                    Ok(resp) => {
                        count_rollback(&mut self.report, &self.series, "shutdown");
                        self.taken_back(&p, resp.into_inner().in_effect_from_ts_ns, "controller stopping")
                    }
                    // The call failed, but the rollback may have happened (a reply lost), or
                    // the change gone otherwise (another writer took the lease): read back,
                    // while the stop's wait lasts, before saying it was left.
                    Err(s) if tokio::time::timeout_at(give_up, self.change_gone(&p)).await.unwrap_or(false) => {
                        warn!(code = ?s.code(), "the rollback at shutdown got no answer, but the change is gone");
                        count_rollback(&mut self.report, &self.series, "shutdown");
                        self.taken_back(&p, 0, "controller stopping")
                    }
                    Err(s) => {
                        warn!(code = ?s.code(), "rollback at shutdown failed; the actuator's deadline will revert it");
                        // Said where the change's fate is looked for: the report (and the exit
                        // status) and each queue's decision log.
                        self.report.left_unconfirmed.push((self.cfg.target.clone(), p.generation));
                        let why = format!(
                            "controller stopping: rolling back generation {} failed ({}); the actuator reverts it at \
                             its confirm deadline",
                            p.generation,
                            said(&s)
                        );
                        p.previous.iter().try_for_each(|(i, _)| {
                            let q = &self.queues[*i];
                            record(&self.log, &decision(&self.cfg, q, q.current, false, why.clone()))
                        })
                    }
                }
            };
            log_failure = ended.err();
        }
        // A change whose Confirm failed unread: settled now if the actuator answers in time.
        // Only the read is under the stop's deadline: a settlement cut short there (its
        // rollback) lost the change from the report.
        if let Some((p, failure)) = self.unsettled.take() {
            match tokio::time::timeout_at(give_up, self.resync()).await {
                Ok(Ok(config)) => {
                    if let Err(e) = self.settle_failed_confirm(p, failure, config, false).await {
                        log_failure = log_failure.or(Some(e));
                    }
                }
                _ => self.unsettled = Some((p, failure)),
            }
            if let Some((p, failure)) = self.unsettled.take() {
                self.report.left_unconfirmed.push((self.cfg.target.clone(), p.generation));
                let why = format!(
                    "controller stopping: the Confirm of generation {} failed ({}) and the actuator could not be \
                     read back; unless that Confirm landed, the actuator reverts it at its confirm deadline",
                    p.generation,
                    said(&failure)
                );
                warn!(generation = p.generation, "{why}");
                let logged = p.previous.iter().try_for_each(|(i, _)| {
                    let q = &self.queues[*i];
                    record(&self.log, &decision(&self.cfg, q, q.current, false, why.clone()))
                });
                log_failure = log_failure.or(logged.err());
            }
        }
        if unread && self.lease.is_some() {
            match self.unread_at_stop(give_up).await {
                Ok(None) => {}
                Ok(Some(generation)) => {
                    self.report.left_unconfirmed.push((self.cfg.target.clone(), generation));
                    warn!(
                        generation,
                        "controller stopping: an unconfirmed change may be in effect and could not be read back \
                         or rolled back in time; the actuator reverts it at its confirm deadline"
                    );
                }
                Err(e) => log_failure = log_failure.or(Some(e)),
            }
        }
        if let Some((lease_id, _)) = self.lease.take() {
            let release = self.client.release_writer(pb::ReleaseWriterRequest { lease_id });
            // Either timeout may end the call first: the stop's, or the channel's own
            // `--call-timeout`, which returns an error (it went unsaid). A settlement above may
            // have used the stop's wait up: the release then still gets a moment, or a lease
            // the actuator could give back lapsed at its TTL, and a restarted controller was
            // refused the role meanwhile.
            let release_by = give_up.max(tokio::time::Instant::now() + RELEASE_AFTER_OVERRUN);
            match tokio::time::timeout_at(release_by, release).await {
                Ok(Ok(_)) => {}
                Ok(Err(s)) => warn!(
                    target = %self.cfg.target,
                    "the lease's release failed ({}); it lapses at its TTL",
                    said(&s)
                ),
                Err(_) => warn!(target = %self.cfg.target, "no answer to the lease's release; it lapses at its TTL"),
            }
        }
        // A run that tried to change this target and never could (a device refusing every
        // write) ends as a failure: exit 0 read as success by whoever scripted it. A write whose
        // reply was lost may have landed all the same: the generation read back since then says.
        if let (0, Some((before, last))) = (self.report.applies, self.apply_failure.take()) {
            // An Apply still unread may have landed: said as left unconfirmed above instead.
            if self.generation <= before && self.unread_apply.is_none() {
                let r = &mut self.report;
                r.nothing_landed.push((self.cfg.target.clone(), r.failed_applies, last));
            }
        }
        match log_failure {
            Some(e) => Err(self.report.said_with(e)),
            None => Ok(self.report),
        }
    }

    /// At a stop with an Apply's outcome unread or an unconfirmed change not rolled back
    /// ([`Self::shutdown`]'s `unread`): read the actuator back and roll back the unconfirmed
    /// change it shows, both by `give_up`. Returns the generation left unconfirmed, if any: the
    /// one read, or, unread, the one the lost Apply would have made (or the one whose rollback
    /// failed before).
    async fn unread_at_stop(&mut self, give_up: tokio::time::Instant) -> Result<Option<u64>, CliError> {
        let left_unread = self.unread_apply.map(|before| before + 1).or(self.unrolled);
        let config = match tokio::time::timeout_at(give_up, self.resync()).await {
            Ok(Ok(config)) => config,
            _ => return Ok(left_unread),
        };
        match tokio::time::timeout_at(give_up, self.roll_back_unwatched(&config, "at the controller's stop")).await {
            Ok(Ok(true)) => Ok(None),
            Ok(Ok(false)) | Err(_) => Ok(Some(config.generation)),
            // The rollback went through; only its decision-log lines failed.
            Ok(Err(e)) => Err(e),
        }
    }
}

/// How long the lease's release may take at a stop whose wait other calls used up.
const RELEASE_AFTER_OVERRUN: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop busy more than 90% of a 10 s window is said not to keep up, once, however many
    /// windows it stays so; one that waits again is said to keep up; a window not yet over
    /// says nothing.
    #[test]
    fn a_loop_busy_nearly_all_of_a_window_is_said_not_to_keep_up() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut busy = Busy { since: t0, waited: Duration::from_millis(500), warned: false };
        busy.check_at(t0 + s(9), "t", 1);
        assert!(!busy.warned && busy.since == t0, "the window is not over");
        busy.check_at(t0 + s(10), "t", 1);
        assert!(busy.warned && busy.waited.is_zero() && busy.since == t0 + s(10), "95% busy");
        busy.waited = Duration::from_millis(900);
        busy.check_at(t0 + s(20), "t", 1);
        assert!(busy.warned, "91% busy: still not keeping up");
        busy.waited = Duration::from_millis(1_500);
        busy.check_at(t0 + s(30), "t", 1);
        assert!(!busy.warned, "85% busy keeps up");
        busy.waited = Duration::from_millis(200);
        busy.check_at(t0 + s(40), "t", 1);
        assert!(busy.warned, "98% busy again");
    }

    /// An enforce-mode configuration with `--stale-after` and `--confirm-within` left out.
    fn defaults(window: usize, interval: Duration) -> ControllerConfig {
        ControllerConfig {
            target: "http://switch".into(),
            mode: Mode::Enforce,
            policy: Policy::parse("static:100KB,400KB,0.5").unwrap(),
            baseline: ecn_env::Baseline::from_name("hpcc-alibaba").unwrap(),
            interval,
            confirm_within: DEFAULT_CONFIRM_WITHIN,
            call_timeout: Duration::from_secs(5),
            duration: None,
            decision_log: None,
            kill_file: None,
            metrics: None,
            token: None,
            tls_ca: None,
            guardrails: GuardrailConfig::default(),
            follows_telemetry: FollowsTelemetry { stale_after: true, confirm_within: true },
            health: HealthConfig { window, ..Default::default() },
            quarantine: Duration::from_secs(50),
            controller_id: "test".into(),
            allow_untrained_rates: false,
            allow_untrained_intervals: false,
        }
    }

    /// The defaults grow to fit the telemetry, within what the checks at start ask: a SONiC
    /// switch's 10 s (30 s, 82 s); an actuator without telemetry (interval 0), whose default
    /// 10 s left nothing past two `--interval` of 5 s; an hour's cap that still leaves room past
    /// the window (a window of one at 1 000 s); and a window no confirm window can hold.
    #[test]
    fn defaults_fit_the_telemetry_interval() {
        let caps = |interval: Duration| pb::Capabilities {
            min_telemetry_interval_ns: interval.as_nanos() as u64,
            telemetry_time_scale: 1.0,
            ..Default::default()
        };
        let fitted = |window: usize, interval: Duration, telemetry: Duration| {
            let mut cfg = defaults(window, interval);
            let caps = caps(telemetry);
            fit_to_telemetry(&mut cfg, &caps)?;
            stale_after_fits_interval(cfg.guardrails.stale_after, &cfg.target, &caps)?;
            window_fits_confirm(&cfg, &caps)?;
            Ok::<_, CliError>((cfg.guardrails.stale_after, cfg.confirm_within))
        };
        let s = Duration::from_secs;
        assert_eq!(fitted(5, s(1), Duration::from_millis(100)).unwrap(), (s(3), s(10)), "fast telemetry: as they were");
        assert_eq!(fitted(5, s(1), s(10)).unwrap(), (s(30), s(82)));
        assert_eq!(fitted(5, s(5), Duration::ZERO).unwrap(), (s(3), s(15)));
        assert_eq!(fitted(1, s(1), s(1000)).unwrap(), (s(3000), s(3600)));
        let refused = fitted(2, s(1), s(1000)).unwrap_err().to_string();
        assert!(refused.contains("--health-window 2") && refused.contains("at most 60 minutes"), "{refused}");
    }

    /// A transport failure says its cause, once.
    #[test]
    fn a_status_is_said_with_its_causes() {
        let mut s = tonic::Status::unavailable("tcp open error");
        s.set_source(std::sync::Arc::new(std::io::Error::from_raw_os_error(24)));
        assert_eq!(said(&s), "Unavailable: tcp open error: Too many open files (os error 24)");
        let plain = tonic::Status::failed_precondition("stale generation");
        assert_eq!(said(&plain), "FailedPrecondition: stale generation");
    }

    /// Any entry at the kill file's path throws the switch, a dangling link too (`exists`
    /// followed the link and said no).
    #[test]
    fn a_kill_file_is_there_in_any_form() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kill");
        assert!(!kill_file_present(&path));
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &path).unwrap();
        assert!(kill_file_present(&path), "a dangling symbolic link");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "").unwrap();
        assert!(kill_file_present(&path));
    }

    /// Without telemetry the ticker's rounds come one an interval (9 in 10 ticks, the first
    /// waiting half an interval), and with a batch each interval one a batch: the ticker's
    /// half-interval lateness was taken for a missed slot, and such a target decided every
    /// second interval (5 in 10).
    #[test]
    fn rounds_keep_to_one_an_interval_with_or_without_telemetry() {
        let interval = Duration::from_millis(100);
        let start = Instant::now();
        for arrived in [false, true] {
            let (mut next_due, mut rounds) = (None, 0);
            for k in 0..10u32 {
                // Batches arrive a little after each tick; the ticker fires on the tick.
                let now = start + interval * k + if arrived { Duration::from_millis(3) } else { Duration::ZERO };
                if let Some(next) = round_grid(next_due, now, arrived, interval) {
                    (next_due, rounds) = (Some(next), rounds + 1);
                }
            }
            assert!(rounds >= 9, "arrived {arrived}: {rounds} rounds in 10 intervals");
        }
    }

    /// A lost actuator's reconnect warnings: each while the pause grows (0.1 s to 3.2 s), then
    /// once a minute (every 12th try at 5 s), where one came every 5 s for as long as it was gone.
    #[test]
    fn reconnect_warnings_thin_out_once_the_pause_is_longest() {
        let mut r = Reopening::new();
        let mut loud = Vec::new();
        for _ in 0..30 {
            r.losses += 1;
            if r.loud() {
                loud.push(r.losses);
            }
            r.backoff = (r.backoff * 2).min(RECONNECT_BACKOFF_MAX);
        }
        assert_eq!(loud, [1, 2, 3, 4, 5, 6, 12, 24]);
    }
    use health::IntervalStats;

    /// Batches after a change that bring no new interval for a watched queue add nothing to
    /// its window: neither the interval from before the change nor a repeated sample. Late
    /// intervals from before the change go to the window before it, or to neither.
    #[test]
    fn only_new_intervals_enter_the_health_window() {
        let id = pb::QueueId { switch: "leaf1".into(), port: "eth1".into(), queue: 3 };
        let setting = EcnSetting { kmin_bytes: 100_000, kmax_bytes: 400_000, pmax: 0.2 };
        let mut queues = vec![QueueState {
            id: id.clone(),
            link: ecn_env::BitsPerSec(100_000_000_000),
            xoff_bytes: None,
            current: setting,
            baseline: setting,
            last_change: None,
            quarantine_until: None,
            watch: QueueWatch::keeping(5),
            would_be: None,
            fallback_refused_at: None,
        }];
        let index = HashMap::from([(id.to_string(), 0)]);
        let sample = |ts_ns: u64, drops: u64| pb::TelemetrySample {
            ts_ns,
            id: Some(id.clone()),
            link_bps: 100_000_000_000,
            queue_bytes_avg: 10.0,
            queue_bytes_max: 20,
            drops,
            ..Default::default()
        };
        // Before the change: an interval with 4 drops.
        feed_samples(&mut queues, &index, None, &[sample(100, 0), sample(200, 4)]);
        let mut p = Pending {
            generation: 1,
            landed_ns: 0,
            in_effect_from_ns: 0,
            window: 5,
            queues: vec![0],
            slots: Pending::slots_of(&[0]),
            before: vec![Vec::new()],
            after: vec![Vec::new()],
            deadline: Instant::now(),
            previous: Vec::new(),
            retry_rollback_at: None,
        };
        feed_samples(&mut queues, &index, Some(&mut p), &[sample(200, 4)]);
        feed_samples(&mut queues, &index, Some(&mut p), &[]);
        assert!(p.after[0].is_empty(), "{:?}", p.after[0]);
        feed_samples(&mut queues, &index, Some(&mut p), &[sample(300, 0)]);
        assert_eq!(p.after[0].iter().map(|i| (i.span_ns, i.drops)).collect::<Vec<_>>(), [(100, 0)]);

        // A change that landed at 450 ns and is in effect from 500 ns, whose reply came before
        // the batches up to there (a backlogged stream): 300-400 ns joins the window before,
        // of which the last two (the window) are kept, and 400-500 ns, during the change,
        // neither window.
        let old = IntervalStats { drops: 9, ..Default::default() };
        p = Pending {
            landed_ns: 450,
            in_effect_from_ns: 500,
            window: 2,
            before: vec![vec![old, old]],
            after: vec![Vec::new()],
            ..p
        };
        feed_samples(&mut queues, &index, Some(&mut p), &[sample(400, 7)]);
        feed_samples(&mut queues, &index, Some(&mut p), &[sample(500, 5)]);
        assert!(p.after[0].is_empty(), "{:?}", p.after[0]);
        assert_eq!(p.before[0].iter().map(|i| i.drops).collect::<Vec<_>>(), [9, 7]);
        feed_samples(&mut queues, &index, Some(&mut p), &[sample(600, 1)]);
        assert_eq!(p.after[0].iter().map(|i| (i.start_ns, i.drops)).collect::<Vec<_>>(), [(500, 1)]);
        assert_eq!(p.before[0].len(), 2);
    }
}
