//! `ecn-tuner train`: learn a policy with Double DQN in the simulator, or with discrete CQL
//! from recorded telemetry (`--telemetry`), and write a checkpoint (weights, model card) and
//! its training curve (CSV and PNG).

use crate::error::CliError;
use crate::learn::ddqn::DdqnConfig;
use crate::learn::offline::{self, DataFileRecord, LoggedData, OfflineConfig};
use crate::learn::trainer::{self, TrainConfig};
use crate::learned;
use crate::output::outln;
use crate::plot;
use crate::telemetry_input;
use clap::{Args, ValueEnum};
use ecn_env::fabric::MIN_INTERVAL;
use ecn_env::scenario::ScenarioText;
use ecn_env::tuning::{EpisodeSource, FlowWait, TrainingMix, TuningConfig};
use ecn_env::Nanos;
use ecn_models::card::{NetworkSpec, MAX_HIDDEN_LAYERS, MAX_LAYER_WIDTH};
use ecn_models::staged::StagedFiles;
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// The name that selects the randomized training distribution.
const TRAINING_MIX: &str = "training-mix";

/// What to learn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// ecn-tuner: its features, template and FCT-ranked reward.
    Tuner,
    /// The ACC-style baseline agent: ACC's features, template and linear reward
    /// (REFERENCE.md §6), trained the same way.
    Acc,
}

/// Where the networks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// CUDA if present, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// The first CUDA GPU.
    Cuda,
}

/// Arguments of `train`.
#[derive(Args)]
pub struct TrainArgs {
    /// Scenarios to train on, used in turn: built-in names, TOML files, or `training-mix`
    /// (the default), a fresh randomized scenario per episode (workload, load 0.2–0.8,
    /// incast, regime changes).
    #[arg(long, value_name = "NAME|FILE", num_args = 1.., default_value = TRAINING_MIX)]
    scenario: Vec<String>,
    /// Learn offline from these telemetry files instead of the simulator (discrete CQL);
    /// `--steps` then counts gradient updates.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "scenario")]
    telemetry: Vec<PathBuf>,
    /// Offline only: weight of CQL's conservative term (0 = plain Double DQN on the logs).
    /// Default: 1.
    #[arg(long, value_name = "ALPHA")]
    conservative_alpha: Option<f64>,
    /// Offline only: how to read and check the telemetry files.
    #[command(flatten)]
    read: telemetry_input::ReadArgs,
    /// Where to write the weights (must end in .safetensors); the card goes beside it as
    /// NAME.card.json, the curve as NAME.training.csv and NAME.training.png.
    #[arg(long, value_name = "MODEL")]
    out: PathBuf,
    /// Seed for network initialization, exploration and episode draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Environment steps (decisions for every queue of one fabric) in total; the last round
    /// steps only as many simulators as steps remain. Learning starts once 5 000 transitions
    /// (one per queue per step) are in the replay buffer, about 210 steps on the default
    /// scenarios: a run that ends sooner writes nothing (exit 2).
    #[arg(long, default_value_t = 40_000)]
    steps: u64,
    /// Features, action template and reward.
    #[arg(long, value_enum, default_value_t = Preset::Tuner)]
    preset: Preset,
    /// Simulators stepping in parallel.
    #[arg(long, default_value_t = 2, conflicts_with = "telemetry")]
    envs: usize,
    /// Environment steps between greedy evaluations (default: steps/20).
    #[arg(long, conflicts_with = "telemetry")]
    eval_every: Option<u64>,
    /// Scenarios of the periodic evaluation.
    #[arg(long, value_name = "NAME|FILE", num_args = 1.., conflicts_with = "telemetry", default_values_t = ["websearch-50".to_string(), "hadoop-50".to_string(), "mixed".to_string()])]
    eval_scenario: Vec<String>,
    /// Seeds of the periodic evaluation (keep them apart from the seeds you report on).
    #[arg(long, num_args = 1.., conflicts_with = "telemetry", default_values_t = [9001u64, 9002])]
    eval_seed: Vec<u64>,
    /// Control interval: time between decisions (with --scenario; offline, the telemetry's
    /// sample interval is the control interval, and this flag is refused).
    #[arg(long, value_name = "DUR", default_value = "100us", conflicts_with = "telemetry")]
    interval: String,
    /// Where the networks run.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    /// Pin libtorch's CPU arithmetic (MKL_CBWR=COMPATIBLE, ATEN_CPU_CAPABILITY=default) so that
    /// the same command trains the same weights on any x86-64 CPU, not only on the same kind
    /// of CPU. Needs the networks on the CPU.
    #[arg(long)]
    portable_arithmetic: bool,
    /// Discount per control interval (default: the learner's, 0.8).
    #[arg(long)]
    gamma: Option<f64>,
    /// Adam learning rate (default 5e-4).
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Widths of the Q-network's hidden layers, comma-separated (default 64,64). The card
    /// records them, so loading needs no flag.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',')]
    hidden: Option<Vec<usize>>,
    /// Rewards summed before bootstrapping (n-step returns, online training); 1 is one-step
    /// Double DQN.
    #[arg(long, default_value_t = 1, conflicts_with = "telemetry")]
    n_step: usize,
    /// Reward weights to change, as name=value pairs (`depth=2,depth_max=0.2`); the rest keep
    /// the preset's defaults. The card records the weights used.
    #[arg(long, value_name = "NAME=VALUE,...")]
    reward_weights: Option<String>,
    /// Also charge each queue, per interval, for the time the flows crossing it spent past
    /// their ideal FCT, in ideal FCTs: flows under 100 KB times SMALL, flows of 1 MB and more
    /// times LARGE; with POWER, small flows pay (slowdown − 1)^POWER / POWER over their life.
    /// Only a simulator knows it (README "Flow-wait credit").
    #[arg(long, value_name = "SMALL,LARGE[,POWER]", conflicts_with = "telemetry")]
    flow_wait: Option<String>,
}

