//! One-shot recommendations: for every queue, the setting a learned model would choose from
//! the queue's recent telemetry, how much better it expects that to be than keeping the current
//! setting, and how sure it is; or "keep", with the reason, when it is not.
//!
//! A recommendation is only made when all of these hold, otherwise the current setting is kept:
//! - the queue has `history` unbroken intervals of telemetry (the model's whole input), each
//!   about as long as the model's control interval;
//! - every feature lies inside the range the model was trained on (the card's calibration):
//!   outside it, a Q-network extrapolates, and its numbers mean nothing;
//! - the model prefers another setting by a margin that its own noise cannot explain: the
//!   confidence `1 − exp(−gap / noise)` reaches the threshold, where the gap is the
//!   Q-value of the recommendation minus that of keeping the current setting, and the noise is
//!   the card's temporal-difference error scale (`calibration.td_error_scale`: how far apart
//!   two Q-values must be before their order means something). Where the model's choice is
//!   the current setting, the confidence is that of keeping it: the gap is then its margin
//!   over the best other action;
//! - the guardrails of the online controller (step limit, bounds) leave a change.
//!
//! The proposal passes the same [`Guardrails`] as in enforce mode, so a recommendation is
//! what the controller's first step would apply, never an unbounded output.

use crate::controller::guardrails::{Clamp, GuardrailConfig, Guardrails, QueueContext, TelemetryHealth};
use crate::learn::trainer::REFERENCE_BASELINE;
use crate::learned::{LearnedModel, Untrained};
use ecn_env::tuning::{ActionTemplate, QueueHistory};
use ecn_env::{BitsPerSec, EcnSetting};
use serde::Serialize;
use std::time::Instant;

/// Confidence needed before a change is recommended (the gap is then 1.6 TD errors).
pub const DEFAULT_MIN_CONFIDENCE: f64 = 0.8;

/// The reason for a keep below `min_confidence`, both to two decimals, as the table shows the
/// confidence, or to as many more as tell them apart: 0.7978 against 0.8 reads "0.798 <
/// 0.800", where two decimals read "0.80 < 0.80".
fn unsure(confidence: f64, min_confidence: f64) -> String {
    let digits = (2..=6).find(|&d| format!("{confidence:.d$}") != format!("{min_confidence:.d$}")).unwrap_or(6);
    format!(
        "unsure: the expected gain is within the model's noise (confidence {confidence:.digits$} < {min_confidence:.digits$})"
    )
}

pub use crate::learned::OOD_MARGIN_STD;

/// What is known about one queue.
#[derive(Debug, Clone)]
pub struct QueueState {
    /// Switch name.
    pub switch: String,
    /// Port name.
    pub port: String,
    /// Priority.
    pub queue: u32,
    /// Port speed.
    pub link: BitsPerSec,
    /// The setting in effect now.
    pub current: EcnSetting,
    /// The queue's recent intervals since the last continuity break, newest first.
    pub history: QueueHistory,
    /// How many intervals `history` holds (it keeps at most the model's history).
    pub intervals: usize,
    /// How long before the newest sample of any queue of its switch in the source this
    /// queue's newest one was taken (0 for the queues sampled last).
    pub behind_ns: u64,
    /// The queue's sample interval, when known.
    pub interval_ns: Option<u64>,
    /// What its newest sample covered, where that was a partial interval left out of
    /// `history` (a recording ends mid-interval): the recommendation is from the ones before.
    pub partial_last_ns: Option<u64>,
}

/// Keep or change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Apply the recommended setting.
    Change,
    /// Keep the current setting (see the reason).
    Keep,
}

/// The model's valuation of a few settings for one queue.
#[derive(Debug, Clone, Serialize)]
pub struct ExpectedEffect {
    /// Q-value of the model's choice.
    pub q_choice: f64,
    /// Q-value of keeping the current setting (its nearest template entry).
    pub q_current: f64,
    /// The choice's Q-value advantage over the current setting as a rate: (Q difference) ×
    /// (1 − γ), the reward per control interval that, kept up for ever, is worth the same, in
    /// the units of the card's reward. A scale for comparing choices, not a forecast of the
    /// next interval: the Q difference is that of choosing once and following the model after.
    pub reward_gain_per_interval: f64,
    /// The same for what is recommended (its nearest template entry): the choice's gain for an
    /// unclamped change, less for a step the guardrails limited, 0 for a `keep`.
    pub recommended_gain_per_interval: f64,
    /// In words: what the recommended setting does to marking, against the current one, and
    /// what it should do to the queue ("keeps the current setting" for a `keep`).
    pub summary: String,
}

