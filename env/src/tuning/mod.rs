//! The tuning environment: the simulator as a multi-agent reinforcement-learning problem.
//!
//! Every data egress queue of every switch is an agent, and all agents share one policy, as
//! in ACC (REFERENCE.md §6). The shape is Gymnasium's: [`TuningEnv::reset`] with a seed,
//! [`TuningEnv::step`] with one action per agent, returning observations, rewards,
//! `terminated`, `truncated` and an info record, and declared spaces
//! ([`TuningEnv::observation_space`], [`TuningEnv::action_space`]).
//!
//! - [`observation`]: per-queue features, normalized by line rate and a reference BDP.
//! - [`action`]: discrete templates of (Kmin, Kmax, Pmax), scaled by speed and bounded.
//! - [`reward`]: per-queue, per-interval rewards from telemetry alone.
//! - [`objective`]: the FCT objective that rewards are checked against.
//! - [`scenarios`]: the randomized training distribution.

pub mod action;
pub mod objective;
pub mod observation;
pub mod reward;
pub mod scenarios;

pub use action::{ActionTemplate, Bounds, TemplateKind};
/// The telemetry sample a [`QueueInterval`] wraps, re-exported for building intervals by hand.
pub use ecn_datasets::QueueSample;
pub use objective::FctMetrics;
pub use observation::{FeatureSet, QueueHistory, QueueInterval, OBSERVATION_SCHEMA};
pub use reward::Reward;
pub use scenarios::TrainingMix;

use crate::ecn::EcnSetting;
use crate::fabric::{SimError, Simulator};
use crate::scenario::{Scenario, ScenarioError, ScenarioText};
use crate::units::Nanos;
use ecn_datasets::TelemetrySample;
use serde::{Deserialize, Serialize};

/// Everything that defines the MDP. A model card stores it, so a learned policy always runs
/// with the features, template and interval it was trained with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningConfig {
    /// Which features.
    pub features: FeatureSet,
    /// Intervals of history in each observation (ACC uses 3).
    pub history: usize,
    /// Which action template.
    pub template: TemplateKind,
    /// How intervals are scored.
    pub reward: Reward,
    /// Limits no action may leave.
    pub bounds: Bounds,
    /// Time between decisions.
    pub control_interval: Nanos,
    /// Charges for the time flows crossing each queue spend past their ideal FCT (simulator
    /// training only; zero weights, the default, turn it off).
    #[serde(default)]
    pub flow_wait: FlowWait,
}

/// A training-only addition to the reward: each queue is charged, per interval, the time
/// that the flows crossing it spent past their ideal FCT then, in ideal FCTs
/// ([`crate::fabric::Simulator::flow_wait`]), small and large flows with separate weights.
/// Switch counters cannot give it, so the online controller and offline learning never
/// score with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowWait {
    /// Weight for flows under 100 KB.
    pub small: f64,
    /// Weight for flows of 1 MB and more.
    pub large: f64,
    /// Small flows are charged (slowdown − 1)^p / p over their life, so that the tail weighs
    /// more (1, linear, when absent).
    #[serde(default)]
    pub small_power: Option<f64>,
}

impl FlowWait {
    /// Whether it adds anything.
    pub fn is_on(&self) -> bool {
        self.small > 0.0 || self.large > 0.0
    }

    /// The exponent for small flows.
    pub fn small_power(&self) -> f64 {
        self.small_power.unwrap_or(1.0)
    }

    /// Per data queue of `sim`, the unweighted waits of small and of large flows crossing it
    /// within `[from, to)`: what SMALL and LARGE multiply.
    pub fn waits(&self, sim: &Simulator, from: Nanos, to: Nanos) -> [Vec<f64>; 2] {
        let (mut small, mut large) = (vec![0.0; sim.queues().len()], vec![0.0; sim.queues().len()]);
        sim.flow_wait(from, to, 0..objective::SMALL_FLOW_BYTES, self.small_power(), &mut small);
        sim.flow_wait(from, to, objective::LARGE_FLOW_BYTES..u64::MAX, 1.0, &mut large);
        [small, large]
    }