/// The largest CQL penalty accepted; far larger ones only overflow the loss (the usual range
/// is 0.1 to 10).
const MAX_CONSERVATIVE_ALPHA: f64 = 100.0;
/// The most `--envs`: each holds a whole fabric and steps it on a thread of its own, so far
/// more than the cores only costs memory.
const MAX_ENVS: usize = 64;

/// The training curve's files beside `MODEL.safetensors`: `MODEL.training.csv` and `.png`.
const CURVE_CSV: &str = "training.csv";
const CURVE_PNG: &str = "training.png";

/// Set up what must be in place before libtorch computes anything: the pinned CPU arithmetic
/// of `--portable-arithmetic`. Runs first thing in `main`, before other threads start.
pub fn before_libtorch(args: &TrainArgs) {
    if args.portable_arithmetic {
        ecn_models::arithmetic::pin_portable();
    }
}

/// Train and write the checkpoint.
pub fn run(args: TrainArgs) -> Result<(), CliError> {
    if args.out.extension().is_none_or(|e| e != "safetensors") {
        return Err(CliError::BadInput(format!("--out {}: a model path must end in .safetensors", args.out.display())));
    }
    // The card and the curve are named from the weights' path as text: a name that is not
    // UTF-8 put them under another name than the weights', and `model:PATH` reads only UTF-8.
    if args.out.to_str().is_none() {
        return Err(CliError::BadInput(format!(
            "--out {}: a model path must be valid UTF-8 (its card goes beside it under the same name)",
            args.out.display()
        )));
    }
    // Training takes minutes; find out now, not after, that the model or a file beside it
    // cannot be written.
    super::prepare_out_file(&args.out)?;
    let outputs = [
        args.out.clone(),
        ecn_models::checkpoint::card_path(&args.out),
        ecn_models::checkpoint::sibling(&args.out, CURVE_CSV),
        ecn_models::checkpoint::sibling(&args.out, CURVE_PNG),
    ];
    super::refuse_directories(outputs[1..].iter().cloned())?;
    let scenarios: Vec<_> = args.scenario.iter().flat_map(|s| super::scenario_files(s)).collect();
    let eval_scenarios: Vec<_> = args.eval_scenario.iter().flat_map(|s| super::scenario_files(s)).collect();
    let inputs: Vec<(&str, &Path)> = (args.telemetry.iter().map(|p| ("--telemetry", p.as_path())))
        .chain(scenarios.iter().map(|s| ("--scenario", s.as_path())))
        .chain(eval_scenarios.iter().map(|s| ("--eval-scenario", s.as_path())))
        .collect();
    super::refuse_overwriting_inputs(&outputs, &inputs)?;
    if args.steps == 0 {
        return Err(CliError::BadInput("--steps 0: must be at least 1".into()));
    }
    if args.envs == 0 {
        return Err(CliError::BadInput("--envs 0: must be at least 1".into()));
    }
    if args.envs > MAX_ENVS {
        return Err(CliError::BadInput(format!(
            "--envs {}: at most {MAX_ENVS} (each is a whole simulator stepping on a thread of its own)",
            args.envs
        )));
    }
    let interval = super::interval(&args.interval)?;
    if !args.telemetry.is_empty() {
        return run_offline(&args);
    }
    args.read.refuse_unless_reading("training on the simulator")?;
    if args.conservative_alpha.is_some() {
        return Err(CliError::BadInput("--conservative-alpha: offline only, it needs --telemetry".into()));
    }
    // A repeat would weigh twice: in the episodes drawn, or in checkpoint selection.
    let identities: Vec<PathBuf> = args.scenario.iter().map(|a| super::scenario_identity(a)).collect();
    super::refuse_repeats("--scenario", &args.scenario, &identities)?;
    let identities: Vec<PathBuf> = args.eval_scenario.iter().map(|a| super::scenario_identity(a)).collect();
    super::refuse_repeats("--eval-scenario", &args.eval_scenario, &identities)?;
    let seeds: Vec<String> = args.eval_seed.iter().map(u64::to_string).collect();
    super::refuse_repeats("--eval-seed", &seeds, &args.eval_seed)?;
    // Sampled at the control interval, not the file's own: refused now rather than when its
    // first episode or evaluation starts, minutes into training.
    let read_checked = |name: &str| -> Result<ScenarioText, CliError> {
        let text = ScenarioText::read(name)?;
        text.load(None)?.check_sampled_every(interval)?;
        Ok(text)
    };
    let mut sources = Vec::new();
    for name in &args.scenario {
        if name == TRAINING_MIX {
            sources.push(EpisodeSource::Training(TrainingMix::default()));
        } else {
            sources.push(EpisodeSource::Scenario(read_checked(name)?));
        }
    }
    let eval_scenarios: Vec<ScenarioText> =
        args.eval_scenario.iter().map(|name| read_checked(name)).collect::<Result<_, _>>()?;
    let device = device(&args)?;
    // One libtorch thread: the other cores run simulators.
    tch::set_num_threads(1);
    let tuning = tuning(&args, interval)?;
    let ddqn = learner(&args)?;
    let name = model_name(&args.out);
    let scenario_files = scenario_files(&sources, &eval_scenarios);
    let cfg = TrainConfig {
        name: name.clone(),
        tuning,
        ddqn,
        sources,
        source_names: args.scenario.clone(),
        scenario_files,
        seed: args.seed,
        steps: args.steps,
        envs: args.envs,
        eval_every: match args.eval_every {
            Some(0) => return Err(CliError::BadInput("--eval-every 0: must be at least 1".into())),
            Some(n) => n,
            None => (args.steps / 20).max(1),
        },
        eval_scenarios,
        eval_seeds: args.eval_seed.clone(),
        episode_tail: Nanos::from_millis(2),
        device,
    };
    info!(preset = ?args.preset, steps = args.steps, envs = args.envs, device = ?device, out = %args.out.display(), "training");
    let bar = progress_bar(args.steps, "steps");
    let shown = crate::output::showing(&bar);
    let trained = trainer::train(&cfg, &bar)?;
    drop(shown);
    bar.finish_and_clear();

    // Weights, card, curve and plot replace the previous model's together or not at all.
    let csv = ecn_models::checkpoint::sibling(&args.out, CURVE_CSV);
    let png = ecn_models::checkpoint::sibling(&args.out, CURVE_PNG);
    let pts = |f: fn(&trainer::CurvePoint) -> f64| trained.curve.iter().map(|p| (p.env_steps as f64, f(p))).collect();
    // The reference's cost is its own small-flow p99 (nothing to penalise against itself).
    let reference_cost =
        trained.reference.iter().map(|m| m.small_p99).sum::<f64>() / trained.reference.len().max(1) as f64;
    let reference_line = trained.curve.iter().map(|p| (p.env_steps as f64, reference_cost)).collect();
    super::make_folder_of(&args.out)?;
    save_together(|staged| {
        trained.checkpoint.save_staged(&args.out, staged).map_err(|e| CliError::Failed(e.to_string()))?;
        staged.write(&csv, |p| write_curve_csv(p, &trained.curve)).map_err(CliError::Failed)?;
        staged
            .write(&png, |p| {
                plot::training_curve(
                    p,
                    &format!("{name}: greedy evaluation every {} steps", cfg.eval_every),
                    "environment steps",
                    &[
                        ("eval small-flow p99 slowdown", pts(|p| p.eval_small_p99)),
                        ("eval ≥1MB p50 slowdown", pts(|p| p.eval_large_p50)),
                        ("eval FCT cost", pts(|p| p.eval_cost)),
                        ("train reward ×10", pts(|p| p.train_reward * 10.0)),
                        (&format!("{} cost (reference)", trainer::REFERENCE_BASELINE.name()), reference_line),
                    ],
                )
            })
            .map_err(CliError::Failed)
    })?;
    let sel = &trained.checkpoint.card.evaluation["selected"];
    print_written(&args.out, &csv, &png);
    outln!(
        "selected: step {} eval small-flow p99 {:.2}, ≥1MB p50 {:.2}, cost {:.2} (reference {}: cost {:.2})",
        sel["env_steps"],
        sel["eval_small_p99"].as_f64().unwrap_or(f64::NAN),
        sel["eval_large_p50"].as_f64().unwrap_or(f64::NAN),
        sel["eval_cost"].as_f64().unwrap_or(f64::NAN),
        trainer::REFERENCE_BASELINE.name(),
        reference_cost,
    );
    Ok(())
}

