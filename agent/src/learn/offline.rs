//! Offline learning from recorded telemetry (`ecn-tuner train --telemetry`).
//!
//! Logged data turns into the same transitions the simulator gives online learning:
//! - the observation is built from a queue's last intervals exactly as online
//!   ([`QueueHistory`]), so a model trained here reads live telemetry the same way;
//! - the action is the logged setting of the next interval, mapped to the nearest entry of
//!   the action template at the port's speed;
//! - the reward is computed from that next interval with the same
//!   [`Reward`](ecn_env::tuning::Reward) definition as online (`TuningConfig::reward`).
//!
//! A queue's history never spans a continuity break (a gap, a dropped sample): the series
//! restarts after it, as the online environment does at the start of an episode.
//!
//! The learner is discrete CQL ([`super::ddqn`] with `conservative_alpha > 0`). Logged data
//! covers only some actions in each situation; plain Q-learning then trusts the Q-values of
//! actions nobody tried, and picks them exactly because their errors are optimistic. CQL keeps
//! the values of unseen actions low, so the policy improves on the behaviour where the data
//! shows how, and stays near it elsewhere. BCQ gets the same effect with a behaviour-cloning
//! filter, but needs a second network and a threshold that is harder to choose than one α.
//! The final network is kept: there is no simulator in the loop to select checkpoints with,
//! which is the point of offline learning.

use super::ddqn::{Ddqn, DdqnConfig};
use super::replay::ReplayBuffer;
use crate::error::CliError;
use crate::learned::same_interval;
use crate::telemetry_input::intervals;
use ecn_datasets::telemetry::QueueSeries;
use ecn_env::tuning::{ActionTemplate, QueueHistory, TuningConfig};
use ecn_env::{BitsPerSec, EcnSetting};
use ecn_models::{Calibration, Checkpoint, ModelCard, QNetwork, TrainingRecord};
use indicatif::ProgressBar;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Instant;
use tch::Device;
use tracing::info;

/// What one data file contributed, for the model card.
#[derive(Debug, Clone, Serialize)]
pub struct DataFileRecord {
    /// The file as given.
    pub path: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
    /// Rows read.
    pub rows: u64,
    /// Queues in it.
    pub queues: u64,
    /// Transitions made from it.
    pub transitions: u64,
}

/// Logged transitions ready to learn from.
pub struct LoggedData {
    /// Every transition.
    pub replay: ReplayBuffer,
    /// Per-file provenance.
    pub files: Vec<DataFileRecord>,
    /// How many transitions took each template action (the behaviour's coverage).
    pub action_counts: Vec<u64>,
    /// Transitions whose logged setting was not a template entry (mapped to the nearest).
    pub off_template: u64,
    /// Transitions with an interval (observed or rewarded) not at the control interval within a
    /// poller's jitter ([`crate::learned::same_interval`]): a recording's short last interval,
    /// a stalled poll, or a poll interval that changed within the file.
    pub off_interval: u64,
    /// Line rates of the queues the transitions come from.
    pub link_speeds_bps: BTreeSet<u64>,
}

/// The `algorithm` of an offline-trained model's card (discrete CQL).
pub const ALGORITHM: &str = "cql";