    /// Weights from `SMALL,LARGE[,POWER]`: each finite and at least 0, the power above 0.
    pub fn parse(spec: &str) -> Result<FlowWait, String> {
        let bad = || format!("'{spec}': give SMALL,LARGE[,POWER], each a finite number at least 0, POWER above 0");
        let w = spec.split(',').map(|x| x.trim().parse::<f64>()).collect::<Result<Vec<_>, _>>().map_err(|_| bad())?;
        if !(2..=3).contains(&w.len()) || !w.iter().all(|x| x.is_finite() && *x >= 0.0) || w.get(2) == Some(&0.0) {
            return Err(bad());
        }
        Ok(FlowWait { small: w[0], large: w[1], small_power: w.get(2).copied() })
    }
}

impl Default for TuningConfig {
    fn default() -> Self {
        TuningConfig {
            features: FeatureSet::Tuner,
            history: 3,
            template: TemplateKind::Tuner,
            reward: Reward::TUNER,
            bounds: Bounds::default(),
            control_interval: Nanos::from_micros(100),
            flow_wait: FlowWait::default(),
        }
    }
}

impl TuningConfig {
    /// ACC as REFERENCE.md §6 describes it: its features, template and linear reward.
    pub fn acc() -> Self {
        TuningConfig {
            features: FeatureSet::Acc,
            template: TemplateKind::Acc,
            reward: Reward::ACC,
            ..TuningConfig::default()
        }
    }

    /// Length of one agent's observation.
    pub fn observation_dim(&self) -> usize {
        self.features.dim(self.history)
    }
}

/// A declared space, as in Gymnasium.
#[derive(Debug, Clone, PartialEq)]
pub enum Space {
    /// Real vectors of this length (features are normalized but not hard-bounded).
    Box {
        /// Vector length.
        dim: usize,
    },
    /// Integers `0..n`.
    Discrete(usize),
}

/// Where episodes come from.
#[derive(Debug, Clone)]
pub enum EpisodeSource {
    /// One scenario (a built-in or a file, read once); the reset seed regenerates its flows.
    Scenario(ScenarioText),
    /// A fresh draw of the training distribution per reset seed.
    Training(TrainingMix),
}

/// Why the environment could not go on.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The scenario could not be loaded.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The simulator refused the scenario or a setting.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// `step` got the wrong number of actions or an index outside the action space.
    #[error("{0}")]
    BadAction(String),
    /// `step` before `reset`, or after the episode ended.
    #[error("the episode is not running: call reset")]
    NotRunning,
    /// `reset` on an environment made for episodes started with `start`.
    #[error("this environment has no episode source to reset from: start it on a scenario")]
    NoSource,
}

/// What `reset` and `step` report beside observations and rewards.
#[derive(Debug, Clone, Default)]
pub struct StepInfo {
    /// Simulated time.
    pub now: Nanos,
    /// Flows completed.
    pub flows_done: usize,
    /// Flows in total.
    pub flows_total: usize,
    /// The setting now in effect on every agent's queue.
    pub settings: Vec<EcnSetting>,
}

/// The result of one `step`: per-agent observations (row-major, `agents × dim`) and
/// rewards, and whether the episode ended.
#[derive(Debug, Clone)]
pub struct Step {
    /// Next observations, `agents × observation_dim` values.
    pub observations: Vec<f32>,
    /// One reward per agent for the interval just simulated.
    pub rewards: Vec<f32>,
    /// The episode reached its natural end: the arrival window is over, every flow has
    /// completed (no more can start), and the reward of the idle intervals that would follow
    /// is 0 ([`Reward::when_idle`]): nothing is left to learn past it.
    pub terminated: bool,
    /// The episode was cut: the time limit passed with flows still running, or the fabric
    /// drained under a reward that pays for idle queues (ACC's).
    pub truncated: bool,
    /// Extra information.
    pub info: StepInfo,
}

/// The simulator wrapped as a multi-agent environment.
pub struct TuningEnv {
    cfg: TuningConfig,
    template: ActionTemplate,
    source: Option<EpisodeSource>,
    /// Stop an episode this long after its arrival window closes (`None`: run every flow to
    /// completion or the scenario's hard stop).
    pub tail: Option<Nanos>,
    /// Keep every telemetry row (for `sim --out`); off by default.
    pub keep_telemetry: bool,
    sim: Option<Simulator>,
    scenario: Option<Scenario>,
    histories: Vec<QueueHistory>,
    telemetry: Vec<TelemetrySample>,
    next_decision: u64,
    initial_action: Option<usize>,
    /// The last step ended the episode (terminated or truncated): no step until a reset.
    ended: bool,
}

