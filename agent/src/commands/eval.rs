//! `ecn-tuner eval`: every policy on every scenario over several seeds, in parallel, compared
//! in Markdown tables (or one JSON document) and, with `--out`, PNG charts.

use crate::compare::{self, Change};
use crate::error::CliError;
use crate::output::{out, outln};
use crate::plot::{self, BucketSeries};
use crate::policy::Policy;
use crate::rollout;
use clap::Args;
use ecn_env::scenario::Scenario;
use ecn_env::summary::{Percentiles, Summary, TailAnatomy};
use ecn_models::staged::StagedFiles;
use serde::Serialize;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tracing::info;

/// The most seeds one `eval` runs per scenario and policy.
const MAX_SEEDS: u64 = 1000;

/// Arguments of `eval`.
#[derive(Args)]
pub struct EvalArgs {
    /// Scenarios to run: built-in names (see `ecn-tuner scenarios`), scenario TOML files or HPCC
    /// config.txt files. Repeat the flag or give several values.
    #[arg(long, value_name = "NAME|FILE", required = true, num_args = 1..)]
    scenario: Vec<String>,
    /// Policies to compare: static:<KMIN>,<KMAX>,<PMAX>, baseline:<name>, model:<default|PATH> or
    /// explore[:SEED[:HOLD[:SHARE[:ANCHOR]]]]. Repeat the flag or give several values.
    #[arg(long, value_name = "POLICY", required = true, num_args = 1..)]
    policy: Vec<String>,
    /// Seeds per scenario and policy: S, S+1, ..., S+N-1 with S = --seed-base.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// First seed.
    #[arg(long, value_name = "S", default_value_t = 101)]
    seed_base: u64,
    /// Write eval.md (the tables), eval.json (the runs) and slowdown_<scenario>.png here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON document on stdout, {"runs": [...]}, instead of the tables.
    #[arg(long)]
    json: bool,
    /// Compare every policy with this one, seed by seed: the change of <100KB p99 and ≥1MB p50
    /// slowdown per scenario and on the mean over scenarios, with 95% intervals. It is added to
    /// the policies if not among them. Repeat it (or give several) for one table per reference.
    #[arg(long, value_name = "POLICY", num_args = 1..)]
    reference: Vec<String>,
    /// Simulations run at once (default: the number of CPUs).
    #[arg(long, value_name = "J", value_parser = clap::value_parser!(u64).range(1..))]
    jobs: Option<u64>,
}

/// The `eval --json` document (PRODUCT.md "JSON outputs"): one `sim --json` summary per
/// scenario × policy × seed, scenario-major, then policy, then seed.
#[derive(Serialize)]
struct Runs<'a> {
    runs: &'a [Summary],
    /// One per `--reference`.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    comparisons: &'a [Comparison],
    /// With `--out`: the charts written beside, so that the next report into the folder can
    /// remove those it does not write again.
    #[serde(skip_serializing_if = "Option::is_none")]
    plots: Option<&'a [String]>,
}