/// Turn per-queue series into transitions (see the module docs), appending to `data`.
/// Returns the number of transitions added, or, for a sample whose reward or features are not
/// finite (a depth of 1e300 B passes the schema's checks), the queue and time of the first.
pub fn add_transitions(series: &[QueueSeries], tuning: &TuningConfig, data: &mut LoggedData) -> Result<u64, String> {
    let template = ActionTemplate::new(tuning.template);
    let interval = tuning.control_interval.0;
    let dim = tuning.observation_dim();
    let (mut obs, mut next_obs) = (Vec::with_capacity(dim), Vec::with_capacity(dim));
    let mut added = 0;
    for s in series {
        for seg in s.segments() {
            let mut history = QueueHistory::default();
            // Consecutive intervals, up to this one, at the control interval.
            let mut at_interval = 0;
            for (row, iv) in seg.iter().zip(intervals(seg, s.interval_ns.unwrap_or(interval))) {
                at_interval = if same_interval(iv.interval_ns, interval) { at_interval + 1 } else { 0 };
                obs.clear();
                // The intervals this transition observes (fewer than the model's history at the
                // start of a segment, the rest padded) and the one it is rewarded on.
                let spans = history.intervals().take(tuning.history).count() + 1;
                if history.observe(tuning.features, tuning.history, &mut obs) {
                    // Counted, for `train` to refuse a file mostly off its interval (a model
                    // decides only at its own, `LearnedModel::untrained`). Only intervals there
                    // are count: a segment's first transitions, padded, used to count as off,
                    // and a regular file cut into short segments by gaps was refused.
                    if at_interval < spans {
                        data.off_interval += 1;
                    }
                    let link = BitsPerSec(row.link_bps);
                    let logged = iv.setting();
                    let action = template.nearest(&logged, link);
                    if !template.setting(action, link, &tuning.bounds).is_some_and(|t| same_setting(t, logged)) {
                        data.off_template += 1;
                    }
                    let reward = tuning.reward.of(&iv, history.latest()) as f32;
                    history.push(iv, tuning.history);
                    next_obs.clear();
                    history.observe(tuning.features, tuning.history, &mut next_obs);
                    // One such transition would make every Q-value, and the loss, infinite.
                    if !(reward.is_finite() && obs.iter().chain(&next_obs).all(|v| v.is_finite())) {
                        return Err(format!(
                            "queue {} at ts_ns {}: its reward or features are not finite (reward {reward}); \
                             a depth or counter is beyond any physical range",
                            s.key, row.ts_ns
                        ));
                    }
                    // Continuing task: a stretch ends by truncation, never by termination.
                    data.replay.push(&obs, action, reward, &next_obs, false);
                    data.action_counts[action] += 1;
                    data.link_speeds_bps.insert(row.link_bps);
                    added += 1;
                } else {
                    history.push(iv, tuning.history);
                }
            }
        }
    }
    Ok(added)
}

impl LoggedData {
    /// An empty set for `tuning`, holding up to `capacity` transitions.
    pub fn new(tuning: &TuningConfig, capacity: usize) -> Self {
        LoggedData {
            replay: ReplayBuffer::new(tuning.observation_dim(), capacity),
            files: Vec::new(),
            action_counts: vec![0; ActionTemplate::new(tuning.template).len()],
            off_template: 0,
            off_interval: 0,
            link_speeds_bps: BTreeSet::new(),
        }
    }
}

/// Everything an offline run needs.
#[derive(Debug, Clone)]
pub struct OfflineConfig {
    /// Model name for the card.
    pub name: String,
    /// The MDP (its control interval is the data's sample interval).
    pub tuning: TuningConfig,
    /// The learner; `conservative_alpha` should be positive.
    pub ddqn: DdqnConfig,
    /// Seeds the network and the batch draws.
    pub seed: u64,
    /// Gradient updates in total.
    pub updates: u64,
    /// Where the networks live.
    pub device: Device,
}

/// One row of the offline training curve.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OfflinePoint {
    /// Gradient updates so far.
    pub updates: u64,
    /// Mean loss since the last point.
    pub loss: f64,
    /// RMS TD error on a held batch.
    pub td_error_rms: f64,
    /// Fraction of a held batch where the greedy action is the logged one.
    pub agrees_with_logged: f64,
    /// Wall-clock seconds since the start.
    pub wall_seconds: f64,
}

/// What offline training produced.
pub struct OfflineTrained {
    /// The final network with its card (data provenance and calibration included).
    pub checkpoint: Checkpoint,
    /// The curve.
    pub curve: Vec<OfflinePoint>,
}

