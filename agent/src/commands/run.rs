//! `ecn-tuner run`: the online controller, in shadow or enforce mode.

use super::{duration, positive_duration};
use crate::actuator::security::read_pem_certificates;
use crate::actuator::sim::DEFAULT_SIM_SCENARIO;
use crate::actuator::{self, ServeOptions, SimOptions};
use crate::controller::guardrails::GuardrailConfig;
use crate::controller::health::HealthConfig;
use crate::controller::requests::{self, Requester, Requests};
use crate::controller::{self, ControllerConfig, FollowsTelemetry, Mode, DEFAULT_CONFIRM_WITHIN};
use crate::error::CliError;
use crate::learned::LearnedModel;
use crate::output::outln;
use crate::policy::Policy;
use crate::rollout::{self, Job};
use clap::Args;
use ecn_env::scenario::Scenario;
use ecn_env::summary::Summary;
use ecn_env::Baseline;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

/// Arguments of `run`.
#[derive(Args)]
pub struct RunArgs {
    /// Actuator URL, e.g. http://127.0.0.1:50051 (https with --tls-ca). Repeat it to control
    /// several actuators from one process. `sim` starts the fabric simulator behind an actuator
    /// inside this process (see --scenario) and ends with a before/after FCT comparison; a
    /// built-in scenario's name (`--target mixed`) is short for `--target sim --scenario NAME`.
    #[arg(long, value_name = "URL|sim|SCENARIO", required = true)]
    target: Vec<String>,
    /// With --target sim: the scenario the embedded fabric runs (restarting with the next seed
    /// whenever it ends). Default: websearch-50.
    // The defaults of these sim-only flags are applied in `run`, so that a flag given with
    // another target is told from one left out, and refused.
    #[arg(long, value_name = "NAME|FILE")]
    scenario: Option<String>,
    /// With --target sim: seed of the first scenario run.
    #[arg(long)]
    seed: Option<u64>,
    /// With --target sim: simulated ns per wall-clock ns. Default: 0.01.
    #[arg(long, value_name = "X")]
    time_scale: Option<f64>,
    /// With --target sim: the embedded actuator's journal.
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    /// shadow: decide and log, never write. enforce: apply with commit-confirm and health checks.
    #[arg(long, value_enum)]
    mode: Mode,
    /// Required with --mode enforce: this controller will change ECN settings on the target.
    #[arg(long)]
    allow_writes: bool,
    /// Policy: static:<KMIN>,<KMAX>,<PMAX>, baseline:<name>, model:<default|PATH> or
    /// explore[:SEED[:HOLD[:SHARE[:ANCHOR]]]]. Of --policy and --model, the last given wins.
    #[arg(long, value_name = "POLICY", default_value = "baseline:hpcc-alibaba", overrides_with = "model")]
    policy: String,
    /// Shorthand for --policy model:M.
    #[arg(long, value_name = "M", overrides_with = "policy")]
    model: Option<String>,
    /// Known-good fallback on stale or invalid telemetry, and the kill switch's target.
    #[arg(long, value_name = "NAME", default_value = "hpcc-alibaba")]
    baseline: String,
    /// Time between decision rounds.
    #[arg(long, value_name = "DUR", default_value = "1s")]
    interval: String,
    /// Unconfirmed changes revert on the actuator after this (default 10s, or, where a target's
    /// telemetry is slower, long enough to watch the health window: window + 3 telemetry
    /// intervals + 2 --interval).
    #[arg(long, value_name = "DUR")]
    confirm_within: Option<String>,
    /// Telemetry intervals compared before and after each change.
    #[arg(long, default_value_t = 5)]
    health_window: usize,
    /// Health-check thresholds to change, as name=value,...: pause_floor (2), pause_ratio (2),
    /// paused_floor (0.05), util_ratio (0.5), util_min_before (0.5), depth_ratio (2),
    /// depth_slack_bytes (1000000).
    #[arg(long, value_name = "SPEC")]
    health_thresholds: Option<String>,
    /// Minimum time between two changes of one queue.
    #[arg(long, value_name = "DUR", default_value = "5s")]
    min_dwell: String,
    /// Most queue changes per minute, every target together. A fallback to the baseline counts
    /// but is not held back (unless the actuator refused one within the minute).
    #[arg(long, default_value_t = 600)]
    max_changes_per_minute: u32,
    /// Telemetry older than this is stale: queues fall back to the baseline. Older by arrival
    /// (no batch for this long) or by measurement (the newest batch is this far behind the
    /// actuator's telemetry clock). Default 3s, or three telemetry intervals of a target whose
    /// telemetry is slower (a SONiC switch's queue counters refresh every 10s out of the box).
    #[arg(long, value_name = "DUR")]
    stale_after: Option<String>,
    /// A call to the actuator without a reply after this has failed (a Confirm or Apply with an
    /// unknown outcome is then read back), so that a hung actuator never blocks the kill switch.
    #[arg(long, value_name = "DUR", default_value = "5s")]
    call_timeout: String,
    /// Stop cleanly after this long (default: run until interrupted).
    #[arg(long, value_name = "DUR")]
    duration: Option<String>,
    /// Decision log (JSON lines).
    #[arg(long, value_name = "FILE")]
    decision_log: Option<PathBuf>,
    /// Kill switch: while this file exists, every queue returns to the baseline and stays.
    /// SIGUSR1 does the same until restart.
    #[arg(long, value_name = "FILE")]
    kill_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// File holding the actuator's bearer token.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// CA certificate (PEM) for an https target.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Name of this controller in the writer lease and the actuator's journal. Default:
    /// `ecn-tuner@HOST/PID`, unique to this process, so that two controllers never share the
    /// writer role by accident; give a fixed name to let a restarted controller take its role
    /// back at once. At most 128 bytes, without control characters.
    #[arg(long)]
    controller_id: Option<String>,
    /// Let a learned model decide for ports at line rates its card does not list (see the
    /// card's training.link_speeds_bps). Without it, those queues keep their current setting.
    #[arg(long)]
    allow_untrained_rates: bool,
    /// Let a learned model decide from telemetry whose samples cover another interval than the
    /// control interval its card records (less than 0.8 or more than 1.25 times it). Without
    /// it, those queues keep their current setting.
    #[arg(long)]
    allow_untrained_intervals: bool,
}