impl TuningEnv {
    /// An environment over `source`. No episode runs until [`TuningEnv::reset`].
    pub fn new(cfg: TuningConfig, source: EpisodeSource) -> Self {
        TuningEnv { source: Some(source), ..TuningEnv::unsourced(cfg) }
    }

    /// An environment whose episodes are started on scenarios already loaded
    /// ([`TuningEnv::start`]): [`TuningEnv::reset`] has nothing to draw from.
    pub fn unsourced(cfg: TuningConfig) -> Self {
        let template = ActionTemplate::new(cfg.template);
        TuningEnv {
            cfg,
            template,
            source: None,
            tail: None,
            keep_telemetry: false,
            sim: None,
            scenario: None,
            histories: Vec::new(),
            telemetry: Vec::new(),
            next_decision: 0,
            initial_action: None,
            ended: false,
        }
    }

    /// Draw later episodes from `source`.
    pub fn set_source(&mut self, source: EpisodeSource) {
        self.source = Some(source);
    }

    /// Start every episode from this template action on every queue instead of the
    /// scenario's own setting (training uses varied starts).
    pub fn set_initial_action(&mut self, action: Option<usize>) {
        self.initial_action = action;
    }

    /// The MDP definition.
    pub fn config(&self) -> &TuningConfig {
        &self.cfg
    }

    /// The action template.
    pub fn template(&self) -> &ActionTemplate {
        &self.template
    }

    /// One agent's observation space.
    pub fn observation_space(&self) -> Space {
        Space::Box { dim: self.cfg.observation_dim() }
    }

    /// One agent's action space.
    pub fn action_space(&self) -> Space {
        Space::Discrete(self.template.len())
    }

    /// Agents in the current episode (data queues of every switch).
    pub fn agents(&self) -> usize {
        self.histories.len()
    }

    /// The simulator of the current episode.
    pub fn simulator(&self) -> Option<&Simulator> {
        self.sim.as_ref()
    }

    /// The scenario of the current episode.
    pub fn scenario(&self) -> Option<&Scenario> {
        self.scenario.as_ref()
    }

    /// Telemetry kept so far (with `keep_telemetry`), handed over.
    pub fn take_telemetry(&mut self) -> Vec<TelemetrySample> {
        std::mem::take(&mut self.telemetry)
    }

    /// Start an episode. The seed picks the scenario draw (or regenerates the named
    /// scenario's flows) and the marking randomness. Returns the first observations, after
    /// one interval under the initial setting.
    pub fn reset(&mut self, seed: u64) -> Result<(Vec<f32>, StepInfo), EnvError> {
        let scenario = match &self.source {
            Some(EpisodeSource::Scenario(text)) => text.load(Some(seed))?,
            Some(EpisodeSource::Training(mix)) => mix.sample(seed)?,
            None => return Err(EnvError::NoSource),
        };
        self.start(scenario)
    }