/// Learn from `data`. The progress bar counts gradient updates.
pub fn train(cfg: &OfflineConfig, data: &LoggedData, bar: &ProgressBar) -> Result<OfflineTrained, CliError> {
    let torch = |e: tch::TchError| CliError::Failed(format!("libtorch: {e}"));
    if data.replay.len() < cfg.ddqn.batch_size {
        return Err(CliError::BadInput(format!(
            "--telemetry: {} transitions, fewer than one batch ({}); record longer or more queues",
            data.replay.len(),
            cfg.ddqn.batch_size
        )));
    }
    let started = Instant::now();
    tch::manual_seed(cfg.seed as i64);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let dim = cfg.tuning.observation_dim();
    let actions = ActionTemplate::new(cfg.tuning.template).len();
    let mut agent = Ddqn::new(cfg.ddqn.clone(), cfg.device, dim, actions).map_err(torch)?;
    let held = data.replay.sample(4096.min(data.replay.len()), &mut rng);
    let every = (cfg.updates / 50).max(1);
    let (mut loss_sum, mut loss_n) = (0.0, 0u64);
    let mut curve = Vec::new();
    for u in 1..=cfg.updates {
        loss_sum += agent.update(&data.replay.sample(cfg.ddqn.batch_size, &mut rng)).map_err(torch)?;
        loss_n += 1;
        if u % every == 0 || u == cfg.updates {
            let greedy = agent.online().act(&held.obs);
            let agree = greedy.iter().zip(&held.actions).filter(|(g, &a)| **g == Some(a as usize)).count();
            let point = OfflinePoint {
                updates: u,
                loss: loss_sum / loss_n as f64,
                td_error_rms: rms(&agent.td_errors(agent.online(), &held)),
                agrees_with_logged: agree as f64 / held.actions.len() as f64,
                wall_seconds: started.elapsed().as_secs_f64(),
            };
            (loss_sum, loss_n) = (0.0, 0);
            bar.set_message(format!("loss {:.4}, agrees with logged {:.2}", point.loss, point.agrees_with_logged));
            curve.push(point);
        }
        bar.set_position(u);
    }
    let last = curve.last().copied().expect("at least one point");
    info!(
        loss = last.loss,
        td_error_rms = last.td_error_rms,
        agrees = last.agrees_with_logged,
        "offline training done"
    );
    let mut net = QNetwork::new(cfg.device, dim, &cfg.ddqn.hidden, actions);
    net.var_store_mut().copy(agent.online().var_store()).map_err(torch)?;
    let training = TrainingRecord {
        algorithm: ALGORITHM.into(),
        scenarios: data.files.iter().map(|f| f.path.clone()).collect(),
        seed: cfg.seed,
        env_steps: data.replay.len() as u64,
        updates: agent.updates(),
        wall_seconds: started.elapsed().as_secs_f64(),
        hyperparameters: serde_json::json!({
            "ddqn": cfg.ddqn,
            "action_counts": data.action_counts,
            "off_template_transitions": data.off_template,
            "off_interval_transitions": data.off_interval,
            "selection": "the final network (offline: no simulator in the loop)",
            "device": format!("{:?}", cfg.device),
            "cpu_arithmetic": ecn_models::arithmetic::CpuArithmetic::on(cfg.device),
        }),
        data: data.files.iter().map(|f| serde_json::to_value(f).expect("plain struct")).collect(),
        link_speeds_bps: data.link_speeds_bps.iter().copied().collect(),
    };
    let mut card = ModelCard::new(&cfg.name, cfg.tuning.clone(), cfg.ddqn.hidden.clone(), training);
    card.calibration = Some(Calibration::of(data.replay.observations(), dim, &agent.td_errors(agent.online(), &held)));
    // No simulator is in the loop, so no FCT figure exists to record; the card says so and
    // keeps what the learner can state about the network it kept.
    card.evaluation = serde_json::json!({
        "kind": "offline",
        "fct": null,
        "why_no_fct": "offline training has no simulator in the loop: measure flow completion times with \
                       `ecn-tuner eval --policy model:PATH` on a scenario like the recorded fabric",
        "scored_batch": {
            "transitions": held.actions.len(),
            "drawn_from": "the training transitions, once before training (not held out)",
            "updates": last.updates,
            "td_error_rms": last.td_error_rms,
            "agrees_with_logged": last.agrees_with_logged,
        },
    });
    Ok(OfflineTrained { checkpoint: Checkpoint { card, net }, curve })
}

fn rms(errors: &[f32]) -> f64 {
    (errors.iter().map(|&e| (e as f64).powi(2)).sum::<f64>() / errors.len().max(1) as f64).sqrt()
}

