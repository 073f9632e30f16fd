//! The training loop behind `ecn-tuner train`: Double DQN over several parallel simulator
//! instances, periodic greedy evaluation on held-out seeds, the training curve, and the
//! best checkpoint by the FCT objective.

use super::ddqn::{Ddqn, DdqnConfig};
use super::lockstep;
use super::replay::ReplayBuffer;
use crate::error::CliError;
use crate::policy::Policy;
use crate::rollout;
use ecn_datasets::TelemetrySample;
use ecn_env::fabric::EcnPlan;
use ecn_env::scenario::{Scenario, ScenarioText};
use ecn_env::tuning::{ActionTemplate, EpisodeSource, FctMetrics, TuningConfig, TuningEnv};
use ecn_env::{Baseline, BitsPerSec, Nanos, Simulator};
use ecn_models::{greedy, Calibration, Checkpoint, ModelCard, QNetwork, TrainingRecord};
use indicatif::ProgressBar;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Instant;
use tch::Device;
use tracing::info;

/// The static setting that learned policies are measured against during training (the best
/// single REFERENCE.md §5 row on the standard scenarios) and fall back to.
pub const REFERENCE_BASELINE: Baseline = Baseline::HuaweiLatency;

/// Where a learned policy's queues start, until its first decision (at the end of the first
/// control interval, on a history padded with that interval): on the reference baseline, in
/// `sim` and `eval` ([`Policy::plan`]) as in training's periodic evaluations, so that
/// checkpoint selection scores the runs `eval` will make.
pub const LEARNED_START: EcnPlan = EcnPlan::Baseline(REFERENCE_BASELINE);

/// Everything a training run needs.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// Model name for the card.
    pub name: String,
    /// The MDP.
    pub tuning: TuningConfig,
    /// The learner.
    pub ddqn: DdqnConfig,
    /// Where episodes come from, used in turn.
    pub sources: Vec<EpisodeSource>,
    /// Their names, for the card.
    pub source_names: Vec<String>,
    /// The scenario files among them and among the evaluation scenarios, for the card's
    /// `training.data`: path as given, SHA-256 and role (`training` or `evaluation`), so that a
    /// file edited since shows.
    pub scenario_files: Vec<serde_json::Value>,
    /// Seeds networks, exploration and episode draws.
    pub seed: u64,
    /// Environment steps in total (one step = one decision for every queue of one fabric).
    pub steps: u64,
    /// Simulators stepping in parallel.
    pub envs: usize,
    /// Environment steps between evaluations.
    pub eval_every: u64,
    /// Scenarios of the periodic evaluation, each read once.
    pub eval_scenarios: Vec<ScenarioText>,
    /// Their seeds (keep them away from the seeds final results are reported on).
    pub eval_seeds: Vec<u64>,
    /// Training episodes stop this long after their arrival window.
    pub episode_tail: Nanos,
    /// Where the networks live.
    pub device: Device,
}

/// One row of the training curve.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CurvePoint {
    /// Environment steps so far.
    pub env_steps: u64,
    /// Episodes finished.
    pub episodes: u64,
    /// Exploration rate.
    pub epsilon: f64,
    /// Mean Huber loss since the last point.
    pub loss: f64,
    /// Mean reward per queue per interval since the last point.
    pub train_reward: f64,
    /// Greedy evaluation: mean small-flow (<100 KB) p99 slowdown over the evaluation scenarios.
    pub eval_small_p99: f64,
    /// Greedy evaluation: mean ≥1 MB median slowdown.
    pub eval_large_p50: f64,
    /// Greedy evaluation: mean FCT cost against the reference baseline (lower is better).
    pub eval_cost: f64,
    /// Wall-clock seconds since the start.
    pub wall_seconds: f64,
}

/// What training produced.
pub struct Trained {
    /// The best network by evaluation cost, with its card.
    pub checkpoint: Checkpoint,
    /// The training curve.
    pub curve: Vec<CurvePoint>,
    /// The reference baseline's figures on the evaluation runs (p99, p50 and pauses per run),
    /// the yardstick each evaluation's cost was measured against.
    pub reference: Vec<FctMetrics>,
}

