//! `ecn-tuner run`: the online controller, in shadow or enforce mode.

use crate::controller::guardrails::GuardrailConfig;
use crate::controller::health::HealthConfig;
use crate::controller::{self, ControllerConfig, Mode};
use crate::error::CliError;
use crate::policy::Policy;
use clap::Args;
use ecn_env::{Baseline, Nanos};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `run`.
#[derive(Args)]
pub struct RunArgs {
    /// Actuator URL, e.g. http://127.0.0.1:50051 (https with --tls-ca). Repeat it to control
    /// several actuators from one process.
    #[arg(long, value_name = "URL", required = true)]
    target: Vec<String>,
    /// shadow: decide and log, never write. enforce: apply with commit-confirm and health checks.
    #[arg(long, value_enum)]
    mode: Mode,
    /// Required with --mode enforce: this controller will change ECN settings on the target.
    #[arg(long)]
    allow_writes: bool,
    /// Policy: static:<KMIN>,<KMAX>,<PMAX> or baseline:<name>.
    #[arg(long, value_name = "POLICY", default_value = "baseline:hpcc-alibaba")]
    policy: String,
    /// Known-good fallback on stale or invalid telemetry, and the kill switch's target.
    #[arg(long, value_name = "NAME", default_value = "hpcc-alibaba")]
    baseline: String,
    /// Time between decision rounds.
    #[arg(long, value_name = "DUR", default_value = "1s")]
    interval: String,
    /// Unconfirmed changes revert on the actuator after this.
    #[arg(long, value_name = "DUR", default_value = "10s")]
    confirm_within: String,
    /// Telemetry intervals compared before and after each change.
    #[arg(long, default_value_t = 5)]
    health_window: usize,
    /// Minimum time between two changes of one queue.
    #[arg(long, value_name = "DUR", default_value = "5s")]
    min_dwell: String,
    /// Most queue changes per minute.
    #[arg(long, default_value_t = 600)]
    max_changes_per_minute: u32,
    /// Telemetry older than this is stale: queues fall back to the baseline.
    #[arg(long, value_name = "DUR", default_value = "3s")]
    stale_after: String,
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
    /// Name of this controller in the writer lease and the actuator's journal.
    #[arg(long, default_value = "ecn-tuner")]
    controller_id: String,
}

fn duration(flag: &str, v: &str) -> Result<Duration, CliError> {
    let n: Nanos = v.parse().map_err(|e| CliError::BadInput(format!("--{flag} '{v}': {e}")))?;
    Ok(Duration::from_nanos(n.0))
}

fn read(flag: &str, p: &PathBuf) -> Result<Vec<u8>, CliError> {
    std::fs::read(p).map_err(|e| CliError::BadInput(format!("--{flag} {}: {e}", p.display())))
}

/// Parse the flags and run the controller.
pub fn run(a: RunArgs) -> Result<(), CliError> {
    if a.mode == Mode::Enforce && !a.allow_writes {
        return Err(CliError::BadInput(format!(
            "--mode enforce writes ECN settings on {}; add --allow-writes to proceed (or use --mode shadow)",
            a.target.join(", ")
        )));
    }
    let baseline = Baseline::from_name(&a.baseline)
        .ok_or_else(|| CliError::BadInput(format!("--baseline '{}': not a baseline", a.baseline)))?;
    let token = match &a.token_file {
        Some(p) => Some(String::from_utf8_lossy(&read("token-file", p)?).trim().to_string()),
        None => None,
    };
    let cfg = ControllerConfig {
        target: String::new(),
        mode: a.mode,
        policy: Policy::parse(&a.policy)?,
        baseline,
        interval: duration("interval", &a.interval)?,
        confirm_within: duration("confirm-within", &a.confirm_within)?,
        duration: a.duration.as_deref().map(|d| duration("duration", d)).transpose()?,
        decision_log: a.decision_log,
        kill_file: a.kill_file,
        metrics: a.metrics,
        token,
        tls_ca: a.tls_ca.as_ref().map(|p| read("tls-ca", p)).transpose()?,
        guardrails: GuardrailConfig {
            min_dwell: duration("min-dwell", &a.min_dwell)?,
            max_changes_per_minute: a.max_changes_per_minute,
            stale_after: duration("stale-after", &a.stale_after)?,
            ..Default::default()
        },
        health: HealthConfig { window: a.health_window.max(1), ..Default::default() },
        quarantine: duration("min-dwell", &a.min_dwell)? * 10,
        controller_id: a.controller_id,
    };
    if cfg.interval.is_zero() {
        return Err(CliError::BadInput("--interval must be greater than 0".into()));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("tokio runtime: {e}")))?;
    let report = rt.block_on(controller::run_all(cfg, a.target))?;
    println!(
        "{}",
        serde_json::json!({
            "rounds": report.rounds, "applies": report.applies,
            "confirms": report.confirms, "rollbacks": report.rollbacks
        })
    );
    Ok(())
}