/// The static setting every recommendation is compared with.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineComparison {
    /// REFERENCE.md §5 row.
    pub name: String,
    /// Its setting at this port's speed.
    pub setting: EcnSetting,
    /// The recommended setting's advantage over this baseline, both at their nearest template
    /// entries, as a rate per interval (see [`ExpectedEffect::reward_gain_per_interval`]):
    /// for a `keep`, that of the current setting.
    pub reward_gain_per_interval: Option<f64>,
}

/// One queue's recommendation (PRODUCT.md "JSON outputs": `recommend --json`).
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    /// Switch name.
    pub switch: String,
    /// Port name.
    pub port: String,
    /// Priority.
    pub queue: u32,
    /// The setting in effect.
    pub current: EcnSetting,
    /// What to apply: the current setting when the decision is `keep`.
    pub recommended: EcnSetting,
    /// Change or keep.
    pub decision: Decision,
    /// How sure the model is that its choice beats the current setting, in [0, 1].
    pub confidence: f64,
    /// Why.
    pub reason: String,
    /// The model's unclamped choice, if it made one.
    pub proposed: Option<EcnSetting>,
    /// Guardrails that changed the proposal.
    pub clamps: Vec<Clamp>,
    /// The model's numbers, when it was asked.
    pub expected_effect: Option<ExpectedEffect>,
    /// The reference static setting.
    pub baseline: BaselineComparison,
}

/// Knobs of [`recommend`].
#[derive(Debug, Clone)]
pub struct RecommendConfig {
    /// Confidence needed for a change.
    pub min_confidence: f64,
    /// Out-of-distribution margin, in training standard deviations.
    pub ood_margin_std: f32,
    /// Step limits and bounds, as in enforce mode.
    pub guardrails: GuardrailConfig,
    /// Recommend for ports at line rates the model's card does not list (otherwise: keep).
    pub allow_untrained_rates: bool,
    /// Recommend from telemetry intervals other than the model's control interval (otherwise:
    /// keep).
    pub allow_untrained_intervals: bool,
}

impl RecommendConfig {
    /// Defaults for `model`: its bounds, the controller's step limits. Not the controller's
    /// change budget: that paces writes over time, and one recommendation for every queue is
    /// no stream of writes (with it, identical queues past the 600th were told to keep).
    pub fn for_model(model: &LearnedModel) -> Self {
        let b = model.tuning().bounds;
        RecommendConfig {
            min_confidence: DEFAULT_MIN_CONFIDENCE,
            ood_margin_std: OOD_MARGIN_STD,
            guardrails: GuardrailConfig {
                kmin_min_bytes: b.kmin_min_bytes,
                kmax_max_bytes: b.kmax_max_bytes,
                pmax_min: b.pmax_min,
                pmax_max: b.pmax_max,
                max_changes_per_minute: u32::MAX,
                ..GuardrailConfig::default()
            },
            allow_untrained_rates: false,
            allow_untrained_intervals: false,
        }
    }
}

/// Confidence that a Q-value gap is real, given the model's Q-value noise.
pub fn confidence(gap: f64, q_noise: f64) -> f64 {
    if !gap.is_finite() || gap <= 0.0 {
        return 0.0;
    }
    1.0 - (-gap / q_noise.max(1e-9)).exp()
}

fn summary(from: &EcnSetting, to: &EcnSetting) -> String {
    if from == to {
        return "keeps the current setting".into();
    }
    let earlier = (to.kmin_bytes < from.kmin_bytes) as i32 + (to.kmax_bytes < from.kmax_bytes) as i32
        - (to.kmin_bytes > from.kmin_bytes) as i32
        - (to.kmax_bytes > from.kmax_bytes) as i32
        + (to.pmax > from.pmax) as i32
        - (to.pmax < from.pmax) as i32;
    let what = match earlier.signum() {
        1 => "marks earlier and harder: shallower queue, lower small-flow latency, less PFC risk",
        -1 => "marks later and softer: more throughput headroom for large flows, deeper queue",
        _ => "reshapes the marking curve",
    };
    format!(
        "Kmin {} → {} B, Kmax {} → {} B, Pmax {:.2} → {:.2}: {what}",
        from.kmin_bytes, to.kmin_bytes, from.kmax_bytes, to.kmax_bytes, from.pmax, to.pmax
    )
}