/// Run every combination and report.
pub fn run(args: EvalArgs) -> Result<(), CliError> {
    // Bad input fails here, before any simulation starts.
    let mut policies: Vec<Policy> = args.policy.iter().map(|p| Policy::parse(p)).collect::<Result<_, _>>()?;
    // A repeat would run twice and weigh twice in the mean over scenarios, however spelled
    // (`model:default` and its path; `tiny.toml` and `./tiny.toml`).
    super::refuse_repeats("--policy", &args.policy, &policies)?;
    let identities: Vec<std::path::PathBuf> = args.scenario.iter().map(|a| super::scenario_identity(a)).collect();
    super::refuse_repeats("--scenario", &args.scenario, &identities)?;
    // Indices into `policies`.
    let mut references = Vec::new();
    for text in &args.reference {
        let policy = Policy::parse_flag("--reference", text)?;
        // Matched as `--policy` repeats are, however spelled: by label, `model:default` and its
        // path ran twice and were compared with each other.
        references.push(match policies.iter().position(|p| *p == policy) {
            Some(i) => i,
            None => {
                policies.push(policy);
                policies.len() - 1
            }
        });
    }
    // Two alike would print the same table twice.
    super::refuse_repeats("--reference", &args.reference, &references)?;
    let labels: Vec<String> = policies.iter().map(Policy::to_string).collect();
    // Every scenario is built for every seed before the runs start.
    if args.seeds > MAX_SEEDS {
        return Err(CliError::BadInput(format!("--seeds {}: at most {MAX_SEEDS}", args.seeds)));
    }
    let seeds: Vec<u64> =
        (0..args.seeds).map(|i| args.seed_base.checked_add(i)).collect::<Option<_>>().ok_or_else(|| {
            CliError::BadInput(format!("--seed-base {}: too large for --seeds {}", args.seed_base, args.seeds))
        })?;
    // scenarios[s][k]: scenario argument s with seed k.
    let scenarios: Vec<Vec<Scenario>> = args
        .scenario
        .iter()
        .map(|name| seeds.iter().map(|&seed| Scenario::load(name, Some(seed))).collect::<Result<_, _>>())
        .collect::<Result<_, _>>()?;
    // A closed-loop policy samples at its own interval: a run too long at that interval is
    // refused now, not after the runs before it.
    for interval in policies.iter().filter_map(Policy::control_interval) {
        for scenario in scenarios.iter().flatten() {
            scenario.check_sampled_every(interval)?;
        }
    }
    let names = scenario_labels(&args.scenario, &scenarios);
    // The tables and eval.json mark the mean over scenarios with the name `mean`.
    if let Some(i) = names.iter().position(|n| n == "mean") {
        return Err(CliError::BadInput(format!(
            "--scenario {}: a scenario named `mean` would read as the mean over scenarios; give it another name",
            args.scenario[i]
        )));
    }
    let plots = args.out.as_ref().map(|_| plot_files(&names));
    if let (Some(dir), Some(plots)) = (&args.out, &plots) {
        let files: Vec<&str> = ["eval.md", "eval.json"].into_iter().chain(plots.iter().map(String::as_str)).collect();
        super::prepare_out_dir(dir, files.iter().copied())?;
        let outputs: Vec<_> = files.iter().map(|f| dir.join(f)).collect();
        let models = policies.iter().filter_map(|p| match p {
            Policy::Model(m) => Some(("--policy", m.path.as_path())),
            _ => None,
        });
        let read: Vec<_> = args.scenario.iter().flat_map(|s| super::scenario_files(s)).collect();
        let inputs: Vec<_> = read.iter().map(|f| ("--scenario", f.as_path())).chain(models).collect();
        super::refuse_overwriting_inputs(&outputs, &inputs)?;
    }

    let mut jobs = Vec::new();
    for per_seed in &scenarios {
        for (policy, label) in policies.iter().zip(&labels) {
            for scenario in per_seed {
                jobs.push(rollout::Job { scenario, policy, label });
            }
        }
    }
    let threads = args
        .jobs
        .map(|j| j as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .min(jobs.len());
    info!(
        scenarios = scenarios.len(),
        policies = policies.len(),
        seeds = seeds.len(),
        runs = jobs.len(),
        threads,
        "evaluating"
    );
    let started = Instant::now();
    let mut runs = rollout::simulate_all(&jobs, threads)?;
    info!(runs = runs.len(), wall_seconds = started.elapsed().as_secs_f64(), "done");
    // Each run is named as its table rows are, so that runs and comparisons join even when
    // two files share a name.
    for (run, name) in
        runs.iter_mut().zip(names.iter().flat_map(|n| std::iter::repeat_n(n, labels.len() * seeds.len())))
    {
        run.scenario.clone_from(name);
    }

    let table = Table::new(&names, &labels, seeds.len(), &runs);
    let comparisons: Vec<Comparison> =
        references.iter().map(|&r| Comparison::new(&names, &labels, r, seeds.len(), &runs)).collect();
    let mut markdown = table.markdown(&seeds);
    for c in &comparisons {
        markdown.push_str(&c.markdown());
    }
    let json = serde_json::to_string(&Runs { runs: &runs, comparisons: &comparisons, plots: plots.as_deref() })
        .map_err(|e| CliError::Failed(e.to_string()))?;
    // Results are printed even where the files cannot be written (a full disk): hours of runs
    // are not lost for a chart.
    let written = args.out.as_ref().map_or(Ok(()), |dir| write_outputs(dir, &table, &markdown, &json));
    if args.json {
        outln!("{json}");
    } else {
        out!("{markdown}");
    }
    written
}

/// A row label per scenario argument: the scenario's name, or the argument itself where two
/// arguments resolve to the same name (two files with the same `base`, say).
fn scenario_labels(args: &[String], scenarios: &[Vec<Scenario>]) -> Vec<String> {
    let names: Vec<&str> = scenarios.iter().map(|s| s[0].name.as_str()).collect();
    names
        .iter()
        .zip(args)
        .map(|(name, arg)| if names.iter().filter(|n| *n == name).count() > 1 { arg.clone() } else { name.to_string() })
        .collect()
}

/// Mean of the values present; `None` if there are none.
fn mean(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let (sum, n) = values.into_iter().flatten().fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Mean of one policy's values, each paired with whether any policy has a value there (on that
/// seed, or in that scenario): `None` where this policy lacks one that another has. A mean
/// over the rest would compare it on other seeds or scenarios than the others (a policy that
/// finished no large flow in the hardest scenario read best on large flows); where no policy
/// has a value, the seed or scenario is left out for all alike.
fn mean_where_all_have(values: impl IntoIterator<Item = (Option<f64>, bool)>) -> Option<f64> {
    let values: Vec<_> = values.into_iter().collect();
    if values.iter().any(|&(v, others)| v.is_none() && others) {
        return None;
    }
    mean(values.into_iter().map(|(v, _)| v))
}

/// Per-seed means of one (scenario, policy): the numbers of one table row.
#[derive(Clone)]
struct Row {
    /// <10KB, 10KB–100KB, 100KB–1MB, ≥1MB, then <100KB and all: [p50, p95, p99].
    buckets: [[Option<f64>; 3]; 6],
    /// Completed flows per run in each bucket, in the order of `buckets`: a p99 over 100 flows or
    /// fewer is the bucket's maximum, and the reader should see when it is.
    flows_per_run: [Option<f64>; 6],
    utilization: Option<f64>,
    queue_avg_bytes: Option<f64>,
    pause_frames: Option<f64>,
    drops: Option<f64>,
    completed: usize,
    total: usize,
    /// The runs' <100KB p99 tails pooled, flow-weighted.
    tail: Option<TailAnatomy>,
}

/// A run's size buckets in the order of [`Row::buckets`].
const BUCKETS: [fn(&Summary) -> &Percentiles; 6] = [
    |s| &s.slowdown.lt_10kb,
    |s| &s.slowdown.kb10_kb100,
    |s| &s.slowdown.kb100_mb1,
    |s| &s.slowdown.ge_1mb,
    |s| &s.slowdown.lt_100kb,
    |s| &s.slowdown.all,
];
const SMALL: usize = 4;
const ALL: usize = 5;

impl Row {
    /// The row of `runs` (one per seed); `siblings` are every policy's runs of the same
    /// scenario, seed by seed, this one's included ([`mean_where_all_have`]).
    fn of(runs: &[Summary], siblings: &[&[Summary]]) -> Row {
        let cell = |f: &dyn Fn(&Summary) -> Option<f64>| {
            mean_where_all_have(
                runs.iter()
                    .enumerate()
                    .map(|(k, run)| (f(run), siblings.iter().any(|p| p.get(k).is_some_and(|r| f(r).is_some())))),
            )
        };
        let pick = |bucket: fn(&Summary) -> &Percentiles| {
            [cell(&|s| bucket(s).p50), cell(&|s| bucket(s).p95), cell(&|s| bucket(s).p99)]
        };
        let count = |bucket: fn(&Summary) -> &Percentiles| mean(runs.iter().map(|s| Some(bucket(s).n as f64)));
        Row {
            buckets: BUCKETS.map(pick),
            flows_per_run: BUCKETS.map(count),
            utilization: mean(runs.iter().map(|s| Some(s.utilization))),
            queue_avg_bytes: mean(runs.iter().map(|s| Some(s.queue_bytes.avg))),
            pause_frames: mean(runs.iter().map(|s| Some(s.pfc.pause_frames as f64))),
            drops: mean(runs.iter().map(|s| Some(s.drops as f64))),
            completed: runs.iter().map(|s| s.flows.completed).sum(),
            total: runs.iter().map(|s| s.flows.total).sum(),
            tail: pool_tails(runs.iter().filter_map(|s| s.small_flow_tail.as_ref())),
        }
    }

    /// The mean of one policy's rows over scenarios, `rows[s]` that of scenario s, whose rows
    /// for every policy are `siblings[s]` ([`mean_where_all_have`]); flow counts add up.
    fn mean_of(rows: &[&Row], siblings: &[&[Row]]) -> Row {
        let cell = |f: &dyn Fn(&Row) -> Option<f64>| {
            mean_where_all_have(rows.iter().zip(siblings).map(|(r, sib)| (f(r), sib.iter().any(|x| f(x).is_some()))))
        };
        Row {
            buckets: std::array::from_fn(|b| std::array::from_fn(|p| cell(&|r| r.buckets[b][p]))),
            flows_per_run: std::array::from_fn(|b| cell(&|r| r.flows_per_run[b])),
            utilization: cell(&|r| r.utilization),
            queue_avg_bytes: cell(&|r| r.queue_avg_bytes),
            pause_frames: cell(&|r| r.pause_frames),
            drops: cell(&|r| r.drops),
            completed: rows.iter().map(|r| r.completed).sum(),
            total: rows.iter().map(|r| r.total).sum(),
            tail: pool_tails(rows.iter().filter_map(|r| r.tail.as_ref())),
        }
    }
}

/// Tails pooled as if their flows had been one tail: shares weighted by each tail's total
/// excess time.
fn pool_tails<'a>(tails: impl Iterator<Item = &'a TailAnatomy>) -> Option<TailAnatomy> {
    let (mut flows, mut parts) = (0, [0.0; 3]);
    for t in tails {
        let excess = t.flows as f64 * t.excess_ns;
        flows += t.flows;
        for (part, share) in parts.iter_mut().zip([t.sender, t.forward, t.ack]) {
            *part += excess * share;
        }
    }
    TailAnatomy::from_parts(flows, parts)
}

/// The results arranged by scenario and policy.
struct Table<'a> {
    scenarios: &'a [String],
    policies: &'a [String],
    /// Seeds per (scenario, policy).
    seeds: usize,
    /// `rows[s][p]`: scenario `s`, policy `p`.
    rows: Vec<Vec<Row>>,
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map(|x| format!("{x:.decimals$}")).unwrap_or_else(|| "-".into())
}

