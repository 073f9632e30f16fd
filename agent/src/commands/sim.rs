//! `ecn-tuner sim`: one scenario, one static policy, one report.

use crate::error::CliError;
use crate::output::{out, outln};
use crate::policy::Policy;
use crate::report;
use crate::rollout::{self, Outcome};
use clap::Args;
use ecn_env::fabric::EcnPlan;
use ecn_env::scenario::Scenario;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `sim`.
#[derive(Args)]
pub struct SimArgs {
    /// Built-in scenario name (see `ecn-tuner scenarios`), a scenario TOML file, or an HPCC
    /// simulator config.txt.
    #[arg(long, value_name = "NAME|FILE")]
    scenario: String,
    /// ECN policy: static:<KMIN>,<KMAX>,<PMAX>, baseline:<name>, model:<default|PATH> (a learned
    /// policy in closed loop) or explore[:SEED[:HOLD[:SHARE[:ANCHOR]]]].
    /// Default: the scenario's own setting.
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
    /// Seed for flow generation and ECN marking (default: the scenario's).
    #[arg(long)]
    seed: Option<u64>,
    /// Write flows.parquet, fct.txt (HPCC format), telemetry.parquet and summary.json here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON summary on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// Run the simulation and report.
pub fn run(args: SimArgs) -> Result<(), CliError> {
    let policy = args.policy.as_deref().map(Policy::parse).transpose()?;
    let scenario = Scenario::load(&args.scenario, args.seed)?;
    // Without --policy the scenario's own ECN setting runs: name it as the policy that runs
    // the same, so that the summary says what ran (a per-rate map has no such name).
    let policy_name = match (&policy, &scenario.fabric.ecn) {
        (Some(p), _) => p.to_string(),
        (None, EcnPlan::Fixed(s)) => Policy::Static(*s).to_string(),
        (None, EcnPlan::Baseline(b)) => Policy::Baseline(*b).to_string(),
        (None, EcnPlan::PerRate(_)) => "scenario".into(),
    };
    if let Some(dir) = &args.out {
        super::prepare_out_dir(dir, report::OUTPUT_FILES)?;
        let outputs: Vec<_> = report::OUTPUT_FILES.iter().map(|f| dir.join(f)).collect();
        let read = super::scenario_files(&args.scenario);
        let mut inputs: Vec<_> = read.iter().map(|f| ("--scenario", f.as_path())).collect();
        if let Some(Policy::Model(m)) = &policy {
            inputs.push(("--policy", m.path.as_path()));
        }
        super::refuse_overwriting_inputs(&outputs, &inputs)?;
    }
    info!(
        scenario = %scenario.name,
        source = %scenario.source,
        flows = scenario.flows.len(),
        hosts = scenario.fabric.topology.hosts().len(),
        policy = %policy_name,
        seed = scenario.seed,
        "simulating"
    );
    let template = "{spinner} {msg} [{bar:30}] {pos}/{len} flows done ({elapsed})";
    let bar = crate::output::progress_bar(scenario.flows.len() as u64, template);
    let shown = crate::output::showing(&bar);
    let outcome = match &policy {
        Some(p) => rollout::simulate(&scenario, p, &policy_name, Some(&bar))?,
        None => rollout::simulate_as_configured(&scenario, &policy_name, Some(&bar))?,
    };
    drop(shown);
    bar.finish_and_clear();
    let Outcome { summary, mut sim } = outcome;
    info!(events = summary.events, wall_seconds = summary.wall_seconds, "done");

    // The report is printed even where the files cannot be written (a full disk).
    let written = args.out.as_ref().map_or(Ok(()), |dir| {
        super::create_folder(dir, dir)?;
        report::write_outputs(dir, &mut sim, &summary)?;
        info!(dir = %dir.display(), files = ?report::OUTPUT_FILES, "wrote");
        Ok(())
    });
    if args.json {
        outln!("{}", serde_json::to_string(&summary).map_err(|e| CliError::Failed(e.to_string()))?);
    } else {
        out!("{}", report::summary_table(&summary));
    }
    written
}