/// The scenario files `train` reads (not built-in names, nor the training mix), with their
/// SHA-256: a card names a file by the path as typed, relative to where `train` ran, and the
/// digest tells whether the file has changed since. The files a scenario refers to (CDFs,
/// flow files, topologies) follow it, with `read_by` naming it.
fn scenario_files(sources: &[EpisodeSource], eval_scenarios: &[ScenarioText]) -> Vec<serde_json::Value> {
    let training = sources.iter().filter_map(|s| match s {
        EpisodeSource::Scenario(text) => Some(("training", text)),
        EpisodeSource::Training(_) => None,
    });
    let evaluation = eval_scenarios.iter().map(|text| ("evaluation", text));
    // The digests of the texts read, which every episode and evaluation loads: not of the
    // files read again, which may have changed since.
    let sha256 = |text: &str| ecn_datasets::digest::sha256_bytes(text.as_bytes());
    training
        .chain(evaluation)
        .flat_map(|(role, text)| {
            let own =
                text.file_text().map(|t| serde_json::json!({"path": text.name(), "sha256": sha256(t), "role": role}));
            let referenced = text.referenced_files().into_iter().map(move |(path, t)| {
                let path = path.display().to_string();
                serde_json::json!({"path": path, "sha256": sha256(&t), "role": role, "read_by": text.name()})
            });
            own.into_iter().chain(referenced)
        })
        .collect()
}