/// `runs` in job order (scenario-major, then policy, then `seeds` seeds) as `grid[s][p]`, the
/// runs of scenario s under policy p, one per seed.
fn grid(scenarios: usize, policies: usize, seeds: usize, runs: &[Summary]) -> Vec<Vec<&[Summary]>> {
    let mut chunks = runs.chunks(seeds);
    (0..scenarios).map(|_| (0..policies).map(|_| chunks.next().unwrap_or_default()).collect()).collect()
}

impl<'a> Table<'a> {
    /// `runs` in job order, as [`grid`] reads them.
    fn new(scenarios: &'a [String], policies: &'a [String], seeds: usize, runs: &[Summary]) -> Self {
        let rows = grid(scenarios.len(), policies.len(), seeds, runs)
            .into_iter()
            .map(|per_policy| per_policy.iter().map(|runs| Row::of(runs, &per_policy)).collect())
            .collect();
        Table { scenarios, policies, seeds, rows }
    }

    fn markdown(&self, seeds: &[u64]) -> String {
        let mut out = String::new();
        let seed_text = match seeds {
            [one] => format!("seed {one}"),
            _ => format!("seeds {}–{}", seeds[0], seeds[seeds.len() - 1]),
        };
        let _ = writeln!(out, "# ecn-tuner eval\n");
        let _ = writeln!(
            out,
            "{} scenario(s) × {} policy(ies), {seed_text}. Each cell is the mean over seeds of that run's \
             figure. Slowdown = FCT / ideal FCT; pN = N-th percentile over a run's completed flows. A cell \
             is - where no flow of its size finished; also where another policy has a value on a seed (in \
             the mean row, a scenario) where this one has none.\n",
            self.scenarios.len(),
            self.policies.len()
        );
        let _ = writeln!(out, "## Headline\n");
        let _ = writeln!(
            out,
            "| scenario | policy | <100KB p99 | ≥1MB p50 | all p99 | utilization | avg queue (KB) | pause frames \
             | drops | completed / total, all runs |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let headline = |out: &mut String, scenario: &str, policy: &str, r: &Row| {
            let _ = writeln!(
                out,
                "| {scenario} | {policy} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
                num(r.buckets[SMALL][2], 2),
                num(r.buckets[3][0], 2),
                num(r.buckets[ALL][2], 2),
                r.utilization.map(|u| format!("{:.1}%", u * 100.0)).unwrap_or_else(|| "-".into()),
                num(r.queue_avg_bytes.map(|b| b / 1e3), 1),
                num(r.pause_frames, 1),
                num(r.drops, 1),
                r.completed,
                r.total
            );
        };
        for (s, scenario) in self.scenarios.iter().enumerate() {
            for (p, policy) in self.policies.iter().enumerate() {
                headline(&mut out, scenario, policy, &self.rows[s][p]);
            }
        }
        if self.scenarios.len() > 1 {
            for (p, policy) in self.policies.iter().enumerate() {
                let rows: Vec<&Row> = self.rows.iter().map(|r| &r[p]).collect();
                let siblings: Vec<&[Row]> = self.rows.iter().map(Vec::as_slice).collect();
                headline(&mut out, "**mean over scenarios**", policy, &Row::mean_of(&rows, &siblings));
            }
        }
        let _ = writeln!(out, "\n## Slowdown by flow size (p50 / p95 / p99, and completed flows per run)\n");
        let _ = writeln!(out, "| scenario | policy | <10KB | 10KB–100KB | 100KB–1MB | ≥1MB | <100KB | all |");
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|");
        for (s, scenario) in self.scenarios.iter().enumerate() {
            for (p, policy) in self.policies.iter().enumerate() {
                let row = &self.rows[s][p];
                let cells: Vec<String> = row
                    .buckets
                    .iter()
                    .zip(&row.flows_per_run)
                    .map(|(b, n)| format!("{} ({})", b.map(|v| num(v, 2)).join(" / "), num(*n, 0)))
                    .collect();
                let _ = writeln!(out, "| {scenario} | {policy} | {} |", cells.join(" | "));
            }
        }
        let _ = writeln!(out, "\n## Where the <100KB p99 tail waits\n");
        let _ = writeln!(
            out,
            "The <100KB flows at or above their run's p99, pooled over seeds: their mean time beyond the \
             ideal FCT, and its shares before the last byte left the sender, on the data path, and waiting \
             for the last ACK (README \"Where the tail waits\").\n"
        );
        let _ = writeln!(out, "| scenario | policy | tail flows | over ideal (µs) | sender | forward | ACK |");
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
        let pct = |x: f64| format!("{:.0}%", x * 100.0);
        for (s, scenario) in self.scenarios.iter().enumerate() {
            for (p, policy) in self.policies.iter().enumerate() {
                let Some(t) = &self.rows[s][p].tail else { continue };
                let _ = writeln!(
                    out,
                    "| {scenario} | {policy} | {} | {:.1} | {} | {} | {} |",
                    t.flows,
                    t.excess_ns / 1e3,
                    pct(t.sender),
                    pct(t.forward),
                    pct(t.ack)
                );
            }
        }
        out
    }