    /// Start an episode on a scenario that is already loaded.
    pub fn start(&mut self, mut scenario: Scenario) -> Result<(Vec<f32>, StepInfo), EnvError> {
        // The episode before ends here, whether or not this one starts: a failed start used to
        // leave it running, and the next `step` went on with it.
        self.sim = None;
        self.scenario = None;
        self.ended = true;
        // Observations are built from samples, so the policy's clock sets the sampling.
        scenario.check_sampled_every(self.cfg.control_interval)?;
        // Said once per process: an `eval` runs the same scenario for every seed.
        static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if scenario.fabric.sample_interval != self.cfg.control_interval
            && !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                scenario = %scenario.source,
                sample_interval = %scenario.fabric.sample_interval,
                "telemetry is sampled every {}, the policy's control interval, not every sample_interval",
                self.cfg.control_interval
            );
        }
        scenario.fabric.sample_interval = self.cfg.control_interval;
        let mut sim = Simulator::new(scenario.fabric.clone(), scenario.flows.clone())?;
        if let Some(a) = self.initial_action {
            for (q, info) in sim.queues().to_vec().iter().enumerate() {
                let s = self.template.setting(a, info.link, &self.cfg.bounds).ok_or_else(|| {
                    EnvError::BadAction(format!("initial action {a} is outside 0..{}", self.template.len()))
                })?;
                sim.set_ecn(q, s)?;
            }
        }
        self.histories = vec![QueueHistory::default(); sim.queues().len()];
        self.telemetry.clear();
        self.next_decision = scenario.fabric.window_start.0;
        self.sim = Some(sim);
        self.scenario = Some(scenario);
        self.ended = false;
        let (obs, _, info) = self.advance()?;
        Ok((obs, info))
    }

    /// Apply one action per agent (indices into the template), simulate one control
    /// interval, and report.
    pub fn step(&mut self, actions: &[usize]) -> Result<Step, EnvError> {
        let sim = self.sim.as_mut().ok_or(EnvError::NotRunning)?;
        if actions.len() != self.histories.len() {
            return Err(EnvError::BadAction(format!("{} actions for {} agents", actions.len(), self.histories.len())));
        }
        if self.ended {
            return Err(EnvError::NotRunning);
        }
        // Every action is checked before any is applied: a refused step changes nothing.
        let settings = actions
            .iter()
            .enumerate()
            .map(|(q, &a)| {
                self.template.setting(a, sim.queues()[q].link, &self.cfg.bounds).ok_or_else(|| {
                    EnvError::BadAction(format!("action {a} for agent {q} is outside 0..{}", self.template.len()))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (q, s) in settings.into_iter().enumerate() {
            sim.set_ecn(q, s)?;
        }
        let (observations, rewards, info) = self.advance()?;
        let sim = self.sim.as_ref().expect("running");
        let cfg = sim.config();
        let window_over = sim.now() >= cfg.window_end;
        // A drained fabric ends the task only where an idle queue earns nothing: ACC's reward
        // pays for an empty queue, and a learner told that its last intervals were worth no
        // more than their own reward (bootstrapping cut) learns a drop of r/(1−γ) there that
        // nothing in the observation explains. There the episode is truncated instead.
        let drained = window_over && sim.all_flows_done();
        let terminated = drained && self.cfg.reward.when_idle() == 0.0;
        let limit = match self.tail {
            Some(t) => Nanos(cfg.window_end.0 + t.0).min(cfg.stop_at),
            None => cfg.stop_at,
        };
        let truncated = !terminated && (drained || sim.now() >= limit);
        self.ended = terminated || truncated;
        Ok(Step { observations, rewards, terminated, truncated, info })
    }

    /// Simulate to the next decision point; build observations and rewards from the
    /// interval's telemetry.
    fn advance(&mut self) -> Result<(Vec<f32>, Vec<f32>, StepInfo), EnvError> {
        let sim = self.sim.as_mut().ok_or(EnvError::NotRunning)?;
        let interval = self.cfg.control_interval.0;
        self.next_decision += interval;
        sim.run_until(Nanos(self.next_decision));
        // A hard stop inside the interval ends the run there: its shorter last interval is
        // closed and scored over its own span. Left open, the step returned rewards of 0 and
        // the previous observation, though its traffic ran.
        let cut_short = sim.now().0 < self.next_decision;
        if cut_short {
            sim.close_partial_interval();
        }
        let rows = sim.take_telemetry();
        let agents = self.histories.len();
        let mut rewards = vec![0f32; agents];
        // One row per queue per interval, in queue order.
        for chunk in rows.chunks(agents) {
            if chunk.len() != agents {
                break;
            }
            for (q, row) in chunk.iter().enumerate() {
                let span = row.sample.span_ns;
                let covers = if cut_short && span > 0 && span < interval { span } else { interval };
                let iv = QueueInterval::from_sample(row, covers);
                rewards[q] = self.cfg.reward.of(&iv, self.histories[q].latest()) as f32;
                self.histories[q].push(iv, self.cfg.history);
            }
        }
        let fw = self.cfg.flow_wait;
        if fw.is_on() {
            let [small, large] = fw.waits(sim, Nanos(self.next_decision - interval), Nanos(self.next_decision));
            for ((r, s), l) in rewards.iter_mut().zip(small).zip(large) {
                *r -= (fw.small * s + fw.large * l) as f32;
            }
        }
        if self.keep_telemetry {
            self.telemetry.extend(rows);
        }
        let dim = self.cfg.observation_dim();
        let mut obs = Vec::with_capacity(agents * dim);
        for h in &self.histories {
            if !h.observe(self.cfg.features, self.cfg.history, &mut obs) {
                obs.extend(std::iter::repeat_n(0.0, dim));
            }
        }
        let (_, done, total) = sim.flow_counts();
        let settings = (0..agents).map(|q| sim.ecn(q)).collect::<Result<Vec<_>, _>>()?;
        Ok((obs, rewards, StepInfo { now: sim.now(), flows_done: done, flows_total: total, settings }))
    }

    /// Hand over the simulator of the current episode, ending it.
    pub fn into_simulator(self) -> Option<Simulator> {
        self.sim
    }

    /// Finish the episode's bookkeeping: close the last partial telemetry interval, so the
    /// simulator's summary counts every byte. Call after the last `step`.
    pub fn finish(&mut self) -> Option<&mut Simulator> {
        let sim = self.sim.as_mut()?;
        sim.run(|_| {});
        if self.keep_telemetry {
            self.telemetry.extend(sim.take_telemetry());
        }
        Some(sim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_env(cfg: TuningConfig) -> TuningEnv {
        let mut env =
            TuningEnv::new(cfg, EpisodeSource::Training(TrainingMix { duration_ms: 2, ..Default::default() }));
        env.tail = Some(Nanos::from_millis(1));
        env
    }

    #[test]
    fn reset_and_step_follow_the_declared_spaces() {
        let mut env = small_env(TuningConfig::default());
        let Space::Box { dim } = env.observation_space() else { panic!() };
        let Space::Discrete(n) = env.action_space() else { panic!() };
        let (obs, info) = env.reset(7).unwrap();
        let agents = env.agents();
        assert!(agents >= 16, "{agents}");
        assert_eq!(obs.len(), agents * dim);
        assert_eq!(info.settings.len(), agents);
        let mut steps = 0;
        loop {
            let actions: Vec<usize> = (0..agents).map(|q| (q + steps) % n).collect();
            let s = env.step(&actions).unwrap();
            steps += 1;
            assert_eq!(s.observations.len(), agents * dim);
            assert_eq!(s.rewards.len(), agents);
            assert!(s.observations.iter().chain(&s.rewards).all(|x| x.is_finite()));
            for (q, &a) in actions.iter().enumerate() {
                let want = env.template().setting(a, env.simulator().unwrap().queues()[q].link, &env.config().bounds);
                assert_eq!(Some(s.info.settings[q]), want, "the action is in effect");
            }
            if s.terminated || s.truncated {
                break;
            }
            assert!(steps < 100, "2 ms + 1 ms tail at 100 µs is 30 steps");
        }
        assert!((25..=32).contains(&steps), "{steps}");
        // An ended episode takes no more steps until a reset.
        assert!(matches!(env.step(&vec![0; agents]), Err(EnvError::NotRunning)));
        env.reset(8).unwrap();
        assert!(env.step(&vec![0; agents]).is_ok());
    }

    /// A drained fabric ends ecn-tuner's task (an idle queue earns 0 for ever after) but not
    /// ACC's, whose reward pays 0.5 an interval for an empty queue: there the episode is
    /// truncated, and the learner bootstraps past its end.
    #[test]
    fn a_drained_fabric_terminates_only_where_idling_earns_nothing() {
        let end = |cfg: TuningConfig| {
            let mut env = small_env(cfg);
            env.tail = None;
            env.reset(7).unwrap();
            loop {
                let s = env.step(&vec![0; env.agents()]).unwrap();
                if s.terminated || s.truncated {
                    let sim = env.simulator().unwrap();
                    return (s.terminated, s.truncated, sim.all_flows_done());
                }
            }
        };
        assert_eq!(end(TuningConfig::default()), (true, false, true));
        assert_eq!(end(TuningConfig::acc()), (false, true, true));
    }

    /// A failed start ends the episode before it: `step` is refused until a start succeeds,
    /// where it went on with the old episode.
    #[test]
    fn a_failed_start_leaves_no_episode_running() {
        let mut env = small_env(TuningConfig::default());
        env.reset(1).unwrap();
        env.step(&vec![0; env.agents()]).unwrap();
        let mut bad = ScenarioText::read("websearch-50").unwrap().load(Some(3)).unwrap();
        bad.flows[0].dst = bad.flows[0].src;
        assert!(env.start(bad).is_err());
        assert!(matches!(env.step(&vec![0; env.agents()]), Err(EnvError::NotRunning)));
        assert!(env.simulator().is_none());
    }

    /// A hard stop inside a control interval: the last step is scored on the traffic of its
    /// shorter interval, where it returned rewards of 0 and the observation before.
    #[test]
    fn the_last_interval_cut_by_the_hard_stop_is_scored() {
        let text = "base = \"hadoop-50\"\nduration = \"1ms\"\ndrain = \"500us\"\n";
        let sc = crate::scenario::Scenario::from_toml(text, "cut.toml", std::path::Path::new("."), None).unwrap();
        let cfg = TuningConfig { control_interval: Nanos::from_micros(400), ..TuningConfig::default() };
        let mut env = TuningEnv::unsourced(cfg);
        let (mut before, _) = env.start(sc).unwrap();
        let last = loop {
            let s = env.step(&vec![7; env.agents()]).unwrap();
            if s.terminated || s.truncated {
                break s;
            }
            before = s.observations.clone();
        };
        assert!(last.truncated && last.info.now == Nanos::from_micros(1500), "{:?}", last.info.now);
        assert_ne!(last.observations, before, "the cut interval is observed");
        assert!(last.rewards.iter().any(|&r| r != 0.0), "and scored");
    }

    #[test]
    fn bad_actions_are_errors() {
        let mut env = small_env(TuningConfig::default());
        assert!(matches!(env.step(&[0]), Err(EnvError::NotRunning)));
        env.reset(1).unwrap();
        assert!(matches!(env.step(&[0]), Err(EnvError::BadAction(_))));
        let too_big = vec![env.template().len(); env.agents()];
        assert!(matches!(env.step(&too_big), Err(EnvError::BadAction(_))));
        // One bad action among good ones: nothing is applied.
        let (_, info) = env.reset(2).unwrap();
        let mut last_bad = vec![0; env.agents()];
        *last_bad.last_mut().unwrap() = env.template().len();
        assert!(matches!(env.step(&last_bad), Err(EnvError::BadAction(_))));
        let sim = env.simulator().unwrap();
        let now: Vec<EcnSetting> = (0..info.settings.len()).map(|q| sim.ecn(q).unwrap()).collect();
        assert_eq!(now, info.settings);
    }

    #[test]
    fn flow_wait_charges_queues_and_changes_nothing_else() {
        let run = |flow_wait| {
            let mut env = small_env(TuningConfig { flow_wait, ..TuningConfig::default() });
            let (first, _) = env.reset(5).unwrap();
            let mut rewards = vec![0.0f64; env.agents()];
            let mut obs = first;
            for i in 0..20 {
                let s = env.step(&vec![i % env.template().len(); env.agents()]).unwrap();
                rewards.iter_mut().zip(&s.rewards).for_each(|(t, &r)| *t += r as f64);
                obs = s.observations;
            }
            (obs, rewards)
        };
        let (obs, plain) = run(FlowWait::default());
        let (obs_charged, charged) = run(FlowWait { small: 1.0, large: 1.0, small_power: Some(2.0) });
        assert_eq!(obs, obs_charged, "a reward term cannot change the episode");
        assert!(plain.iter().zip(&charged).all(|(p, c)| c <= p), "{plain:?} vs {charged:?}");
        assert!(plain.iter().zip(&charged).any(|(p, c)| c < p), "some flow waited somewhere");
    }

    #[test]
    fn flow_wait_weights_parse_or_are_refused() {
        assert_eq!(FlowWait::parse("0.5,1.5").unwrap(), FlowWait { small: 0.5, large: 1.5, small_power: None });
        assert_eq!(FlowWait::parse("0.1, 1, 2").unwrap().small_power(), 2.0);
        for bad in ["", "1", "1,2,3,4", "a,1", "-1,1", "1,inf", "1,1,0"] {
            assert!(FlowWait::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn episodes_are_deterministic_by_seed() {
        let run = |seed| {
            let mut env = small_env(TuningConfig::acc());
            let (mut obs, _) = env.reset(seed).unwrap();
            let mut total = 0.0f64;
            for i in 0..10 {
                let actions = vec![i % env.template().len(); env.agents()];
                let s = env.step(&actions).unwrap();
                total += s.rewards.iter().map(|&r| r as f64).sum::<f64>();
                obs = s.observations;
            }
            (obs, total)
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3).1, run(4).1);
    }
}