/// `train --telemetry`: discrete CQL on logged transitions.
fn run_offline(args: &TrainArgs) -> Result<(), CliError> {
    let conservative_alpha = args.conservative_alpha.unwrap_or(1.0);
    if !(0.0..=MAX_CONSERVATIVE_ALPHA).contains(&conservative_alpha) {
        return Err(CliError::BadInput(format!(
            "--conservative-alpha {conservative_alpha}: must be within 0..={MAX_CONSERVATIVE_ALPHA}"
        )));
    }
    let device = device(args)?;
    let bounds = tuning(args, Nanos(1))?.bounds;
    let opts = args.read.options(Some(&bounds))?;
    // A file given twice, however spelled (or by overlapping globs), would weigh twice.
    let spelled: Vec<String> = args.telemetry.iter().map(|p| p.display().to_string()).collect();
    let identities: Vec<PathBuf> = args.telemetry.iter().map(|p| super::file_identity(p)).collect();
    super::refuse_repeats("--telemetry", &spelled, &identities)?;
    let mut files = Vec::new();
    for path in &args.telemetry {
        let data = telemetry_input::load(path, &opts)?;
        let interval = telemetry_input::interval_ns(&data)?;
        // Each sample's rates are over the time it covers, but what one interval of queue, marks
        // and pauses says depends on how long it is: a model decides at one interval, within a
        // poller's jitter (`same_interval`), and learns from data at it.
        let other = |i: &u64| !learned::same_interval(*i, interval);
        if let Some((q, i)) = data.queues.iter().find_map(|q| Some((q, q.interval_ns.filter(other)?))) {
            return Err(CliError::BadInput(format!(
                "{}: queue {} samples every {i} ns, its queues' median every {interval} ns; offline training needs \
                 one interval (split the file, or record it again)",
                path.display(),
                q.key
            )));
        }
        info!(file = %path.display(), rows = data.rows, queues = data.queues.len(), repaired = %data.report, "telemetry read");
        files.push((path, data, interval));
    }
    // The model decides once per sample, so its control interval is the data's.
    let interval_ns = files[0].2;
    if Nanos(interval_ns) < MIN_INTERVAL {
        return Err(CliError::BadInput(format!(
            "{}: sample interval {interval_ns} ns is below the shortest control interval, {MIN_INTERVAL}",
            files[0].0.display()
        )));
    }
    if let Some((p, _, i)) = files.iter().find(|(_, _, i)| !learned::same_interval(*i, interval_ns)) {
        return Err(CliError::BadInput(format!(
            "{}: sample interval {i} ns, but {} has {interval_ns} ns; train on files of one interval",
            p.display(),
            files[0].0.display()
        )));
    }
    let tuning = tuning(args, Nanos(interval_ns))?;
    let mut ddqn = learner(args)?;
    ddqn.conservative_alpha = conservative_alpha;
    let capacity: usize = files.iter().map(|(_, f, _)| f.samples()).sum();
    let mut data = LoggedData::new(&tuning, capacity.max(1));
    for (path, file, _) in &files {
        let off_interval = data.off_interval;
        let transitions = offline::add_transitions(&file.queues, &tuning, &mut data)
            .map_err(|e| CliError::BadInput(format!("{}: {e}", path.display())))?;
        let off_interval = data.off_interval - off_interval;
        if off_interval * 2 > transitions {
            return Err(CliError::BadInput(format!(
                "{}: {off_interval} of {} transitions cover intervals outside 0.8–1.25 × the data's sample interval \
                 ({interval_ns} ns, the median of its queues' first steps); did the poll interval change within \
                 the file? Split it where it changes and train on one interval",
                path.display(),
                transitions
            )));
        }
        if off_interval * 10 > transitions {
            warn!(
                file = %path.display(),
                transitions = off_interval,
                "more than a tenth of the transitions cover intervals outside 0.8–1.25 × the sample interval \
                 ({interval_ns} ns): the model learns from them as if they were at it"
            );
        }
        data.files.push(DataFileRecord {
            path: path.display().to_string(),
            sha256: telemetry_input::sha256(path)?,
            rows: file.rows,
            queues: file.queues.len() as u64,
            transitions,
        });
    }
    if data.off_template > 0 {
        info!(
            transitions = data.off_template,
            "logged settings off the action template were mapped to the nearest template entry"
        );
    }
    let cfg = OfflineConfig { name: model_name(&args.out), tuning, ddqn, seed: args.seed, updates: args.steps, device };
    info!(transitions = data.replay.len(), updates = cfg.updates, device = ?device, "offline training (CQL)");
    let bar = progress_bar(cfg.updates, "updates");
    let shown = crate::output::showing(&bar);
    let trained = offline::train(&cfg, &data, &bar)?;
    drop(shown);
    bar.finish_and_clear();
    let csv = ecn_models::checkpoint::sibling(&args.out, CURVE_CSV);
    let png = ecn_models::checkpoint::sibling(&args.out, CURVE_PNG);
    let mut s = String::from("updates,loss,td_error_rms,agrees_with_logged,wall_seconds\n");
    for p in &trained.curve {
        s.push_str(&format!(
            "{},{:.6},{:.6},{:.4},{:.1}\n",
            p.updates, p.loss, p.td_error_rms, p.agrees_with_logged, p.wall_seconds
        ));
    }
    let pts = |f: fn(&offline::OfflinePoint) -> f64| trained.curve.iter().map(|p| (p.updates as f64, f(p))).collect();
    super::make_folder_of(&args.out)?;
    save_together(|staged| {
        trained.checkpoint.save_staged(&args.out, staged).map_err(|e| CliError::Failed(e.to_string()))?;
        staged
            .write(&csv, |p| std::fs::write(p, s))
            .map_err(|e| CliError::Failed(format!("{}: {e}", csv.display())))?;
        staged
            .write(&png, |p| {
                plot::training_curve(
                    p,
                    &format!("{}: offline CQL on {} transitions", cfg.name, data.replay.len()),
                    "gradient updates",
                    &[
                        ("loss", pts(|p| p.loss)),
                        ("RMS TD error", pts(|p| p.td_error_rms)),
                        ("greedy = logged action", pts(|p| p.agrees_with_logged)),
                    ],
                )
            })
            .map_err(CliError::Failed)
    })?;
    print_written(&args.out, &csv, &png);
    let last = trained.curve.last().expect("at least one point");
    outln!(
        "trained on {} transitions from {} file(s): final loss {:.4}, RMS TD error {:.4}, greedy = logged {:.0}%",
        data.replay.len(),
        data.files.len(),
        last.loss,
        last.td_error_rms,
        last.agrees_with_logged * 100.0
    );
    Ok(())
}