fn env_err(e: ecn_env::tuning::EnvError) -> CliError {
    match e {
        ecn_env::tuning::EnvError::Scenario(e) => CliError::BadInput(e.to_string()),
        other => CliError::Failed(other.to_string()),
    }
}

fn torch_err(e: tch::TchError) -> CliError {
    CliError::Failed(format!("libtorch: {e}"))
}

/// The fallback action on a port of this speed: the template entry nearest to the
/// reference baseline.
fn fallback_action(template: &ActionTemplate, link: BitsPerSec) -> usize {
    template.nearest(&REFERENCE_BASELINE.setting(link), link)
}

/// Greedy actions for a batch, with the fallback wherever the network's output is not
/// finite.
pub fn greedy_or_fallback(net: &QNetwork, template: &ActionTemplate, obs: &[f32], links: &[BitsPerSec]) -> Vec<usize> {
    let q = net.q_values(obs);
    q.chunks(net.actions().max(1))
        .zip(links)
        .map(|(q, &link)| greedy(q).unwrap_or_else(|| fallback_action(template, link)))
        .collect()
}

/// Run every scenario to its end in closed loop, in parallel, with `decide` choosing one
/// action per observation row given the row's port speed. Returns the finished simulators,
/// with their telemetry when `keep_telemetry`.
pub fn run_closed_loop(
    tuning: &TuningConfig,
    scenarios: Vec<Scenario>,
    keep_telemetry: bool,
    mut decide: impl FnMut(&[f32], &[BitsPerSec]) -> Vec<usize>,
) -> Result<Vec<(Simulator, Vec<TelemetrySample>)>, CliError> {
    let mut envs: Vec<TuningEnv> = Vec::new();
    let mut first = Vec::new();
    for sc in scenarios {
        let mut env = TuningEnv::unsourced(tuning.clone());
        env.keep_telemetry = keep_telemetry;
        let (obs, _) = env.start(sc).map_err(env_err)?;
        first.push(obs);
        envs.push(env);
    }
    let links: Vec<Vec<BitsPerSec>> = envs
        .iter()
        .map(|e| e.simulator().map(|s| s.queues().iter().map(|q| q.link).collect()).unwrap_or_default())
        .collect();
    lockstep::run_episodes(&mut envs, first, |obs, owner| {
        let mut row_links = Vec::with_capacity(owner.len());
        let mut seen = vec![0usize; links.len()];
        for &i in owner {
            row_links.push(links[i][seen[i]]);
            seen[i] += 1;
        }
        decide(obs, &row_links)
    })
    .map_err(env_err)?;
    let mut out = Vec::new();
    for mut env in envs {
        env.finish();
        let telemetry = env.take_telemetry();
        let sim = env.into_simulator().ok_or_else(|| CliError::Failed("closed loop: no simulator".into()))?;
        out.push((sim, telemetry));
    }
    Ok(out)
}

/// Every (scenario, seed) pair of the periodic evaluation.
fn eval_runs(cfg: &TrainConfig) -> Vec<(ScenarioText, u64)> {
    cfg.eval_scenarios.iter().flat_map(|s| cfg.eval_seeds.iter().map(move |&seed| (s.clone(), seed))).collect()
}

/// The reference baseline's metrics on the evaluation runs.
fn reference_metrics(runs: &[(ScenarioText, u64)]) -> Result<Vec<FctMetrics>, CliError> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .iter()
            .map(|(text, seed)| {
                let seed = *seed;
                scope.spawn(move || -> Result<FctMetrics, CliError> {
                    let sc = text.load(Some(seed))?;
                    let policy = Policy::Baseline(REFERENCE_BASELINE);
                    let outcome = rollout::simulate(&sc, &policy, &policy.to_string(), None)?;
                    Ok(FctMetrics::of(&outcome.sim))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("reference run panicked")).collect()
    })
}

/// The evaluation runs' scenarios, their queues on a learned policy's starting plan.
fn evaluation_scenarios(runs: &[(ScenarioText, u64)]) -> Result<Vec<Scenario>, CliError> {
    runs.iter()
        .map(|(text, seed)| {
            let mut sc = text.load(Some(*seed))?;
            sc.fabric.ecn = LEARNED_START;
            Ok(sc)
        })
        .collect()
}