    /// One chart per scenario: p50 and p99 by bucket, one line per policy; staged in `files`.
    fn plots(&self, dir: &Path, files: &mut StagedFiles) -> Result<Vec<PathBuf>, CliError> {
        let mut written = Vec::new();
        for ((s, scenario), file) in self.scenarios.iter().enumerate().zip(plot_files(self.scenarios)) {
            let series: Vec<BucketSeries> = self
                .policies
                .iter()
                .zip(&self.rows[s])
                .map(|(policy, row)| BucketSeries {
                    name: policy,
                    p50: std::array::from_fn(|b| row.buckets[b][0]),
                    p99: std::array::from_fn(|b| row.buckets[b][2]),
                })
                .collect();
            let path = dir.join(file);
            let title = format!("{scenario}: FCT slowdown by flow size (mean over {} seed(s))", self.seeds);
            files.write(&path, |staged| plot::slowdown_by_bucket(staged, &title, &series)).map_err(CliError::Failed)?;
            written.push(path);
        }
        Ok(written)
    }
}

/// Every policy against the reference, seed by seed (`--reference`, [`compare`]).
#[derive(Serialize)]
struct Comparison {
    reference: String,
    rows: Vec<ComparisonRow>,
}

/// One policy in one scenario, or (`scenario` = "mean") on the mean over scenarios.
#[derive(Serialize)]
struct ComparisonRow {
    scenario: String,
    policy: String,
    /// Change of the <100KB p99 slowdown.
    small_p99: Option<Change>,
    /// Change of the ≥1MB median slowdown.
    large_p50: Option<Change>,
}