fn print_written(out: &Path, csv: &Path, png: &Path) {
    outln!(
        "wrote {} (+ {}), {}, {}",
        out.display(),
        ecn_models::checkpoint::card_path(out).display(),
        csv.display(),
        png.display()
    );
}

fn model_name(out: &Path) -> String {
    out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into())
}

fn progress_bar(len: u64, unit: &str) -> ProgressBar {
    // `wide_msg` cuts the message to the terminal's width: a bar that wraps onto a second line
    // is redrawn over the line above it.
    let template = format!("{{spinner}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{elapsed}}, eta {{eta}}) {{wide_msg}}");
    crate::output::progress_bar(len, &template)
}

fn device(args: &TrainArgs) -> Result<tch::Device, CliError> {
    let device = match args.device {
        DeviceArg::Auto => ecn_models::default_device(),
        DeviceArg::Cpu => tch::Device::Cpu,
        DeviceArg::Cuda if ecn_models::cuda::available() => tch::Device::Cuda(0),
        DeviceArg::Cuda => return Err(CliError::BadInput("--device cuda: libtorch sees no CUDA device".into())),
    };
    if args.portable_arithmetic && device != tch::Device::Cpu {
        return Err(CliError::BadInput(format!(
            "--portable-arithmetic pins the CPU's arithmetic, but the networks would run on {device:?}: add --device cpu"
        )));
    }
    Ok(device)
}

