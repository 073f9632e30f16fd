//! One simulated run of a scenario under a policy, to completion: what `sim` reports and what
//! `eval` repeats over scenarios, policies and seeds.

use crate::error::CliError;
use crate::policy::Policy;
use ecn_env::fabric::FabricConfig;
use ecn_env::scenario::Scenario;
use ecn_env::summary::Summary;
use ecn_env::tuning::TuningConfig;
use ecn_env::{BitsPerSec, Simulator};
use indicatif::ProgressBar;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tracing::{info, warn};

/// The result of [`simulate`].
pub struct Outcome {
    /// The run's summary (`sim --json`).
    pub summary: Summary,
    /// The finished simulator, kept so that callers can write its flow records and telemetry.
    pub sim: Simulator,
}

/// Run `scenario` under `policy` until every flow has completed or the scenario's hard stop.
///
/// `label` names the policy in the summary (normally `policy.to_string()`). `progress`, if
/// given, is set to the number of completed flows as the run goes (its length should be the
/// scenario's flow count). Telemetry rows are recorded; use [`Simulator::take_telemetry`] on
/// the outcome to get them.
///
/// Errors: a fabric the simulator refuses is [`CliError::BadInput`], naming the scenario's
/// source.
pub fn simulate(
    scenario: &Scenario,
    policy: &Policy,
    label: &str,
    progress: Option<&ProgressBar>,
) -> Result<Outcome, CliError> {
    let started = Instant::now();
    let sim = match policy {
        // Static policies set every data queue once, before the first packet, and never again.
        Policy::Static(_) | Policy::Baseline(_) => {
            let mut fabric = scenario.fabric.clone();
            fabric.ecn = policy.plan();
            run_to_completion(scenario, fabric, progress)?
        }
        // A learned policy decides at its card's control interval, in closed loop, from the
        // telemetry of the interval just ended.
        Policy::Model(model) => {
            closed_loop(scenario, policy, model.tuning(), progress, |obs, links| model.decide(obs, links))?
        }
        // Exploration changes settings at the default control interval (its anchor model's,
        // if it has one), each queue on its own seeded schedule.
        Policy::Explore(explore) => {
            let mut decision = 0u64;
            let tuning = explore.tuning();
            closed_loop(scenario, policy, &tuning, progress, |obs, links| {
                decision += 1;
                let anchor: Vec<Option<usize>> = match explore.model() {
                    Some(m) => m.decide(obs, links).into_iter().map(Some).collect(),
                    None => vec![None; links.len()],
                };
                (0..links.len()).map(|q| explore.action(q, decision, anchor[q])).collect()
            })?
        }
    };
    Ok(finish(scenario, sim, label, started))
}

/// Run `scenario` to its end with `decide` choosing every queue's template action each
/// control interval; the simulator keeps the whole telemetry recording.
fn closed_loop(
    scenario: &Scenario,
    policy: &Policy,
    tuning: &TuningConfig,
    progress: Option<&ProgressBar>,
    decide: impl FnMut(&[f32], &[BitsPerSec]) -> Vec<usize>,
) -> Result<Simulator, CliError> {
    let mut sc = scenario.clone();
    sc.fabric.ecn = policy.plan();
    let runs = crate::learn::trainer::run_closed_loop(tuning, vec![sc], true, decide)?;
    let (mut sim, telemetry) = runs.into_iter().next().expect("one scenario, one run");
    sim.restore_telemetry(telemetry);
    if let Some(bar) = progress {
        bar.set_position(sim.flow_counts().1 as u64);
    }
    Ok(sim)
}

/// As [`simulate`], with the ECN settings the scenario itself configures (its `[switch] ecn`,
/// or an HPCC config's K maps): `sim` without `--policy`.
pub fn simulate_as_configured(
    scenario: &Scenario,
    label: &str,
    progress: Option<&ProgressBar>,
) -> Result<Outcome, CliError> {
    let started = Instant::now();
    let sim = run_to_completion(scenario, scenario.fabric.clone(), progress)?;
    Ok(finish(scenario, sim, label, started))
}

/// Build a simulator for `fabric` and the scenario's flows and run it to the end.
fn run_to_completion(
    scenario: &Scenario,
    fabric: FabricConfig,
    progress: Option<&ProgressBar>,
) -> Result<Simulator, CliError> {
    let mut sim = Simulator::new(fabric, scenario.flows.clone())
        .map_err(|e| CliError::BadInput(format!("{}: {e}", scenario.source)))?;
    sim.run(|s| {
        if let Some(bar) = progress {
            let (_, done, _) = s.flow_counts();
            bar.set_position(done as u64);
            bar.set_message(format!("t={:.3} ms", s.now().0 as f64 / 1e6));
        }
    });
    Ok(sim)
}

fn finish(scenario: &Scenario, sim: Simulator, label: &str, started: Instant) -> Outcome {
    let wall = started.elapsed().as_secs_f64();
    let summary = Summary::new(&sim, &scenario.name, label, scenario.seed, wall);
    let flows = &summary.flows;
    if flows.completed < flows.total {
        // Percentiles over the flows that finished flatter a policy that starves some: say so
        // where the figures are read, not only in a count column.
        warn!(
            scenario = %scenario.name,
            policy = label,
            seed = scenario.seed,
            completed = flows.completed,
            total = flows.total,
            "flows left unfinished at the scenario's end; this run's slowdowns cover only the completed ones"
        );
    }
    Outcome { summary, sim }
}

/// One simulation to run.
pub struct Job<'a> {
    /// The scenario, with its seed.
    pub scenario: &'a Scenario,
    /// The policy that sets its ECN.
    pub policy: &'a Policy,
    /// The policy's name in the summary.
    pub label: &'a str,
}

/// Run `jobs` on `threads` threads; summaries in the order of `jobs`. After the first failure
/// no new run starts, and the failure of the earliest job is returned.
pub fn simulate_all(jobs: &[Job], threads: usize) -> Result<Vec<Summary>, CliError> {
    let template = "{spinner} [{bar:30}] {pos}/{len} runs ({elapsed}, ETA {eta}) {msg}";
    let bar = crate::output::progress_bar(jobs.len() as u64, template);
    let _shown = crate::output::showing(&bar);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<Summary, CliError>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    crate::threads::ensure_headroom(threads, "--jobs", "; give fewer --jobs")?;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let result = simulate(job.scenario, job.policy, job.label, None).map(|o| o.summary);
                    match &result {
                        Ok(s) => info!(
                            scenario = %s.scenario,
                            policy = %s.policy,
                            seed = s.seed,
                            lt_100kb_p99 = %two_places(s.slowdown.lt_100kb.p99),
                            ge_1mb_p50 = %two_places(s.slowdown.ge_1mb.p50),
                            wall_seconds = %format!("{:.2}", s.wall_seconds),
                            "run finished"
                        ),
                        Err(_) => stop.store(true, Ordering::Relaxed),
                    }
                    results.lock().expect("no worker panics while holding the lock")[i] = Some(result);
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    let results = results.into_inner().expect("no worker panicked");
    let mut runs = Vec::with_capacity(jobs.len());
    // Jobs start in index order, so the runs that started are a prefix of `jobs`: the first
    // failure comes before any job that never ran.
    for r in results {
        match r {
            Some(Ok(s)) => runs.push(s),
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    if runs.len() == jobs.len() {
        Ok(runs)
    } else {
        Err(CliError::Failed(format!("only {} of {} runs finished", runs.len(), jobs.len())))
    }
}

/// A slowdown for the log, `-` where the run has none.
fn two_places(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}