/// `values[s][p][k]`: one metric of scenario s, policy p, seed k.
type PerSeed = Vec<Vec<Vec<Option<f64>>>>;

impl Comparison {
    /// `runs` in job order, as [`grid`] reads them; `reference` indexes `policies`.
    fn new(scenarios: &[String], policies: &[String], reference: usize, seeds: usize, runs: &[Summary]) -> Self {
        let runs = grid(scenarios.len(), policies.len(), seeds, runs);
        let metric = |f: fn(&Summary) -> Option<f64>| -> PerSeed {
            runs.iter().map(|per_policy| per_policy.iter().map(|r| r.iter().map(f).collect()).collect()).collect()
        };
        let metrics = [metric(|s| s.slowdown.lt_100kb.p99), metric(|s| s.slowdown.ge_1mb.p50)];
        let mut rows = Vec::new();
        for (p, policy) in policies.iter().enumerate().filter(|&(p, _)| p != reference) {
            // [small p99, large p50] against the reference, over the scenarios in `of`.
            let change = |of: std::ops::Range<usize>| {
                metrics.each_ref().map(|v| {
                    let pairs: Vec<_> = of.clone().map(|s| (v[s][p].as_slice(), v[s][reference].as_slice())).collect();
                    compare::mean_paired_change(&pairs)
                })
            };
            let mut push = |scenario: &str, [small_p99, large_p50]: [Option<Change>; 2]| {
                rows.push(ComparisonRow { scenario: scenario.into(), policy: policy.clone(), small_p99, large_p50 })
            };
            for (s, scenario) in scenarios.iter().enumerate() {
                push(scenario, change(s..s + 1));
            }
            if scenarios.len() > 1 {
                push("mean", change(0..scenarios.len()));
            }
        }
        Comparison { reference: policies[reference].clone(), rows }
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "\n## Against {}\n", self.reference);
        let _ = writeln!(
            out,
            "Change of each policy's mean against the reference's, with a 95% interval from the \
             seeds paired (every policy runs the same seeds; delta method for a ratio of means). \
             The mean row averages the scenarios' changes with equal weight.\n"
        );
        let _ = writeln!(out, "| scenario | policy | <100KB p99 | ≥1MB p50 |");
        let _ = writeln!(out, "|---|---|---:|---:|");
        for r in &self.rows {
            let scenario = if r.scenario == "mean" { "**mean over scenarios**" } else { &r.scenario };
            let _ = writeln!(
                out,
                "| {scenario} | {} | {} | {} |",
                r.policy,
                compare::format_change(r.small_p99),
                compare::format_change(r.large_p50)
            );
        }
        out
    }
}