/// Recommend a setting for every queue.
pub fn recommend(model: &LearnedModel, queues: &[QueueState], cfg: &RecommendConfig) -> Vec<Recommendation> {
    let tuning = model.tuning();
    let template = ActionTemplate::new(tuning.template);
    let gamma = model.gamma();
    let calibration = model.card.calibration.as_ref();
    let mut guardrails = Guardrails::new(cfg.guardrails.clone());
    let bounds = tuning.bounds;
    let now = Instant::now();
    queues
        .iter()
        .map(|q| {
            let baseline_setting = bounds.clamp(REFERENCE_BASELINE.setting(q.link));
            let mut rec = Recommendation {
                switch: q.switch.clone(),
                port: q.port.clone(),
                queue: q.queue,
                current: q.current,
                recommended: q.current,
                decision: Decision::Keep,
                confidence: 0.0,
                reason: String::new(),
                proposed: None,
                clamps: Vec::new(),
                expected_effect: None,
                baseline: BaselineComparison {
                    name: REFERENCE_BASELINE.name().into(),
                    setting: baseline_setting,
                    reward_gain_per_interval: None,
                },
            };
            // Marking in a step (Kmin = Kmax) is the curve the bounds write Kmax = Kmin + 1 B
            // (`dctcp-style`): the same marks, so not a fault, and the model's `keep` is its own.
            // At the top of the bounds the byte goes below Kmin instead (it used to leave the
            // bounds, and a step at the largest Kmax was "clamped" as a fault).
            let current = if q.current.kmin_bytes == q.current.kmax_bytes {
                if q.current.kmax_bytes < bounds.kmax_max_bytes {
                    EcnSetting { kmax_bytes: q.current.kmax_bytes + 1, ..q.current }
                } else {
                    EcnSetting { kmin_bytes: q.current.kmin_bytes.saturating_sub(1), ..q.current }
                }
            } else {
                q.current
            };
            // A current setting outside the bounds is a fault to fix whatever the model says.
            if !bounds.contains(&current) {
                rec.recommended = bounds.clamp(current);
                rec.decision = Decision::Change;
                rec.confidence = 1.0;
                rec.clamps.push(Clamp::Bounds);
                rec.reason = "the current setting is outside the bounds; clamped into them".into();
                return rec;
            }
            let Some(calibration) = calibration else {
                rec.reason = "the model card has no calibration (training-data range and Q-value noise); \
                              retrain the model with this ecn-tuner to get recommendations from it"
                    .into();
                return rec;
            };
            let (rates, intervals) = (cfg.allow_untrained_rates, cfg.allow_untrained_intervals);
            // What the flags allowed, each of them, is said with whatever is decided.
            let allowed: Vec<String> = [
                (rates, model.untrained(q.link, &q.history, false, true)),
                (intervals, model.untrained(q.link, &q.history, true, false)),
            ]
            .into_iter()
            .filter_map(|(allowed, why)| why.filter(|_| allowed))
            .map(|why| model.untrained_reason(why))
            .collect();
            // Said with whatever is decided from here on, where the queue's intervals count:
            // what the flags allowed, and a partial newest sample left out.
            let finish = |mut rec: Recommendation| {
                if !allowed.is_empty() {
                    rec.reason = format!("{} (allowed although {})", rec.reason, allowed.join("; and "));
                }
                if let Some(ns) = q.partial_last_ns {
                    rec.reason = format!(
                        "{}; from the intervals before its newest sample, which covers {:?} of an interval",
                        rec.reason,
                        std::time::Duration::from_nanos(ns)
                    );
                }
                rec
            };
            if let Some(why) = model.untrained(q.link, &q.history, rates, intervals) {
                let whence = match why {
                    Untrained::Rate(_) => "there",
                    Untrained::Interval(_) => "from them",
                };
                rec.reason = format!("{}; its settings {whence} are untested", model.untrained_reason(why));
                return finish(rec);
            }
            // Telemetry that ended well before the rest of its switch's: a queue gone quiet (port
            // down, removed) is no state to act on. Two of its intervals allow for queues polled
            // at different moments.
            let interval_ns = q.interval_ns.unwrap_or(tuning.control_interval.0);
            if q.behind_ns > interval_ns.saturating_mul(2) {
                rec.reason = format!(
                    "its telemetry ends {} before the newest of its switch's (a queue gone quiet?)",
                    ecn_env::Nanos(q.behind_ns)
                );
                return finish(rec);
            }
            if q.intervals < tuning.history {
                rec.reason = format!(
                    "only {} unbroken interval(s) of telemetry, the model needs {}",
                    q.intervals, tuning.history
                );
                return finish(rec);
            }
            let mut obs = Vec::new();
            if !q.history.observe(tuning.features, tuning.history, &mut obs) {
                rec.reason = "no telemetry".into();
                return finish(rec);
            }
            if let Some(outside) = model.outside_training(&obs, cfg.ood_margin_std) {
                rec.reason = format!("out of the training distribution: {outside}");
                return finish(rec);
            }
            let qv = model.q_values(&obs);
            // The same argmax as `run` (first of equal values), so both commands choose alike.
            let Some(choice) = ecn_models::greedy(&qv) else {
                rec.reason = "the model's output is not finite".into();
                return finish(rec);
            };
            let keep = template.nearest(&current, q.link);
            let base = template.nearest(&baseline_setting, q.link);
            let gain = |a: usize, b: usize| (qv[a] - qv[b]) as f64 * (1.0 - gamma);
            'decided: {
                let Some(proposed) = template.setting(choice, q.link, &bounds) else {
                    rec.reason = "the model chose an action outside its template".into();
                    break 'decided;
                };
                rec.proposed = Some(proposed);
                rec.expected_effect = Some(ExpectedEffect {
                    q_choice: qv[choice] as f64,
                    q_current: qv[keep] as f64,
                    reward_gain_per_interval: gain(choice, keep),
                    recommended_gain_per_interval: 0.0,
                    summary: String::new(),
                });
                if choice == keep {
                    let runner_up = (0..qv.len())
                        .filter(|&a| a != keep)
                        .max_by(|&a, &b| qv[a].total_cmp(&qv[b]))
                        .map(|a| (qv[keep] - qv[a]) as f64)
                        .unwrap_or(0.0);
                    rec.confidence = confidence(runner_up, calibration.q_noise());
                    rec.reason = "the model's choice is the current setting (its nearest template entry)".into();
                    break 'decided;
                }
                rec.confidence = confidence((qv[choice] - qv[keep]) as f64, calibration.q_noise());
                if rec.confidence < cfg.min_confidence {
                    rec.reason = unsure(rec.confidence, cfg.min_confidence);
                    break 'decided;
                }
                let ctx = QueueContext {
                    current,
                    baseline: baseline_setting,
                    xoff_bytes: None,
                    last_change: None,
                    telemetry: TelemetryHealth::Good,
                    fallback_refused: false,
                };
                let verdict = guardrails.check(Some(proposed), &ctx, now);
                rec.clamps = verdict.clamps;
                if verdict.setting == current {
                    rec.reason = "the guardrails hold the current setting".into();
                    break 'decided;
                }
                // A limited step lands elsewhere than the model's choice: recommended only where
                // the model expects that step, too, to beat keeping.
                if gain(template.nearest(&verdict.setting, q.link), keep) <= 0.0 {
                    rec.reason = "the guardrails limit the step to a setting the model expects to do no better than \
                                  the current one"
                        .into();
                    break 'decided;
                }
                rec.recommended = verdict.setting;
                rec.decision = Decision::Change;
                rec.reason = if rec.clamps.is_empty() {
                    "the model expects a better reward from this setting".into()
                } else {
                    "the model expects a better reward; the guardrails limited the step".into()
                };
            }
            let mut rec = finish(rec);
            // What is recommended (the current setting unless it is a change, a limited step
            // at its nearest template entry) against the baseline, not what the model chose.
            let recommended = template.nearest(&rec.recommended, q.link);
            rec.baseline.reward_gain_per_interval = Some(gain(recommended, base));
            if let Some(effect) = rec.expected_effect.as_mut() {
                effect.recommended_gain_per_interval =
                    if rec.decision == Decision::Change { gain(recommended, keep) } else { 0.0 };
                effect.summary = summary(&q.current, &rec.recommended);
            }
            rec
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecn_env::tuning::{Bounds, QueueInterval, QueueSample, TuningConfig};
    use ecn_models::{Calibration, Checkpoint, ModelCard, QNetwork, TrainingRecord};
    use proptest::prelude::*;

    /// A model with random weights and a calibration wide enough to accept any input, so that
    /// every branch up to the guardrails is reached.
    fn model(seed: i64, bounds: Bounds, td_error_rms: f64) -> LearnedModel {
        tch::manual_seed(seed);
        let tuning = TuningConfig { bounds, ..TuningConfig::default() };
        let dim = tuning.observation_dim();
        let actions = ActionTemplate::new(tuning.template).len();
        let net = QNetwork::new(tch::Device::Cpu, dim, &[16], actions);
        let training = TrainingRecord {
            algorithm: crate::learn::offline::ALGORITHM.into(),
            scenarios: vec![],
            seed: 0,
            env_steps: 0,
            updates: 0,
            wall_seconds: 0.0,
            hyperparameters: serde_json::json!({"ddqn": {"gamma": 0.8}}),
            data: vec![],
            link_speeds_bps: vec![],
        };
        let mut card = ModelCard::new("test", tuning, vec![16], training);
        card.calibration = Some(Calibration {
            samples: 1,
            mean: vec![0.0; dim],
            std: vec![1.0; dim],
            low: vec![-1e6; dim],
            high: vec![1e6; dim],
            td_error_rms,
            td_error_scale: td_error_rms,
        });
        LearnedModel::from_checkpoint("test", "test.safetensors".into(), Checkpoint { card, net })
    }

    fn state(current: EcnSetting, link_gbps: u64, depth: f64, intervals: usize) -> QueueState {
        state_over(current, link_gbps, depth, intervals, 100_000)
    }

    /// A queue whose telemetry samples each cover `interval_ns`.
    fn state_over(current: EcnSetting, link_gbps: u64, depth: f64, intervals: usize, interval_ns: u64) -> QueueState {
        let link = BitsPerSec(link_gbps * 1_000_000_000);
        let mut history = QueueHistory::default();
        for i in 0..intervals {
            history.push(
                QueueInterval {
                    interval_ns,
                    sample: QueueSample {
                        link_bps: link.0,
                        queue_bytes_avg: depth * (i + 1) as f64,
                        queue_bytes_max: (depth * 2.0 * (i + 1) as f64) as u64,
                        tx_bytes: link.0 / 80_000 / 2,
                        tx_pkts: 600,
                        ecn_marked_pkts: 30,
                        pfc_pause_rx: 0,
                        pfc_pause_tx: i as u64,
                        paused_ns: 0,
                        drops: 0,
                        kmin_bytes: current.kmin_bytes,
                        kmax_bytes: current.kmax_bytes,
                        pmax: current.pmax,
                        ..QueueSample::default()
                    },
                },
                3,
            );
        }
        QueueState {
            switch: "s".into(),
            port: "p".into(),
            queue: 3,
            link,
            current,
            history,
            intervals,
            behind_ns: 0,
            interval_ns: None,
            partial_last_ns: None,
        }
    }

    #[test]
    fn short_history_and_missing_calibration_keep_the_current_setting() {
        let b = Bounds::default();
        let m = model(1, b, 1e-6);
        let cur = EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.2 };
        let cfg = RecommendConfig::for_model(&m);
        let r = &recommend(&m, &[state(cur, 100, 1_000.0, 2)], &cfg)[0];
        assert_eq!((r.decision, r.recommended), (Decision::Keep, cur));
        assert!(r.reason.contains("only 2 unbroken"), "{}", r.reason);

        let mut bare = model(1, b, 1e-6);
        bare.card.calibration = None;
        let r = &recommend(&bare, &[state(cur, 100, 1_000.0, 3)], &cfg)[0];
        assert_eq!(r.decision, Decision::Keep);
        assert!(r.reason.contains("no calibration"), "{}", r.reason);
    }

    #[test]
    fn telemetry_over_another_interval_than_the_cards_keeps_the_current_setting() {
        let m = model(1, Bounds::default(), 1e-6);
        // The card's control interval is 100 µs; a poller's jitter passes, twice or half does not.
        assert!(m.trained_at_interval(100_000) && m.trained_at_interval(80_000) && m.trained_at_interval(125_000));
        assert!(!m.trained_at_interval(50_000) && !m.trained_at_interval(200_000));
        let cur = EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.2 };
        let mut cfg = RecommendConfig::for_model(&m);
        let slow = state_over(cur, 100, 1_000.0, 3, 1_000_000_000);
        let r = &recommend(&m, std::slice::from_ref(&slow), &cfg)[0];
        assert_eq!((r.decision, r.recommended), (Decision::Keep, cur));
        let why = "the model trained on 100µs telemetry intervals, and this queue's cover 1s";
        assert_eq!(r.reason, format!("{why}; its settings from them are untested"));
        assert!(r.expected_effect.is_none(), "the model was not asked");
        // A gap in the telemetry: the one long interval among the model's three holds it too.
        let mut gap = state(cur, 100, 1_000.0, 3);
        let mut long = *gap.history.latest().unwrap();
        long.interval_ns = 5_000_000;
        gap.history.push(long, 3);
        assert!(recommend(&m, &[gap.clone()], &cfg)[0].reason.contains("cover 5ms"));
        cfg.allow_untrained_intervals = true;
        for q in [slow, gap] {
            let r = &recommend(&m, &[q], &cfg)[0];
            assert!(r.expected_effect.is_some(), "the model decides when allowed: {}", r.reason);
            // And says what was allowed, with whatever it decides.
            assert!(r.reason.contains("(allowed although the model trained on 100µs telemetry"), "{}", r.reason);
        }

        // A queue whose telemetry ended a second before the rest of its switch's: keep.
        let quiet = QueueState { behind_ns: 1_000_000_000, ..state(cur, 100, 1_000.0, 3) };
        let r = &recommend(&m, &[quiet], &cfg)[0];
        assert_eq!((r.decision, r.recommended), (Decision::Keep, cur));
        assert_eq!(r.reason, "its telemetry ends 1s before the newest of its switch's (a queue gone quiet?)");
        // Sampled every second, it is only a poll behind the rest: no reason to hold.
        let late_poll =
            QueueState { behind_ns: 1_000_000_000, interval_ns: Some(1_000_000_000), ..state(cur, 100, 1_000.0, 3) };
        assert!(!recommend(&m, &[late_poll], &cfg)[0].reason.contains("gone quiet"));
    }

    /// The gains over the baseline and over the current setting are the recommended setting's:
    /// for a `keep`, the current setting's, however much better the model's (unsure) choice
    /// looked.
    #[test]
    fn the_baseline_gain_is_that_of_the_setting_recommended() {
        let cur = EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.2 };
        let q = state(cur, 100, 1_000.0, 3);
        let (mut keeps, mut changes) = (0, 0);
        for (seed, td) in (0..20).flat_map(|seed| [(seed, 1e6), (seed, 1e-9)]) {
            let m = model(seed, Bounds::default(), td);
            let r = &recommend(&m, std::slice::from_ref(&q), &RecommendConfig::for_model(&m))[0];
            let Some(effect) = &r.expected_effect else { continue };
            let tuning = m.tuning();
            let mut obs = Vec::new();
            assert!(q.history.observe(tuning.features, tuning.history, &mut obs));
            let qv = m.q_values(&obs);
            let template = ActionTemplate::new(tuning.template);
            let base = qv[template.nearest(&r.baseline.setting, q.link)];
            let recommended = qv[template.nearest(&r.recommended, q.link)];
            let want = (recommended - base) as f64 * (1.0 - m.gamma());
            assert_eq!(r.baseline.reward_gain_per_interval, Some(want), "seed {seed}: {}", r.reason);
            // The same holds for the gain over keeping the current setting: 0 for a keep.
            let current = qv[template.nearest(&cur, q.link)];
            let want = match r.decision {
                Decision::Change => (recommended - current) as f64 * (1.0 - m.gamma()),
                Decision::Keep => 0.0,
            };
            assert_eq!(effect.recommended_gain_per_interval, want, "seed {seed}: {}", r.reason);
            match r.decision {
                Decision::Keep if effect.reward_gain_per_interval > 0.0 => keeps += 1,
                Decision::Change => changes += 1,
                Decision::Keep => {}
            }
        }
        assert!(keeps > 0 && changes > 0, "both cases reached: {keeps} unsure keeps, {changes} changes");
    }

    /// Marking in a step (Kmin = Kmax) is the same curve as Kmax = Kmin + 1 B, the bounds' way
    /// of writing it: not a fault to clamp by a byte at confidence 1, but a setting the model
    /// judges as it would its template entry.
    #[test]
    fn a_step_marking_setting_is_judged_not_clamped_by_a_byte() {
        let step = EcnSetting { kmin_bytes: 100_000, kmax_bytes: 100_000, pmax: 0.2 };
        let (mut keeps, mut changes) = (0, 0);
        for seed in 0..10 {
            let m = model(seed, Bounds::default(), 1e-9);
            let r = &recommend(&m, &[state(step, 100, 1_000.0, 3)], &RecommendConfig::for_model(&m))[0];
            assert!(
                !r.clamps.contains(&Clamp::Bounds) && !r.reason.contains("outside the bounds"),
                "seed {seed}: {}",
                r.reason
            );
            let effect = r.expected_effect.as_ref().expect("the model was asked");
            match r.decision {
                Decision::Keep => {
                    assert_eq!(r.recommended, step, "a keep keeps the step as written");
                    assert_eq!(effect.summary, "keeps the current setting");
                    keeps += 1;
                }
                Decision::Change => {
                    assert_ne!(r.recommended.kmax_bytes, step.kmax_bytes + 1, "seed {seed}: a one-byte change");
                    assert!(effect.summary.contains(&format!("Kmin 100000 → {} B", r.recommended.kmin_bytes)));
                    changes += 1;
                }
            }
        }
        assert!(changes > 0, "{keeps} keeps, {changes} changes");
    }

    /// At the largest Kmax the bounds allow, a step is written with Kmin one byte lower: it
    /// used to be widened past the bounds and "clamped" as a fault at confidence 1.
    #[test]
    fn a_step_at_the_largest_kmax_is_judged_too() {
        let b = Bounds::default();
        let step = EcnSetting { kmin_bytes: b.kmax_max_bytes, kmax_bytes: b.kmax_max_bytes, pmax: 0.2 };
        let m = model(1, b, 1e-9);
        let r = &recommend(&m, &[state(step, 100, 1_000.0, 3)], &RecommendConfig::for_model(&m))[0];
        assert!(!r.reason.contains("outside the bounds") && r.expected_effect.is_some(), "{}", r.reason);
    }

    /// One recommendation for many queues is not paced like the controller's writes: queues
    /// with the same telemetry get the same answer, however many there are (past the 600th,
    /// the change budget used to hold them).
    #[test]
    fn every_queue_is_judged_alone_however_many() {
        let cur = EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.2 };
        let q = state(cur, 100, 1_000.0, 3);
        let m = (0..20)
            .map(|seed| model(seed, Bounds::default(), 1e-9))
            .find(|m| {
                recommend(m, std::slice::from_ref(&q), &RecommendConfig::for_model(m))[0].decision == Decision::Change
            })
            .expect("a model that changes the queue");
        let recs = recommend(&m, &vec![q; 700], &RecommendConfig::for_model(&m));
        assert!(recs.iter().all(|r| r.decision == Decision::Change && r.recommended == recs[0].recommended));
    }

    /// A change is recommended only where the model expects the setting recommended, after
    /// the guardrails' step limit, to beat keeping: a limited step the model rates no better
    /// is a keep that says so.
    #[test]
    fn a_limited_step_is_recommended_only_where_it_gains() {
        let cur = EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.2 };
        let (mut limited_keeps, mut limited_changes) = (0, 0);
        for seed in 0..60 {
            for depth in [1_000.0, 100_000.0] {
                let m = model(seed, Bounds::default(), 1e-9);
                let r = &recommend(&m, &[state(cur, 100, depth, 3)], &RecommendConfig::for_model(&m))[0];
                let Some(effect) = &r.expected_effect else { continue };
                if r.decision == Decision::Change {
                    assert!(effect.recommended_gain_per_interval > 0.0, "seed {seed}: {r:?}");
                    limited_changes += !r.clamps.is_empty() as u32;
                } else if r.reason.contains("limit the step") {
                    assert_eq!(r.recommended, cur);
                    limited_keeps += 1;
                }
            }
        }
        assert!(
            limited_keeps > 0 && limited_changes > 0,
            "{limited_keeps} limited keeps, {limited_changes} limited changes"
        );
    }

    /// With both flags, the reason names both things they allowed.
    #[test]
    fn both_things_allowed_are_said() {
        let m = model(1, Bounds::default(), 1e-6);
        let cur = EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.2 };
        let mut cfg = RecommendConfig::for_model(&m);
        (cfg.allow_untrained_rates, cfg.allow_untrained_intervals) = (true, true);
        let mut m = m;
        m.card.training.link_speeds_bps = vec![100_000_000_000];
        let r = &recommend(&m, &[state_over(cur, 25, 1_000.0, 3, 1_000_000_000)], &cfg)[0];
        assert!(r.reason.contains("never trained on 25G ports") && r.reason.contains("cover 1s"), "{}", r.reason);
    }

    #[test]
    fn an_unsure_reason_never_reads_as_equal_to_the_threshold() {
        assert!(unsure(0.7977, 0.8).ends_with("(confidence 0.798 < 0.800)"), "{}", unsure(0.7977, 0.8));
        assert!(unsure(0.10293, 0.104).ends_with("(confidence 0.103 < 0.104)"));
        assert!(unsure(0.5, 0.8).ends_with("(confidence 0.50 < 0.80)"));
        assert!(unsure(0.29, 0.8).ends_with("(confidence 0.29 < 0.80)"));
    }

    #[test]
    fn confidence_grows_with_the_gap_in_units_of_td_error() {
        assert_eq!(confidence(0.0, 1.0), 0.0);
        assert_eq!(confidence(f64::NAN, 1.0), 0.0);
        assert!((confidence(1.0, 1.0) - 0.632).abs() < 1e-3);
        assert!(confidence(3.0, 1.0) > 0.95 && confidence(3.0, 1.0) < 1.0);
        assert!(confidence(0.1, 1.0) < confidence(0.1, 0.1));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Whatever the network, the telemetry and the current setting, a recommendation stays
        /// inside the bounds: a change goes through the guardrails, and a current setting
        /// outside the bounds is clamped rather than kept.
        #[test]
        fn recommendations_never_leave_the_bounds(
            seed in 0i64..1000,
            kmin_min in 1_000u64..20_000,
            span in 50_000u64..10_000_000,
            pmin in 0.001f64..0.3,
            pspan in 0.0f64..0.7,
            cur_kmin in 1u64..5_000_000,
            cur_span in 1u64..10_000_000,
            cur_pmax in 0.0f64..1.0,
            gbps in prop::sample::select(vec![10u64, 25, 40, 100, 200, 400]),
            depth in 0.0f64..5_000_000.0,
            intervals in 0usize..5,
            td in prop::sample::select(vec![1e-9, 1e-3, 1.0]),
        ) {
            let bounds = Bounds { kmin_min_bytes: kmin_min, kmax_max_bytes: kmin_min + span, pmax_min: pmin, pmax_max: (pmin + pspan).min(1.0) };
            let m = model(seed, bounds, td);
            let cur = EcnSetting { kmin_bytes: cur_kmin, kmax_bytes: cur_kmin + cur_span, pmax: cur_pmax };
            let cfg = RecommendConfig::for_model(&m);
            for r in recommend(&m, &[state(cur, gbps, depth, intervals)], &cfg) {
                prop_assert!(bounds.contains(&r.recommended), "{:?} outside {:?}: {}", r.recommended, bounds, r.reason);
                prop_assert!((0.0..=1.0).contains(&r.confidence));
                prop_assert!(r.decision == Decision::Change || r.recommended == r.current);
            }
        }
    }
}