/// The MDP of the preset at this control interval, with the reward weights of the flags.
fn tuning(args: &TrainArgs, interval: Nanos) -> Result<TuningConfig, CliError> {
    let mut tuning = match args.preset {
        Preset::Tuner => TuningConfig { control_interval: interval, ..TuningConfig::default() },
        Preset::Acc => TuningConfig { control_interval: interval, ..TuningConfig::acc() },
    };
    if let Some(spec) = &args.reward_weights {
        tuning.reward =
            tuning.reward.with_weights(spec).map_err(|e| CliError::BadInput(format!("--reward-weights {e}")))?;
    }
    if let Some(spec) = &args.flow_wait {
        tuning.flow_wait = FlowWait::parse(spec).map_err(|e| CliError::BadInput(format!("--flow-wait {e}")))?;
    }
    Ok(tuning)
}

/// The learner's settings from the flags.
fn learner(args: &TrainArgs) -> Result<DdqnConfig, CliError> {
    let mut ddqn = DdqnConfig::default();
    if let Some(g) = args.gamma {
        if !(0.0..1.0).contains(&g) {
            return Err(CliError::BadInput(format!("--gamma {g}: must be in [0, 1)")));
        }
        ddqn.gamma = g;
    }
    if !(1..=32).contains(&args.n_step) {
        return Err(CliError::BadInput(format!("--n-step {}: must be 1 to 32", args.n_step)));
    }
    ddqn.n_step = args.n_step;
    if let Some(hidden) = &args.hidden {
        if !NetworkSpec::usable_hidden(hidden) {
            return Err(CliError::BadInput(format!(
                "--hidden {hidden:?}: 1 to {MAX_HIDDEN_LAYERS} layers, each 1 to {MAX_LAYER_WIDTH} wide"
            )));
        }
        ddqn.hidden = hidden.clone();
    }
    if let Some(lr) = args.learning_rate {
        if !(lr > 0.0 && lr < 1.0) {
            return Err(CliError::BadInput(format!("--learning-rate {lr}: must be in (0, 1)")));
        }
        ddqn.learning_rate = lr;
    }
    Ok(ddqn)
}