/// Whether a logged setting is this template setting. A Pmax within 10⁻⁶ is the same: a file
/// that stores Pmax as float32 logs 0.1 as 0.10000000149.
fn same_setting(template: EcnSetting, logged: EcnSetting) -> bool {
    template.kmin_bytes == logged.kmin_bytes
        && template.kmax_bytes == logged.kmax_bytes
        && (template.pmax - logged.pmax).abs() <= 1e-6
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecn_datasets::telemetry::{QueueKey, QueueSample};
    use ecn_env::EcnSetting;

    fn sample(ts_ns: u64, s: EcnSetting, queue_bytes_avg: f64) -> QueueSample {
        QueueSample {
            ts_ns,
            link_bps: 100_000_000_000,
            queue_bytes_avg,
            queue_bytes_max: queue_bytes_avg as u64,
            tx_bytes: 1_000_000,
            tx_pkts: 1_000,
            ecn_marked_pkts: 10,
            kmin_bytes: s.kmin_bytes,
            kmax_bytes: s.kmax_bytes,
            pmax: s.pmax,
            ..QueueSample::default()
        }
    }

    fn series(samples: Vec<QueueSample>, segment_starts: Vec<usize>) -> QueueSeries {
        QueueSeries { key: QueueKey::new("leaf0", "eth0", 3), interval_ns: Some(100_000), samples, segment_starts }
    }

    #[test]
    fn transitions_follow_the_logged_settings_and_stop_at_breaks() {
        let tuning = TuningConfig::default();
        let template = ActionTemplate::new(tuning.template);
        let link = BitsPerSec(100_000_000_000);
        let (a, b) = (template.settings()[0], template.settings()[5]);
        let rows = (0..6u64).map(|i| sample(i * 100_000, if i < 3 { a } else { b }, 1_000.0 * i as f64)).collect();
        // A break before row 4: stretches 0..4 and 4..6 give 3 + 1 transitions.
        let s = series(rows, vec![0, 4]);
        let mut data = LoggedData::new(&tuning, 100);
        assert_eq!(add_transitions(std::slice::from_ref(&s), &tuning, &mut data), Ok(4));
        assert_eq!(data.off_template, 0);
        assert_eq!(data.action_counts[template.nearest(&a, link)], 2);
        assert_eq!(data.action_counts[template.nearest(&b, link)], 2);
    }

    #[test]
    fn settings_off_the_template_are_counted() {
        let tuning = TuningConfig::default();
        let odd = EcnSetting { kmin_bytes: 2_000, kmax_bytes: 1_234_567, pmax: 0.1 };
        let rows = (0..3u64).map(|i| sample(i * 100_000, odd, 0.0)).collect();
        let mut data = LoggedData::new(&tuning, 100);
        assert_eq!(add_transitions(&[series(rows, vec![0])], &tuning, &mut data), Ok(2));
        assert_eq!(data.off_template, 2);
    }

    /// A template setting whose Pmax went through float32 (pyarrow, pandas) is on the template.
    #[test]
    fn a_float32_pmax_is_still_on_the_template() {
        let tuning = TuningConfig::default();
        let on = ActionTemplate::new(tuning.template).settings()[0];
        let widened = EcnSetting { pmax: on.pmax as f32 as f64, ..on };
        assert_ne!(widened.pmax, on.pmax);
        let rows = (0..3u64).map(|i| sample(i * 100_000, widened, 0.0)).collect();
        let mut data = LoggedData::new(&tuning, 100);
        assert_eq!(add_transitions(&[series(rows, vec![0])], &tuning, &mut data), Ok(2));
        assert_eq!(data.off_template, 0);
    }

    /// Transitions at the start of a segment observe fewer intervals than the model's history
    /// (the rest padded): they are not off the interval for that, so a regular file cut into
    /// short segments by gaps is not taken for one whose poll interval changed. A short last
    /// interval is.
    #[test]
    fn only_intervals_off_the_control_interval_count_as_off() {
        let tuning = TuningConfig::default();
        let ok = ActionTemplate::new(tuning.template).settings()[0];
        // Segments of 4 rows, every 100 µs, then a gap.
        let rows: Vec<QueueSample> =
            (0..12u64).map(|i| sample(i * 100_000 + (i / 4) * 1_000_000, ok, 1_000.0)).collect();
        let mut data = LoggedData::new(&tuning, 100);
        assert_eq!(add_transitions(&[series(rows.clone(), vec![0, 4, 8])], &tuning, &mut data), Ok(9));
        assert_eq!(data.off_interval, 0);
        // The last row 30 µs after the one before: its transition, and only it, is off.
        let mut short = rows;
        short[11].ts_ns = short[10].ts_ns + 30_000;
        let mut data = LoggedData::new(&tuning, 100);
        assert_eq!(add_transitions(&[series(short, vec![0, 4, 8])], &tuning, &mut data), Ok(9));
        assert_eq!(data.off_interval, 1);
    }

    /// A depth no switch could hold passes the schema (finite, not negative), but its reward
    /// is not finite: refused, naming the queue and time, before it can poison every Q-value.
    #[test]
    fn a_sample_with_a_non_finite_reward_is_refused() {
        let tuning = TuningConfig::default();
        let ok = ActionTemplate::new(tuning.template).settings()[0];
        let rows = (0..6u64).map(|i| sample(i * 100_000, ok, if i == 4 { 1e300 } else { 1_000.0 })).collect();
        let mut data = LoggedData::new(&tuning, 100);
        let e = add_transitions(&[series(rows, vec![0])], &tuning, &mut data).unwrap_err();
        assert!(e.contains("queue leaf0/eth0/3 at ts_ns 400000") && e.contains("not finite"), "{e}");
    }
}