/// `ecn-tuner@HOST/PID`.
fn default_controller_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = if host.trim().is_empty() { "localhost" } else { host.trim() };
    format!("ecn-tuner@{host}/{}", std::process::id())
}

/// `--kill-file`, once its folder is known to exist: in a folder that does not (a typo), the
/// file could never be made and the kill switch never thrown.
fn checked_kill_file(path: std::path::PathBuf) -> Result<std::path::PathBuf, CliError> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let why = match std::fs::metadata(folder) {
        Ok(m) if m.is_dir() => return Ok(path),
        Ok(_) => "is not a folder".to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "is not there".to_string(),
        Err(e) => format!("cannot be looked at ({e})"),
    };
    Err(CliError::BadInput(format!(
        "--kill-file {}: its folder {} {why}, so the file could never be made and the kill switch never thrown",
        path.display(),
        folder.display()
    )))
}

/// `--target NAME` with a built-in scenario's name is `--target sim --scenario NAME`
/// (PRODUCT.md, "Who uses it"). A name never looks like a URL, so nothing else is taken for one.
fn expand_scenario_target(a: &mut RunArgs) -> Result<(), CliError> {
    let Some(i) = a.target.iter().position(|t| t != "sim" && ecn_env::scenario::builtin(t).is_some()) else {
        return Ok(());
    };
    if let Some(s) = &a.scenario {
        return Err(CliError::BadInput(format!(
            "--target {} names a built-in scenario, and --scenario {s} another; give one",
            a.target[i]
        )));
    }
    a.scenario = Some(std::mem::replace(&mut a.target[i], "sim".into()));
    Ok(())
}