/// A scenario label as part of a file name: a path (a label with a `/`) by its file stem, then
/// letters, digits, `.`, `_` and `-` kept, anything else replaced by `_`.
fn file_safe(name: &str) -> String {
    let base = Path::new(name).file_stem().and_then(|s| s.to_str()).filter(|_| name.contains('/')).unwrap_or(name);
    // File names end at 255 bytes; a long scenario name would fail its chart after every run.
    base.chars()
        .take(MAX_LABEL_IN_FILE_NAME)
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .collect()
}

/// The most characters of a scenario's label in its chart's file name.
const MAX_LABEL_IN_FILE_NAME: usize = 100;

/// The slowdown chart's file name per scenario label: `slowdown_<label>.png`, made unique by
/// the scenario's position where two labels clash.
fn plot_files(scenarios: &[String]) -> Vec<String> {
    let mut used = HashSet::new();
    let mut files = Vec::with_capacity(scenarios.len());
    for (s, scenario) in scenarios.iter().enumerate() {
        // Names that read alike once made file-safe (`é`, `ü`) take their position, and more
        // where that too is taken (`__3` beside a third `é`): one chart never overwrites another.
        let mut file = format!("slowdown_{}.png", file_safe(scenario));
        let mut n = s + 1;
        while !used.insert(file.clone()) {
            file = format!("slowdown_{}_{n}.png", file_safe(scenario));
            n += 1;
        }
        files.push(file);
    }
    files
}

