//! `ecn-tuner record`: write telemetry as Parquet or CSV (README "Telemetry schema"), the
//! input of offline learning:
//! - `--scenario`: run a scenario under a behaviour policy. `explore` is the default
//!   behaviour: it visits the whole action template inside the bounds, so the data covers more
//!   than one setting per state;
//! - `--target URL --duration D`: read a live actuator's telemetry for a while, under whatever
//!   controls it (read only: no writer lease is taken).

use crate::capture::{self, Target, Until};
use crate::error::CliError;
use crate::output::outln;
use crate::policy::Policy;
use crate::rollout;
use clap::Args;
use ecn_datasets::io;
use ecn_datasets::telemetry::counted;
use ecn_env::scenario::Scenario;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `record`.
#[derive(Args)]
pub struct RecordArgs {
    /// Built-in scenario name, scenario TOML file, or HPCC config.txt.
    #[arg(long, value_name = "NAME|FILE", required_unless_present = "target", conflicts_with = "target")]
    scenario: Option<String>,
    /// Record from a live actuator instead (read only), for --duration; `sim`, or a built-in
    /// scenario's name, records a simulated fabric started in this process, as `run` does.
    #[arg(long, value_name = "URL|sim|SCENARIO", requires = "duration")]
    target: Option<String>,
    /// With --target: how long to record, e.g. 30s.
    #[arg(long, value_name = "DUR", conflicts_with = "scenario")]
    duration: Option<String>,
    /// With --target: file holding the actuator's bearer token.
    #[arg(long, value_name = "FILE", conflicts_with = "scenario")]
    token_file: Option<PathBuf>,
    /// With --target: CA certificate (PEM) for an https URL.
    #[arg(long, value_name = "FILE", conflicts_with = "scenario")]
    tls_ca: Option<PathBuf>,
    /// Behaviour policy: explore[:SEED] (default), static:, baseline: or model:.
    #[arg(long, value_name = "POLICY", default_value = "explore", conflicts_with = "target")]
    policy: String,
    /// Seed for flow generation and marking (default: the scenario's).
    #[arg(long, conflicts_with = "target")]
    seed: Option<u64>,
    /// With --scenario: the sample interval, e.g. 1ms: an exploring policy decides at it
    /// (default: 100us), a static or baseline policy is sampled at it (default: the
    /// scenario's). A model, and exploration around one, decide at the model card's.
    #[arg(long, value_name = "DUR", conflicts_with = "target")]
    interval: Option<String>,
    /// The telemetry file to write: .parquet, or .csv for spreadsheets.
    #[arg(long, value_name = "FILE.parquet|FILE.csv")]
    out: PathBuf,
}

/// Simulate and write the telemetry.
pub fn run(args: RecordArgs) -> Result<(), CliError> {
    super::prepare_telemetry_out(&args.out)?;
    let inputs: Vec<_> = args.scenario.iter().map(|s| ("--scenario", std::path::Path::new(s))).collect();
    super::refuse_overwriting_inputs(std::slice::from_ref(&args.out), &inputs)?;
    let Some(name) = &args.scenario else { return record_target(&args) };
    let mut policy = Policy::parse(&args.policy)?;
    let mut scenario = Scenario::load(name, args.seed)?;
    if let Some(text) = &args.interval {
        let interval = super::interval(text)?;
        match &mut policy {
            // The anchor model's decisions need observations at its own interval.
            Policy::Explore(e) if e.model().is_some_and(|m| m.tuning().control_interval != interval) => {
                return Err(CliError::BadInput(format!(
                    "--interval: exploration around a model runs at the model's control interval ({}); drop the \
                     flag, or explore around a baseline",
                    e.tuning().control_interval
                )))
            }
            Policy::Explore(e) => *e = e.clone().at_interval(interval),
            Policy::Static(_) | Policy::Baseline(_) => scenario.fabric.sample_interval = interval,
            Policy::Model(m) if m.tuning().control_interval != interval => {
                return Err(CliError::BadInput(format!(
                    "--interval: a model decides at its card's control interval ({}); drop the flag",
                    m.tuning().control_interval
                )))
            }
            Policy::Model(_) => {}
        }
    }
    // A run too long to hold at this interval is refused before it starts.
    let sampled_every = policy.control_interval().unwrap_or(scenario.fabric.sample_interval);
    scenario.check_sampled_every(sampled_every)?;
    info!(scenario = %scenario.name, policy = %policy, seed = scenario.seed, "recording");
    let mut outcome = rollout::simulate(&scenario, &policy, &policy.to_string(), None)?;
    let rows = outcome.sim.take_telemetry();
    super::make_folder_of(&args.out)?;
    io::write_telemetry(&args.out, &rows).map_err(|e| CliError::Failed(e.to_string()))?;
    let queues = outcome.sim.queues().len();
    outln!(
        "wrote {}: {} ({} × {} of {}) from {} under {}",
        args.out.display(),
        counted(rows.len() as u64, "row", "rows"),
        counted(queues as u64, "queue", "queues"),
        counted((rows.len() / queues.max(1)) as u64, "interval", "intervals"),
        sampled_every,
        scenario.name,
        policy
    );
    Ok(())
}

/// `record --target URL --duration D`.
fn record_target(args: &RecordArgs) -> Result<(), CliError> {
    let url = args.target.clone().expect("clap: --scenario or --target");
    let text = args.duration.as_deref().expect("clap: --target requires --duration");
    let duration = super::positive_duration("--duration", text)?;
    let target = Target::from_flags(&url, args.token_file.as_deref(), args.tls_ca.as_deref())?;
    let runtime = crate::threads::async_runtime(None)?;
    // Written as it comes (through a temporary file, renamed into place at the end): a long
    // recording is not held in memory.
    let failed = |e: io::IoError| CliError::Failed(e.to_string());
    super::make_folder_of(&args.out)?;
    let mut out = io::TelemetryWriter::create(&args.out).map_err(failed)?;
    let captured = runtime.block_on(capture::capture(&target, Until::Elapsed(duration), &mut out))?;
    if captured.rows == 0 {
        return Err(CliError::Failed(
            captured.cut_short.unwrap_or_else(|| format!("{url}: no telemetry arrived in {text}")),
        ));
    }
    // A recording cut short keeps what it read: an hour of telemetry is not lost to an
    // actuator restart in its last minute. The exit code still says it is short.
    // A Parquet file is written at its finish: a full disk shows there, and what was read is
    // lost with it (said, as where a row cannot be written).
    out.finish().map_err(|e| match e {
        // Whole under its temporary name, which the error gives: nothing is lost.
        io::IoError::NotPlaced { .. } => CliError::Failed(e.to_string()),
        e => capture::rows_lost(e, captured.rows, None),
    })?;
    outln!(
        "wrote {}: {} ({} in {}) from {url} ({} backend) {}",
        args.out.display(),
        counted(captured.rows, "row", "rows"),
        counted(captured.queues as u64, "queue", "queues"),
        counted(captured.batches as u64, "batch", "batches"),
        captured.backend,
        if captured.cut_short.is_some() {
            "before the stream was lost or stopped".to_string()
        } else {
            format!("over {text}")
        }
    );
    match captured.cut_short {
        Some(why) => Err(CliError::Failed(format!(
            "{why}, short of --duration {text}; the {} batches read until then are in {}",
            captured.batches,
            args.out.display()
        ))),
        None => Ok(()),
    }
}