/// Refuse the flags only `--target sim` reads when the targets are real actuators, and those
/// only real actuators read with `--target sim`, rather than ignore them (or apply them to the
/// embedded actuator's own loopback URL, which the user never typed); and `sim` beside other
/// targets.
fn refuse_flags_of_other_targets(a: &RunArgs) -> Result<(), CliError> {
    if a.target.iter().any(|t| t == "sim") {
        if a.target.len() != 1 {
            return Err(CliError::BadInput("--target sim cannot be combined with other targets".into()));
        }
        let client_flag =
            super::first_given(&[("--token-file", a.token_file.is_some()), ("--tls-ca", a.tls_ca.is_some())]);
        return match client_flag {
            Some(flag) => Err(CliError::BadInput(format!(
                "{flag} is for an actuator's URL; the embedded simulator of --target sim serves on loopback without \
                 TLS or a token: drop the flag"
            ))),
            None => Ok(()),
        };
    }
    let sim_flag = super::first_given(&[
        ("--scenario", a.scenario.is_some()),
        ("--seed", a.seed.is_some()),
        ("--time-scale", a.time_scale.is_some()),
        ("--journal", a.journal.is_some()),
    ]);
    match sim_flag {
        Some(flag) => Err(CliError::BadInput(format!(
            "{flag} configures the embedded simulator of --target sim; the targets here are actuators ({})",
            a.target.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The longest `--health-window`, in intervals.
const MAX_HEALTH_WINDOW: usize = 10_000;

/// The addresses a target URL's host and port resolve to (the scheme's port where it names
/// none); none where it does not parse or resolve (connecting will say why).
fn socket_addrs(url: &str) -> Vec<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let Ok(uri) = url.parse::<tonic::codegen::http::Uri>() else { return Vec::new() };
    let Some(host) = uri.host() else { return Vec::new() };
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    // An IPv4-mapped IPv6 address is the IPv4 one; the unspecified address, to connect to,
    // is this host's loopback (Linux connects `0.0.0.0` to `127.0.0.1`).
    let canonical = |a: std::net::SocketAddr| {
        let ip = match a.ip().to_canonical() {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        std::net::SocketAddr::new(ip, a.port())
    };
    (host, port).to_socket_addrs().map(|addrs| addrs.map(canonical).collect()).unwrap_or_default()
}

/// Parse the flags and run the controller.
pub fn run(mut a: RunArgs) -> Result<(), CliError> {
    // A connection per target and the metrics endpoint's, beside the decision log.
    crate::open_files::raise_limit();
    let rt = crate::threads::async_runtime(None)?;
    // SIGHUP reopens the decision log (logrotate) and stops nothing; its default action would
    // end the process, as it did within the first tenth of a second (loading the model), before
    // the controller took it over. Taken from here on; one that comes before the log is open
    // has nothing to reopen. SIGINT, SIGTERM and SIGUSR1 (the kill switch) become requests
    // from here on too: SIGUSR1's default action killed a controller still loading its model,
    // and `--target sim`'s closing comparison must hear a stop as well.
    let (requester, requests) = requests::channel();
    {
        let _runtime = rt.enter();
        let _taken = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| CliError::Failed(format!("cannot install a signal handler (SIGHUP): {e}")))?;
        requester.listen_for_signals()?;
    }
    expand_scenario_target(&mut a)?;
    refuse_flags_of_other_targets(&a)?;
    // One actuator given twice would be two control loops under one controller id, and so one
    // lease: each would roll back the other's changes as outcomes it cannot account for. The
    // same URL however spelled, or two names for one address and port (`localhost` and
    // `127.0.0.1`).
    // (Names are resolved only where there is another target to compare with.)
    let reached: Vec<Vec<std::net::SocketAddr>> =
        if a.target.len() > 1 { a.target.iter().map(|t| socket_addrs(t)).collect() } else { Vec::new() };
    for (i, t) in a.target.iter().enumerate() {
        let same_url = |u: &String| u.trim_end_matches('/').eq_ignore_ascii_case(t.trim_end_matches('/'));
        let same_addr = |j: usize| reached[j].iter().any(|x| reached[i].contains(x));
        if let Some(j) = (0..i).find(|&j| same_url(&a.target[j]) || same_addr(j)) {
            return Err(CliError::BadInput(format!("--target {t}: given twice (as {} and {t})", a.target[j])));
        }
    }
    if a.health_window == 0 {
        return Err(CliError::BadInput(
            "--health-window 0: a change needs at least one interval of health checks".into(),
        ));
    }
    // Every queue keeps its last window of intervals (88 bytes each) to compare a change with.
    if a.health_window > MAX_HEALTH_WINDOW {
        return Err(CliError::BadInput(format!(
            "--health-window {}: at most {MAX_HEALTH_WINDOW} intervals (each queue keeps a window's worth in memory)",
            a.health_window
        )));
    }
    if a.mode == Mode::Enforce && !a.allow_writes {
        return Err(CliError::BadInput(format!(
            "--mode enforce writes ECN settings on {}; add --allow-writes to proceed (or use --mode shadow)",
            a.target.join(", ")
        )));
    }
    let baseline = Baseline::from_name(&a.baseline)
        .ok_or_else(|| CliError::BadInput(format!("--baseline '{}': not a baseline", a.baseline)))?;
    let token = a.token_file.as_deref().map(crate::actuator::security::read_token_file).transpose()?;
    let cfg = ControllerConfig {
        target: String::new(),
        mode: a.mode,
        policy: match &a.model {
            Some(m) => Policy::Model(Arc::new(LearnedModel::load(m, "--model ")?)),
            None => Policy::parse(&a.policy)?,
        },
        baseline,
        interval: positive_duration("--interval", &a.interval)?,
        confirm_within: a
            .confirm_within
            .as_deref()
            .map_or(Ok(DEFAULT_CONFIRM_WITHIN), |d| positive_duration("--confirm-within", d))?,
        call_timeout: positive_duration("--call-timeout", &a.call_timeout)?,
        duration: a.duration.as_deref().map(|d| duration("--duration", d)).transpose()?,
        decision_log: a.decision_log,
        kill_file: a.kill_file.map(checked_kill_file).transpose()?,
        metrics: a.metrics,
        token,
        tls_ca: a
            .tls_ca
            .as_ref()
            .map(|p| read_pem_certificates("--tls-ca", p))
            .transpose()
            .map_err(CliError::BadInput)?,
        guardrails: GuardrailConfig {
            min_dwell: duration("--min-dwell", &a.min_dwell)?,
            max_changes_per_minute: a.max_changes_per_minute,
            stale_after: a
                .stale_after
                .as_deref()
                .map_or(Ok(GuardrailConfig::default().stale_after), |d| positive_duration("--stale-after", d))?,
            ..Default::default()
        },
        follows_telemetry: FollowsTelemetry {
            stale_after: a.stale_after.is_none(),
            confirm_within: a.confirm_within.is_none(),
        },
        health: HealthConfig { window: a.health_window, ..Default::default() }
            .with_thresholds(a.health_thresholds.as_deref().unwrap_or(""))
            .map_err(|e| CliError::BadInput(format!("--health-thresholds {e}")))?,
        quarantine: duration("--min-dwell", &a.min_dwell)? * 10,
        controller_id: match a.controller_id {
            // Refused here, not by the actuator once the fabric is running.
            Some(id) => crate::actuator::lease::check_controller_id(&id)
                .map(|()| id)
                .map_err(|why| CliError::BadInput(format!("--controller-id {why}")))?,
            None => default_controller_id(),
        },
        allow_untrained_rates: a.allow_untrained_rates,
        allow_untrained_intervals: a.allow_untrained_intervals,
    };
    if cfg.interval.is_zero() {
        return Err(CliError::BadInput("--interval must be greater than 0".into()));
    }
    // The default needs none of these checks, and grows to fit each target (`FollowsTelemetry`).
    if let Some(given) = &a.confirm_within {
        // The actuator takes confirm windows in whole milliseconds, and 0 means "no confirm".
        if cfg.confirm_within < Duration::from_millis(1) {
            return Err(CliError::BadInput(format!("--confirm-within '{given}': must be at least 1ms")));
        }
        // The actuator refuses longer confirm windows: every Apply would fail.
        let max_confirm = crate::actuator::service::MAX_CONFIRM_WITHIN;
        if cfg.confirm_within > max_confirm {
            return Err(CliError::BadInput(format!(
                "--confirm-within '{given}': must be at most {} minutes, the longest confirm window an actuator grants",
                max_confirm.as_secs() / 60
            )));
        }
        // A change is judged at the latest two intervals before its deadline; a window no longer
        // than that leaves no time to watch its health, and every change would be rolled back.
        // Shadow mode confirms nothing: its --confirm-within is never used.
        if cfg.mode == Mode::Enforce && cfg.confirm_within <= cfg.judging_margin() {
            return Err(CliError::BadInput(format!(
                "--confirm-within '{given}': must be longer than two --interval ('{}'), or no change can be \
                 health-checked before its deadline and every change is rolled back",
                a.interval
            )));
        }
    }
    // The writer lease lives 10 intervals; the actuator grants at most an hour.
    if cfg.interval * 10 > crate::actuator::lease::MAX_TTL {
        return Err(CliError::BadInput(format!("--interval '{}': must be at most 6 minutes", a.interval)));
    }
    if a.target.iter().any(|t| t == "sim") {
        let sim = SimOptions {
            scenario: a.scenario.unwrap_or_else(|| DEFAULT_SIM_SCENARIO.into()),
            seed: a.seed,
            time_scale: a.time_scale.unwrap_or(crate::actuator::sim::DEFAULT_TIME_SCALE),
            storms: Vec::new(),
            bad_write: None,
        };
        let result = rt.block_on(run_embedded(cfg, sim, a.journal, (requester, requests)));
        rt.shutdown_timeout(SHUTDOWN_GRACE);
        return result;
    }
    let report = rt.block_on(controller::run_all(cfg, a.target, (requester, requests)));
    rt.shutdown_timeout(SHUTDOWN_GRACE);
    let report = report?;
    outln!("{}", report_json(&report, None));
    failure(&report)
}

/// A stop that could not roll its unconfirmed change back (the actuator unreachable), or that
/// never got a change into a target it tried to change, is no clean stop: exit 1, after the
/// report, saying which.
fn failure(r: &controller::RunReport) -> Result<(), CliError> {
    match r.failure_said() {
        Some(left) => Err(CliError::Failed(left)),
        None => Ok(()),
    }
}

/// How long the run's tasks get to stop once it is over. Every task it starts is awaited
/// before it returns, so none should be left; this bounds the exit should a blocking call
/// (a socket to a peer that vanished) outlive that, where dropping the runtime would wait.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn report_json(r: &controller::RunReport, comparison: Option<serde_json::Value>) -> serde_json::Value {
    let mut v = counts_json(r);
    if !r.left_unconfirmed.is_empty() {
        let left: Vec<serde_json::Value> = r
            .left_unconfirmed
            .iter()
            .map(|(target, generation)| serde_json::json!({"target": target, "generation": generation}))
            .collect();
        v["left_unconfirmed"] = serde_json::json!(left);
    }
    if !r.nothing_landed.is_empty() {
        let none: Vec<serde_json::Value> = r
            .nothing_landed
            .iter()
            .map(|(target, failures, last)| serde_json::json!({"target": target, "failed_applies": failures, "last_error": last}))
            .collect();
        v["nothing_landed"] = serde_json::json!(none);
    }
    if !r.targets.is_empty() {
        let each: Vec<serde_json::Value> = r
            .targets
            .iter()
            .map(|(target, t)| {
                let mut c = counts_json(t);
                c["target"] = serde_json::json!(target);
                c
            })
            .collect();
        v["targets"] = serde_json::json!(each);
    }
    if let Some(c) = comparison {
        v["comparison"] = c;
    }
    v
}

/// A report's counters, the run's or one target's.
fn counts_json(r: &controller::RunReport) -> serde_json::Value {
    serde_json::json!({
        "rounds": r.rounds, "applies": r.applies, "failed_applies": r.failed_applies,
        "confirms": r.confirms, "rollbacks": r.rollbacks
    })
}

/// `--target sim`: a simulated fabric behind an in-process actuator, the controller against
/// it, and at the end every completed scenario run compared with the same seed under the
/// static baseline. A stop asked for during the comparison cuts it short: the report comes
/// without it.
async fn run_embedded(
    cfg: ControllerConfig,
    sim: SimOptions,
    journal: Option<PathBuf>,
    (requester, requests): (Requester, Requests),
) -> Result<(), CliError> {
    let scenario = sim.scenario.clone();
    let opts = ServeOptions { journal, ..ServeOptions::loopback() };
    let handle = actuator::serve_sim(sim, opts).await?;
    info!(url = %handle.url(), %scenario, "simulated fabric running behind an embedded actuator");
    let baseline = cfg.baseline;
    // In shadow mode nothing was written: the runs are the fabric's own settings, not the
    // policy's, and must not read as its result.
    let ran = match cfg.mode {
        Mode::Enforce => format!("controlled ({})", cfg.policy),
        Mode::Shadow => format!("as run (shadow mode: nothing written; {} only logged decisions)", cfg.policy),
    };
    let key = if cfg.mode == Mode::Enforce { "controlled" } else { "as_run" };
    let mut stop = requests.stop.clone();
    let report = controller::run_all(cfg, vec![handle.url()], (requester, requests)).await?;
    let (mut runs, completed) = handle.sim().map(|s| s.completed_runs()).unwrap_or_default();
    handle.shutdown().await?;
    // A stop that ended the control loops still gets the comparison, as a clean stop; one
    // after they ended at --duration is someone who will not wait for it (the comparison cut
    // short at once where it came before the comparison began).
    let stopped_by_request = report.stopped;
    // Each run is simulated again under the baseline, on every core: the last ones only. On a
    // thread of its own, left behind at exit if a stop cuts it short.
    runs.drain(..runs.len().saturating_sub(COMPARED_RUNS));
    if !runs.is_empty() {
        info!(
            runs = runs.len(),
            "simulating the completed runs again under baseline:{} (a stop skips it)",
            baseline.name()
        );
    }
    let (done_tx, done) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(simulate_under_baseline(&scenario, baseline, runs));
    });
    let rows = tokio::select! {
        rows = done => rows.map_err(|_| CliError::Failed("the baseline comparison stopped without a result".into()))??,
        why = stop.stopped(), if !stopped_by_request => {
            info!(?why, "the baseline comparison is cut short: the report comes without it");
            outln!("{}", report_json(&report, None));
            return failure(&report);
        }
    };
    let enforced = key == "controlled";
    crate::output::write_err(format_args!("{}", comparison_table(&ran, baseline, &rows, completed, enforced)));
    let comparison = serde_json::json!(rows
        .iter()
        .map(|(ours, base)| serde_json::json!({"seed": ours.seed, key: ours, "baseline": base}))
        .collect::<Vec<_>>());
    outln!("{}", report_json(&report, Some(comparison)));
    failure(&report)
}

/// Each of `runs` paired with the same seed of `scenario` simulated under `baseline`.
fn simulate_under_baseline(
    scenario: &str,
    baseline: Baseline,
    runs: Vec<Summary>,
) -> Result<Vec<(Summary, Summary)>, CliError> {
    let scenarios = runs.iter().map(|run| Scenario::load(scenario, Some(run.seed))).collect::<Result<Vec<_>, _>>()?;
    let (policy, label) = (Policy::Baseline(baseline), format!("baseline:{}", baseline.name()));
    let jobs: Vec<_> = scenarios.iter().map(|scenario| Job { scenario, policy: &policy, label: &label }).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len());
    let bases = rollout::simulate_all(&jobs, threads)?;
    Ok(runs.into_iter().zip(bases).collect())
}