/// Write the report files together: a failure part way (a full disk, a chart that cannot be
/// drawn) leaves the folder's previous report whole instead of this run's tables beside the
/// last run's charts.
fn write_outputs(dir: &Path, table: &Table, markdown: &str, json: &str) -> Result<(), CliError> {
    // Until the last report's charts are gone too: interrupted between, they would stay for
    // good (the new eval.json no longer lists them).
    let _held = ecn_datasets::signals::HeldSignals::new();
    super::create_folder(dir, dir)?;
    let previous = previous_plots(dir);
    let mut files = StagedFiles::new();
    let mut write = |name: &str, text: &str| {
        let path = dir.join(name);
        files.write(&path, |staged| std::fs::write(staged, text).map_err(|e| format!("{}: {e}", staged.display())))
    };
    write("eval.md", markdown).map_err(CliError::Failed)?;
    write("eval.json", &format!("{json}\n")).map_err(CliError::Failed)?;
    let plots = table.plots(dir, &mut files)?;
    files.commit().map_err(|e| CliError::Failed(e.to_string()))?;
    info!(dir = %dir.display(), plots = plots.len(), "wrote eval.md, eval.json and slowdown_<scenario>.png");
    // The last report's charts of scenarios this one lacks would stand beside tables that no
    // longer mention them.
    for stale in previous.iter().map(|name| dir.join(name)).filter(|p| !plots.contains(p)) {
        match std::fs::remove_file(&stale) {
            Ok(()) => info!(file = %stale.display(), "removed the previous report's chart"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %stale.display(), error = %e, "cannot remove the previous report's chart"),
        }
    }
    Ok(())
}

/// The charts the report already in `dir` lists in its `eval.json` (`plots`): only names of
/// the form this command writes, so that a hand-edited list removes nothing else.
fn previous_plots(dir: &Path) -> Vec<String> {
    // Only a regular file of sane size: a pipe in its place held eval for ever once its runs
    // were done, deaf to SIGTERM, and a link to /dev/zero ate memory without bound.
    let path = dir.join("eval.json");
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let Ok(text) = ecn_datasets::bounded::read_at_most(&path, 64 << 20) else { return Vec::new() };
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&text) else { return Vec::new() };
    let names = doc["plots"].as_array().into_iter().flatten().filter_map(|v| v.as_str());
    names
        .filter(|n| {
            n.starts_with("slowdown_") && n.ends_with(".png") && !n.contains(['/', '\\']) && !n.starts_with('.')
        })
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_skips_missing_values() {
        assert_eq!(mean([Some(1.0), None, Some(3.0)]), Some(2.0));
        assert_eq!(mean([None, None]), None);
        assert_eq!(mean(std::iter::empty()), None);
    }

    /// A policy without a value where another has one gets none: its mean over the rest would
    /// be over other seeds or scenarios than the others'. Where none has one, all skip it.
    #[test]
    fn a_mean_is_over_the_same_seeds_or_scenarios_for_every_policy() {
        assert_eq!(mean_where_all_have([(Some(1.0), true), (Some(3.0), true)]), Some(2.0));
        assert_eq!(mean_where_all_have([(Some(1.0), true), (None, true)]), None);
        assert_eq!(mean_where_all_have([(Some(1.0), true), (None, false), (Some(3.0), true)]), Some(2.0));
        assert_eq!(mean_where_all_have([(None, false)]), None);
    }

    #[test]
    fn file_names_are_safe() {
        assert_eq!(file_safe("websearch-50"), "websearch-50");
        assert_eq!(file_safe("/tmp/x/my scenario.toml"), "my_scenario");
        assert_eq!(file_safe("a/b:c"), "b_c");
        let long = "x".repeat(300);
        assert_eq!(file_safe(&long).len(), MAX_LABEL_IN_FILE_NAME);
        let files = plot_files(&[format!("{long}1"), format!("{long}2")]);
        assert!(files[0] != files[1] && files.iter().all(|f| f.len() < 120), "{files:?}");
        // `é` reads as `_`, and its fallback name was the one `__3` had already taken.
        let names = ["ü", "__3", "é"].map(String::from);
        assert_eq!(plot_files(&names), ["slowdown__.png", "slowdown___3.png", "slowdown___4.png"]);
    }
}
