//! `ecn-tuner record`: run a scenario under a behaviour policy and write its telemetry as
//! Parquet (README "Telemetry schema"), the input of offline learning. `explore` is the
//! default behaviour: it visits the whole action template inside the bounds, so the data
//! covers more than one setting per state.

use crate::error::CliError;
use crate::policy::Policy;
use crate::rollout;
use clap::Args;
use ecn_datasets::io;
use ecn_env::scenario::Scenario;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `record`.
#[derive(Args)]
pub struct RecordArgs {
    /// Built-in scenario name, scenario TOML file, or HPCC config.txt.
    #[arg(long, value_name = "NAME|FILE")]
    scenario: String,
    /// Behaviour policy: explore[:SEED] (default), static:, baseline: or model:.
    #[arg(long, value_name = "POLICY", default_value = "explore")]
    policy: String,
    /// Seed for flow generation and marking (default: the scenario's).
    #[arg(long)]
    seed: Option<u64>,
    /// The telemetry file to write (.parquet).
    #[arg(long, value_name = "FILE.parquet")]
    out: PathBuf,
}

/// Simulate and write the telemetry.
pub fn run(args: RecordArgs) -> Result<(), CliError> {
    if args.out.extension().is_none_or(|e| e != "parquet") {
        return Err(CliError::BadInput(format!("--out {}: the file must end in .parquet", args.out.display())));
    }
    let policy = Policy::parse(&args.policy)?;
    let scenario = Scenario::load(&args.scenario, args.seed)?;
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CliError::BadInput(format!("--out {}: {e}", dir.display())))?;
    }
    info!(scenario = %scenario.name, policy = %policy, seed = scenario.seed, "recording");
    let mut outcome = rollout::simulate(&scenario, &policy, &policy.to_string(), None)?;
    let rows = outcome.sim.take_telemetry();
    io::write_telemetry_parquet(&args.out, &rows).map_err(|e| CliError::Failed(e.to_string()))?;
    let queues = outcome.sim.queues().len();
    println!(
        "wrote {}: {} rows ({} queues × {} intervals) from {} under {}",
        args.out.display(),
        rows.len(),
        queues,
        rows.len() / queues.max(1),
        scenario.name,
        policy
    );
    Ok(())
}