fn write_curve_csv(path: &Path, curve: &[trainer::CurvePoint]) -> Result<(), CliError> {
    let mut s = String::from(
        "env_steps,episodes,epsilon,loss,train_reward,eval_small_p99,eval_large_p50,eval_cost,wall_seconds\n",
    );
    for p in curve {
        s.push_str(&format!(
            "{},{},{:.4},{:.6},{:.6},{:.4},{:.4},{:.4},{:.1}\n",
            p.env_steps,
            p.episodes,
            p.epsilon,
            p.loss,
            p.train_reward,
            p.eval_small_p99,
            p.eval_large_p50,
            p.eval_cost,
            p.wall_seconds
        ));
    }
    std::fs::write(path, s).map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))
}

/// Write a trained model's files with `write` as one set ([`StagedFiles`]), then put them in
/// place together. Where one cannot be written (a full disk, a chart), the files written so
/// far stay under their temporary names and the error says where: a model that took an hour
/// to train is not lost to its chart.
fn save_together(write: impl FnOnce(&mut StagedFiles) -> Result<(), CliError>) -> Result<(), CliError> {
    let mut staged = StagedFiles::new();
    if let Err(e) = write(&mut staged) {
        let kept: Vec<String> = staged
            .keep_written()
            .iter()
            .map(|(destination, at)| format!("{} (for {})", at.display(), destination.display()))
            .collect();
        return Err(match kept.is_empty() {
            true => e,
            false => CliError::Failed(format!(
                "{e}; nothing was put in place, and what was written is kept: {}",
                kept.join(", ")
            )),
        });
    }
    staged.commit().map_err(|e| CliError::Failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A card lists the files a scenario referred to after the scenario itself, by their path
    /// and the digest of the text training read, naming the scenario that read them.
    #[test]
    fn a_card_lists_the_files_a_scenario_refers_to() {
        let dir = tempfile::tempdir().unwrap();
        let cdf = "1 0\n1000 50\n10000 100\n";
        std::fs::write(dir.path().join("mine.cdf"), cdf).unwrap();
        let scenario = dir.path().join("s.toml");
        let toml = "duration = \"1ms\"\n[[workload]]\nkind = \"poisson\"\ncdf = \"mine.cdf\"\nload = 0.5\n";
        std::fs::write(&scenario, toml).unwrap();
        let text = ScenarioText::read(scenario.to_str().unwrap()).unwrap();
        text.load(None).unwrap();
        std::fs::write(dir.path().join("mine.cdf"), "edited later").unwrap();
        let sha256 = |t: &str| ecn_datasets::digest::sha256_bytes(t.as_bytes());
        let name = scenario.display().to_string();
        let cdf_path = dir.path().join("mine.cdf").display().to_string();
        let listed = scenario_files(&[EpisodeSource::Scenario(text.clone())], &[text]);
        let expected = serde_json::json!([
            {"path": name, "sha256": sha256(toml), "role": "training"},
            {"path": cdf_path, "sha256": sha256(cdf), "role": "training", "read_by": name},
            {"path": name, "sha256": sha256(toml), "role": "evaluation"},
            {"path": cdf_path, "sha256": sha256(cdf), "role": "evaluation", "read_by": name},
        ]);
        assert_eq!(serde_json::Value::Array(listed), expected);
    }
}