/// Mean (small p99, large p50, cost) of a greedy evaluation.
fn evaluate(net: &QNetwork, cfg: &TrainConfig, reference: &[FctMetrics]) -> Result<(f64, f64, f64), CliError> {
    let scenarios = evaluation_scenarios(&eval_runs(cfg))?;
    let template = ActionTemplate::new(cfg.tuning.template);
    let runs =
        run_closed_loop(&cfg.tuning, scenarios, false, |obs, links| greedy_or_fallback(net, &template, obs, links))?;
    let n = runs.len().max(1) as f64;
    let (mut small, mut large, mut cost) = (0.0, 0.0, 0.0);
    for ((sim, _), r) in runs.iter().zip(reference) {
        let m = FctMetrics::of(sim);
        small += m.small_p99;
        large += m.large_p50;
        cost += m.cost(r);
    }
    Ok((small / n, large / n, cost / n))
}

/// The calibration of the learner's current network, taken when an evaluation selects it: its
/// TD errors against the targets it was being trained on at that moment (against the final
/// learner's targets they would add how far training moved on since), and the statistics of
/// the observations in the replay buffer then, the data it was trained on.
/// The sample comes from its own random stream, so calibrating never changes the training
/// that follows.
fn calibrate(agent: &Ddqn, replay: &ReplayBuffer, obs_dim: usize, seed: u64) -> Calibration {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(1);
    let held = replay.sample(4096.min(replay.len()), &mut rng);
    Calibration::of(replay.observations(), obs_dim, &agent.td_errors(agent.online(), &held))
}

/// The last few steps of one simulator, not yet in the replay buffer: n-step returns need the
/// n rewards after a decision before it can be stored.
struct PendingSteps {
    n: usize,
    gamma: f64,
    /// (observations, actions, rewards) of every queue, oldest first.
    steps: std::collections::VecDeque<(Vec<f32>, Vec<usize>, Vec<f32>)>,
}

impl PendingSteps {
    fn new(n: usize, gamma: f64) -> Self {
        PendingSteps { n: n.max(1), gamma, steps: Default::default() }
    }

    fn push(&mut self, obs: Vec<f32>, actions: Vec<usize>, rewards: Vec<f32>) {
        self.steps.push_back((obs, actions, rewards));
    }

    /// Store every transition whose return is complete: the oldest once n rewards are in, or
    /// all of them when the episode ended (shorter returns; no bootstrap if it terminated).
    /// `next_obs` is the observation after the newest step.
    fn emit(&mut self, replay: &mut ReplayBuffer, next_obs: &[f32], ended: bool, terminated: bool, dim: usize) {
        while self.steps.len() >= self.n || (ended && !self.steps.is_empty()) {
            let m = self.steps.len().min(self.n);
            let (obs, actions, _) = &self.steps[0];
            for (q, &action) in actions.iter().enumerate() {
                let mut ret = 0.0f64;
                for (k, (_, _, rewards)) in self.steps.iter().take(m).enumerate() {
                    ret += self.gamma.powi(k as i32) * rewards[q] as f64;
                }
                let (o, next) = (&obs[q * dim..(q + 1) * dim], &next_obs[q * dim..(q + 1) * dim]);
                replay.push_n(o, action, ret as f32, next, terminated && ended, m as u8);
            }
            self.steps.pop_front();
            if !ended {
                break;
            }
        }
    }
}