/// The completed runs of `run --target sim` that its comparison simulates again under the
/// baseline, the last ones: the fabric keeps 100, and simulating all of them again held a
/// stop for minutes.
const COMPARED_RUNS: usize = 10;

/// `ran`: what the first column is ("controlled (POLICY)", or the shadow mode's "as run");
/// `rows`: the last of the `completed` runs.
fn comparison_table(
    ran: &str,
    baseline: Baseline,
    rows: &[(Summary, Summary)],
    completed: u64,
    enforced: bool,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if rows.is_empty() {
        let _ = writeln!(out, "no scenario run completed while the controller ran: run longer (--duration)");
        return out;
    }
    let _ = writeln!(out, "\nFCT slowdown per completed scenario run: {ran} vs baseline:{}", baseline.name());
    if completed > rows.len() as u64 {
        let _ = writeln!(out, "(the last {} of {completed} completed runs)", rows.len());
    } else if enforced {
        // The embedded fabric starts on its scenario's own settings, not on --baseline (in
        // shadow mode every run stays on them, as its heading says).
        let _ =
            writeln!(out, "(the first run starts on the scenario's own settings until the controller's first change)");
    }
    let _ = writeln!(
        out,
        "{:>6}  {:>17}  {:>17}  {:>17}  {:>13}",
        "seed", "<10KB p99", "10-100KB p99", ">=1MB p50", "pause frames"
    );
    let f = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
    for (c, b) in rows {
        let _ = writeln!(
            out,
            "{:>6}  {:>8} / {:<6}  {:>8} / {:<6}  {:>8} / {:<6}  {:>6} / {:<6}",
            c.seed,
            f(c.slowdown.lt_10kb.p99),
            f(b.slowdown.lt_10kb.p99),
            f(c.slowdown.kb10_kb100.p99),
            f(b.slowdown.kb10_kb100.p99),
            f(c.slowdown.ge_1mb.p50),
            f(b.slowdown.ge_1mb.p50),
            c.pfc.pause_frames,
            b.pfc.pause_frames
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_file_in_a_folder_that_is_not_there_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("kill");
        assert_eq!(checked_kill_file(ok.clone()).unwrap(), ok);
        assert!(checked_kill_file("kill".into()).is_ok(), "the working folder");
        let typo = dir.path().join("no-such-folder").join("kill");
        let e = checked_kill_file(typo).unwrap_err().to_string();
        assert!(e.contains("--kill-file") && e.contains("no-such-folder") && e.contains("is not there"), "{e}");
    }
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// A confirm window the actuator refuses, or too short to watch a change's health before its
    /// deadline, is refused at start, naming the flag.
    #[test]
    fn confirm_windows_that_cannot_work_are_refused() {
        for (flags, why) in [
            (["--confirm-within", "3601s", "--interval", "1s"], "must be at most 60 minutes"),
            (["--confirm-within", "2s", "--interval", "1s"], "must be longer than two --interval ('1s')"),
        ] {
            let mut argv = vec!["run", "--target", "http://127.0.0.1:1", "--mode", "enforce", "--allow-writes"];
            argv.extend(flags);
            let e = run(Cli::try_parse_from(argv).unwrap().run).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().starts_with("--confirm-within '"), "{e}");
            assert!(e.to_string().contains(why), "{e}");
        }
        // Shadow mode confirms nothing: a long --interval needs no longer window. It gets as far
        // as connecting (nothing listens there: exit 1, not 2).
        let argv =
            ["run", "--target", "http://127.0.0.1:1", "--mode", "shadow", "--interval", "30s", "--call-timeout", "1s"];
        let e = run(Cli::try_parse_from(argv).unwrap().run).unwrap_err();
        assert_eq!(e.exit_code(), 1, "{e}");
    }

    /// With several targets the report gives each one's counts beside the totals; the totals
    /// alone left a rollback's target to the journals.
    #[test]
    fn the_report_gives_each_targets_counts() {
        let one = |target: &str, applies| {
            (target.to_string(), controller::RunReport { applies, rollbacks: 1, ..Default::default() })
        };
        let r = controller::RunReport {
            applies: 5,
            rollbacks: 2,
            targets: vec![one("http://a:1", 3), one("http://b:2", 2)],
            ..Default::default()
        };
        let v = report_json(&r, None);
        assert_eq!(v["applies"], 5);
        assert_eq!(v["targets"][1]["target"], "http://b:2");
        assert_eq!(v["targets"][1]["applies"], 2);
        assert!(report_json(&controller::RunReport::default(), None).get("targets").is_none());
    }

    #[test]
    fn a_target_given_twice_is_refused() {
        let argv = ["run", "--target", "http://127.0.0.1:1", "--target", "HTTP://127.0.0.1:1/", "--mode", "shadow"];
        let e = run(Cli::try_parse_from(argv).unwrap().run).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("given twice (as http://127.0.0.1:1 and HTTP://127.0.0.1:1/)"), "{e}");
        // Two names for one address and port.
        let argv =
            ["run", "--target", "http://127.0.0.1:7", "--target", "http://[::ffff:127.0.0.1]:7", "--mode", "shadow"];
        let e = run(Cli::try_parse_from(argv).unwrap().run).unwrap_err();
        assert!(e.to_string().contains("given twice (as http://127.0.0.1:7 and http://[::ffff:127.0.0.1]:7)"), "{e}");
        // The unspecified address connects to this host's loopback.
        let argv = ["run", "--target", "http://127.0.0.1:7", "--target", "http://0.0.0.0:7", "--mode", "shadow"];
        let e = run(Cli::try_parse_from(argv).unwrap().run).unwrap_err();
        assert!(e.to_string().contains("given twice (as http://127.0.0.1:7 and http://0.0.0.0:7)"), "{e}");
        assert_eq!(socket_addrs("http://[::]:7"), ["[::1]:7".parse().unwrap()]);
        assert_eq!(socket_addrs("http://127.0.0.1"), ["127.0.0.1:80".parse().unwrap()]);
        assert_eq!(socket_addrs("https://127.0.0.1/x"), ["127.0.0.1:443".parse().unwrap()]);
        assert!(socket_addrs("not a url").is_empty());
    }

    /// `sim` beside another embedded fabric, or an actuator's client flags with `sim`, are
    /// refused as such: the first read "given twice (as sim and sim)", the second were applied
    /// to the embedded actuator's own URL, or ignored.
    #[test]
    fn flags_of_other_targets_are_refused() {
        for (extra, said) in [
            (vec!["--target", "mixed"], "--target sim cannot be combined with other targets"),
            (vec!["--token-file", "tok"], "--token-file is for an actuator's URL"),
            (vec!["--tls-ca", "ca.pem"], "--tls-ca is for an actuator's URL"),
        ] {
            let mut argv = vec!["run", "--target", "sim", "--mode", "shadow"];
            argv.extend(extra);
            let e = run(Cli::try_parse_from(argv).unwrap().run).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains(said), "{e}");
        }
    }

    /// `scripts/quickstart` passes `--model default` and then the user's arguments, so a
    /// `--policy` given after it must replace it (and the other way round).
    #[test]
    fn the_last_of_policy_and_model_wins() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["run", "--target", "sim", "--mode", "shadow"];
            argv.extend(extra);
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
            (cli.run.policy, cli.run.model)
        };
        let (policy, model) = parse(&["--model", "default", "--policy", "baseline:huawei-latency"]);
        assert_eq!((policy.as_str(), model), ("baseline:huawei-latency", None));
        let (_, model) = parse(&["--policy", "baseline:huawei-latency", "--model", "default"]);
        assert_eq!(model.as_deref(), Some("default"));
        let (policy, model) = parse(&[]);
        assert_eq!((policy.as_str(), model), ("baseline:hpcc-alibaba", None));
    }

    /// The embedded simulator's flags are refused with a real actuator as the target, even
    /// when given their default value, and accepted with `--target sim`.
    #[test]
    fn sim_only_flags_need_target_sim() {
        let check = |target: &str, extra: &[&str]| {
            let mut argv = vec!["run", "--target", target, "--mode", "shadow"];
            argv.extend(extra);
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
            refuse_flags_of_other_targets(&cli.run)
        };
        let actuator = "http://127.0.0.1:50051";
        for flags in [
            &["--scenario", "websearch-50"][..],
            &["--seed", "3"],
            &["--time-scale", "0.01"],
            &["--journal", "j.jsonl"],
        ] {
            match check(actuator, flags) {
                Err(CliError::BadInput(m)) => assert!(m.contains(flags[0]) && m.contains("--target sim"), "{m}"),
                other => panic!("{flags:?}: {other:?}"),
            }
            check("sim", flags).unwrap();
        }
        check(actuator, &[]).unwrap();
    }

    /// A built-in scenario's name as the target runs it on the embedded simulator; with
    /// `--scenario` too, or beside an actuator, it is refused.
    #[test]
    fn a_scenario_name_as_target_is_the_embedded_simulator() {
        let parse = |argv: &[&str]| Cli::try_parse_from(argv).unwrap().run;
        let mut a = parse(&["run", "--target", "mixed", "--mode", "shadow"]);
        expand_scenario_target(&mut a).unwrap();
        assert_eq!((a.target, a.scenario.as_deref()), (vec!["sim".to_string()], Some("mixed")));
        let mut a = parse(&["run", "--target", "mixed", "--scenario", "hadoop-50", "--mode", "shadow"]);
        let e = expand_scenario_target(&mut a).unwrap_err();
        assert!(e.to_string().contains("--target mixed names a built-in scenario"), "{e}");
        let a = parse(&["run", "--target", "mixed", "--target", "http://127.0.0.1:1", "--mode", "shadow"]);
        let e = run(a).unwrap_err();
        assert!(e.to_string().contains("--target sim cannot be combined"), "{e}");
        let mut a = parse(&["run", "--target", "http://127.0.0.1:1", "--mode", "shadow"]);
        expand_scenario_target(&mut a).unwrap();
        assert_eq!((a.target[0].as_str(), a.scenario), ("http://127.0.0.1:1", None));
    }
}