/// Train. The progress bar counts environment steps.
pub fn train(cfg: &TrainConfig, bar: &ProgressBar) -> Result<Trained, CliError> {
    let started = Instant::now();
    // The simulators step on a thread each, and each evaluation run has its own.
    let threads = cfg.envs.max(eval_runs(cfg).len());
    crate::threads::ensure_headroom(threads, "training (--envs, and one per evaluation run)", "; give fewer --envs")?;
    tch::manual_seed(cfg.seed as i64);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let template = ActionTemplate::new(cfg.tuning.template);
    let obs_dim = cfg.tuning.observation_dim();
    let mut agent = Ddqn::new(cfg.ddqn.clone(), cfg.device, obs_dim, template.len()).map_err(torch_err)?;
    let mut best = QNetwork::new(cfg.device, obs_dim, &cfg.ddqn.hidden, template.len());
    // The evaluation whose network `best` holds, and that network's calibration.
    let mut best_point: Option<CurvePoint> = None;
    let mut calibration: Option<Calibration> = None;
    let mut replay = ReplayBuffer::new(obs_dim, cfg.ddqn.replay_capacity);

    // Episode seeds live far from the seeds that evaluation and reports use.
    let mut episode = 0u64;
    let mut link_speeds_bps = BTreeSet::new();
    // Sources take turns episode by episode, so every simulator sees all of them.
    let mut next_episode = |env: &mut TuningEnv, rng: &mut ChaCha8Rng| {
        env.set_source(cfg.sources[(episode % cfg.sources.len() as u64) as usize].clone());
        env.set_initial_action(Some(rng.gen_range(0..template.len())));
        // Wrapping: any --seed is valid, and a huge one must not overflow.
        let seed = cfg.seed.wrapping_mul(100_000).wrapping_add(1_000_000 + episode);
        episode += 1;
        let started = env.reset(seed);
        if let Some(sim) = env.simulator() {
            link_speeds_bps.extend(sim.queues().iter().map(|q| q.link.0));
        }
        started
    };
    let mut envs: Vec<TuningEnv> = (0..cfg.envs.max(1))
        .map(|_| {
            let mut env = TuningEnv::new(cfg.tuning.clone(), cfg.sources[0].clone());
            env.tail = Some(cfg.episode_tail);
            env
        })
        .collect();
    let mut obs = Vec::new();
    for env in envs.iter_mut() {
        obs.push(next_episode(env, &mut rng).map_err(env_err)?.0);
    }
    // A step adds a transition per queue: too few steps to fill the warm-up are refused now,
    // not after the reference runs and every step (`train --steps 200` took 18 s to be told).
    // Known only where every source has been loaded into a simulator.
    if cfg.sources.len() <= envs.len() {
        let most = envs.iter().map(TuningEnv::agents).max().unwrap_or(0) as u64;
        let (steps, transitions) = (cfg.steps, cfg.steps.saturating_mul(most));
        if transitions < cfg.ddqn.warmup as u64 {
            return Err(CliError::BadInput(format!(
                "--steps {steps}: too few to start learning: {steps} steps of at most {most} queues give at most \
                 {transitions} transitions, and learning starts at {}; nothing was written: train for more steps",
                cfg.ddqn.warmup
            )));
        }
    }
    let reference = reference_metrics(&eval_runs(cfg))?;
    let eval_names: Vec<&str> = cfg.eval_scenarios.iter().map(ScenarioText::name).collect();
    info!(scenarios = ?eval_names, seeds = ?cfg.eval_seeds, "reference baseline {} measured", REFERENCE_BASELINE.name());

    let mut pending: Vec<PendingSteps> =
        (0..envs.len()).map(|_| PendingSteps::new(cfg.ddqn.n_step, cfg.ddqn.gamma)).collect();
    let mut curve = Vec::new();
    let (mut loss_sum, mut loss_n, mut reward_sum, mut reward_n) = (0.0, 0u64, 0.0, 0u64);
    let mut episodes_done = 0u64;
    let mut env_steps = 0u64;
    let mut next_eval = cfg.eval_every;
    while env_steps < cfg.steps {
        let epsilon = cfg.ddqn.epsilon(env_steps, cfg.steps);
        let batch: Vec<f32> = obs.concat();
        let actions = agent.act(&batch, epsilon, &mut rng);
        // The last round steps only as many simulators as steps remain: `--steps` is the
        // number taken, whatever `--envs` is.
        let remaining = cfg.steps - env_steps;
        let mut per_env: Vec<Option<Vec<usize>>> = Vec::new();
        let mut offset = 0;
        for (i, env) in envs.iter().enumerate() {
            per_env.push(((i as u64) < remaining).then(|| actions[offset..offset + env.agents()].to_vec()));
            offset += env.agents();
        }
        // Learn while the simulators run: the gradient steps use transitions already held.
        let samples: Vec<_> = if replay.len() >= cfg.ddqn.warmup {
            (0..cfg.ddqn.updates_per_step).map(|_| replay.sample(cfg.ddqn.batch_size, &mut rng)).collect()
        } else {
            Vec::new()
        };
        let (results, losses) = lockstep::step_all(&mut envs, &per_env, || {
            samples.iter().map(|b| agent.update(b)).collect::<Vec<Result<f64, tch::TchError>>>()
        });
        for l in losses {
            loss_sum += l.map_err(torch_err)?;
            loss_n += 1;
        }
        for (i, result) in results.into_iter().enumerate() {
            let Some(result) = result else { continue };
            let step = result.map_err(env_err)?;
            let a = per_env[i].as_ref().expect("acted");
            reward_sum += step.rewards.iter().map(|&r| r as f64).sum::<f64>();
            reward_n += a.len() as u64;
            let ended = step.terminated || step.truncated;
            pending[i].push(std::mem::take(&mut obs[i]), a.clone(), step.rewards.clone());
            pending[i].emit(&mut replay, &step.observations, ended, step.terminated, obs_dim);
            if ended {
                episodes_done += 1;
                obs[i] = next_episode(&mut envs[i], &mut rng).map_err(env_err)?.0;
            } else {
                obs[i] = step.observations;
            }
            env_steps += 1;
        }
        bar.set_position(env_steps);
        if env_steps >= next_eval || env_steps >= cfg.steps {
            next_eval = next_eval.saturating_add(cfg.eval_every);
            let (small, large, cost) = evaluate(agent.online(), cfg, &reference)?;
            let point = CurvePoint {
                env_steps,
                episodes: episodes_done,
                epsilon,
                loss: if loss_n > 0 { loss_sum / loss_n as f64 } else { f64::NAN },
                train_reward: if reward_n > 0 { reward_sum / reward_n as f64 } else { f64::NAN },
                eval_small_p99: small,
                eval_large_p50: large,
                eval_cost: cost,
                wall_seconds: started.elapsed().as_secs_f64(),
            };
            (loss_sum, loss_n, reward_sum, reward_n) = (0.0, 0, 0.0, 0);
            // An evaluation before the first update scores the random initialization, which
            // must not become the model however lucky it was.
            // A non-finite cost never wins.
            if agent.updates() > 0 && cost < best_point.map_or(f64::INFINITY, |b| b.eval_cost) {
                best_point = Some(point);
                best.var_store_mut().copy(agent.online().var_store()).map_err(torch_err)?;
                calibration = Some(calibrate(&agent, &replay, obs_dim, cfg.seed));
            }
            info!(
                steps = env_steps,
                episodes = episodes_done,
                epsilon = format!("{epsilon:.3}"),
                // NaN until the warm-up ends and learning starts: not a divergence.
                loss = if point.loss.is_nan() { "none yet".to_string() } else { format!("{:.4}", point.loss) },
                reward = format!("{:.4}", point.train_reward),
                small_p99 = format!("{small:.2}"),
                large_p50 = format!("{large:.2}"),
                cost = format!("{cost:.2}"),
                "evaluation"
            );
            let best_cost = best_point.map_or(f64::INFINITY, |p| p.eval_cost);
            bar.set_message(format!("eval cost {cost:.2} (best {best_cost:.2}), ε {epsilon:.2}"));
            curve.push(point);
        }
    }
    // A network that never learned is its random initialization: not a model.
    if agent.updates() == 0 {
        return Err(CliError::BadInput(format!(
            "--steps {}: training ended before its first gradient update ({} transitions in the replay buffer, \
             and learning starts at {}); nothing was written: train for more steps",
            cfg.steps,
            replay.len(),
            cfg.ddqn.warmup
        )));
    }
    if best_point.is_none() {
        return Err(CliError::Failed(
            "no evaluation after the first gradient update scored a finite FCT cost; nothing was written".into(),
        ));
    }
    let training = TrainingRecord {
        algorithm: "ddqn".into(),
        scenarios: cfg.source_names.clone(),
        seed: cfg.seed,
        env_steps,
        updates: agent.updates(),
        wall_seconds: started.elapsed().as_secs_f64(),
        hyperparameters: serde_json::json!({
            "ddqn": cfg.ddqn,
            "parallel_envs": cfg.envs,
            "episode_tail_ns": cfg.episode_tail.0,
            "eval_scenarios": eval_names,
            "eval_seeds": cfg.eval_seeds,
            "selection": "the evaluation with the lowest FCT cost",
            // Which evaluations there were to select from (absent in cards before it).
            "eval_every": cfg.eval_every,
            // CPU and CUDA kernels differ in the last bits, and so do CPUs of different kinds
            // unless the arithmetic is pinned: a rerun reproduces the weights exactly only where
            // both records match.
            "device": format!("{:?}", cfg.device),
            "cpu_arithmetic": ecn_models::arithmetic::CpuArithmetic::on(cfg.device),
        }),
        data: cfg.scenario_files.clone(),
        link_speeds_bps: link_speeds_bps.into_iter().collect(),
    };
    let mut card = ModelCard::new(&cfg.name, cfg.tuning.clone(), cfg.ddqn.hidden.clone(), training);
    card.calibration = calibration;
    card.evaluation = serde_json::json!({
        "scenarios": eval_names,
        "seeds": cfg.eval_seeds,
        "reference": REFERENCE_BASELINE.name(),
        "reference_metrics": reference,
        "selected": best_point,
    });
    Ok(Trained { checkpoint: Checkpoint { card, net: best }, curve, reference })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checkpoint selection scores the runs `eval` will make: a learned policy's queues start
    /// on the plan `sim` and `eval` give it, not on the scenario's own (hpcc-alibaba).
    #[test]
    fn evaluations_start_where_eval_starts_a_learned_policy() {
        let read = |name| ScenarioText::read(name).unwrap();
        let runs = [(read("websearch-50"), 9001), (read("mixed"), 9002)];
        for sc in evaluation_scenarios(&runs).unwrap() {
            assert_eq!(sc.fabric.ecn, Policy::Explore(crate::explore::Explore::new(1)).plan(), "{}", sc.name);
            assert_ne!(Scenario::load(&sc.name, Some(9001)).unwrap().fabric.ecn, sc.fabric.ecn, "{}", sc.name);
        }
    }

    /// One queue, observations 0, 1, 2, ... and rewards 1, 2, 4, 8, 16: every stored
    /// transition, as (obs, next_obs, return, steps, terminal), sorted by obs.
    fn stored(n: usize, terminated: bool) -> Vec<(f32, f32, f32, f32, f32)> {
        let mut replay = ReplayBuffer::new(1, 100);
        let mut pending = PendingSteps::new(n, 0.5);
        let rewards = [1.0f32, 2.0, 4.0, 8.0, 16.0];
        for (t, &r) in rewards.iter().enumerate() {
            let ended = t + 1 == rewards.len();
            pending.push(vec![t as f32], vec![0], vec![r]);
            pending.emit(&mut replay, &[t as f32 + 1.0], ended, terminated && ended, 1);
        }
        let b = replay.sample(2000, &mut <rand_chacha::ChaCha8Rng as SeedableRng>::seed_from_u64(1));
        let mut seen: Vec<_> =
            (0..b.actions.len()).map(|i| (b.obs[i], b.next_obs[i], b.rewards[i], b.steps[i], b.terminal[i])).collect();
        seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
        seen.dedup();
        seen
    }

    #[test]
    fn n_step_returns_sum_discounted_rewards_and_shorten_at_the_episode_end() {
        // n = 3, γ = 0.5: 1 + 2/2 + 4/4 = 3 from obs 0 to obs 3, and so on; the last two
        // decisions get 2- and 1-step returns when the episode ends.
        assert_eq!(
            stored(3, true),
            vec![
                (0.0, 3.0, 3.0, 3.0, 0.0),
                (1.0, 4.0, 6.0, 3.0, 0.0),
                (2.0, 5.0, 12.0, 3.0, 1.0),
                (3.0, 5.0, 16.0, 2.0, 1.0),
                (4.0, 5.0, 16.0, 1.0, 1.0),
            ]
        );
        // Truncated, not terminated: the short returns still bootstrap.
        assert!(stored(3, false).iter().all(|t| t.4 == 0.0));
        // n = 1 is one-step Q-learning.
        assert_eq!(
            stored(1, true).iter().map(|t| (t.2, t.3)).collect::<Vec<_>>(),
            vec![(1.0, 1.0), (2.0, 1.0), (4.0, 1.0), (8.0, 1.0), (16.0, 1.0)]
        );
    }
}
