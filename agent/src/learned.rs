//! Learned policies (`model:default`, `model:PATH`): a checkpoint that decides every queue's
//! setting from its recent telemetry, in closed loop at its card's control interval.

use crate::error::CliError;
use crate::learn::trainer;
use ecn_env::tuning::{ActionTemplate, FeatureSet, QueueHistory, TuningConfig};
use ecn_env::{BitsPerSec, EcnSetting};
use ecn_models::{Checkpoint, ModelCard, QNetwork};
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tracing::warn;

/// How far a telemetry interval may stray from the card's control interval, as a ratio either
/// way, and still count as the interval the model trained at. A poller's jitter stays well
/// inside it; half or twice the interval does not: the shipped model, trained at 100 µs, keeps
/// almost none of its small-flow gain when it decides every 50 µs
/// (`docs/learning-experiments.md`, "Another control interval").
pub const INTERVAL_TOLERANCE: f64 = 1.25;

/// Whether telemetry sampled every `interval_ns` counts as sampled every `reference_ns`:
/// within [`INTERVAL_TOLERANCE`] either way. Offline training holds its data to the same
/// bound that a model's decisions are held to.
pub fn same_interval(interval_ns: u64, reference_ns: u64) -> bool {
    let ratio = interval_ns as f64 / reference_ns as f64;
    (1.0 / INTERVAL_TOLERANCE..=INTERVAL_TOLERANCE).contains(&ratio)
}

/// Why a learned model may not decide for a queue: something about it that the model never
/// trained on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untrained {
    /// The port's line rate, not among those its card lists.
    Rate(BitsPerSec),
    /// The length in ns of an interval the model would observe, not its control interval.
    Interval(u64),
}

/// A loaded checkpoint, shareable between threads (decisions take a short lock).
pub struct LearnedModel {
    /// As the user wrote it after `model:`.
    pub spec: String,
    /// The weights file.
    pub path: PathBuf,
    /// Its card.
    pub card: ModelCard,
    template: ActionTemplate,
    net: Mutex<QNetwork>,
    warned_untrained_speed: AtomicBool,
}

impl fmt::Debug for LearnedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LearnedModel").field("spec", &self.spec).field("path", &self.path).finish()
    }
}

impl LearnedModel {
    /// Load `model:SPEC`: a shipped name (`default`, `acc-baseline`) or a path to a
    /// `.safetensors` file with its card beside it (`runs/m` finds `runs/m.safetensors`).
    /// Errors start with `flag` (`--policy model:`, `--model `), the argument the user gave.
    /// Inference runs on the CPU: one decision is a few hundred small rows, where a GPU
    /// round trip costs more than it saves.
    pub fn load(spec: &str, flag: &str) -> Result<LearnedModel, CliError> {
        // `--model model:default` is the policy's spelling: it looked for a file
        // `model:default.card.json`.
        let spec = spec.strip_prefix("model:").unwrap_or(spec);
        let path = if spec.ends_with(".safetensors") {
            PathBuf::from(spec)
        } else if spec.contains('/') {
            let with_suffix = PathBuf::from(format!("{spec}.safetensors"));
            // Taken when it is there in any form, so that loading says what it is (a folder:
            // "no such file" named the path without the suffix).
            if with_suffix.symlink_metadata().is_ok() && !Path::new(spec).is_file() {
                with_suffix
            } else {
                PathBuf::from(spec)
            }
        } else {
            let path = ecn_models::default_model_path(spec);
            // A binary built in one checkout and run from another place (copied, or a shared
            // target dir reused by another checkout) looks in a folder that is not there: say so,
            // and how to point it at the models, instead of naming a missing card.
            if let Some(dir) = path.parent().filter(|d| !d.is_dir()) {
                let env = ecn_models::MODELS_DIR_ENV;
                let whose = match ecn_models::models_dir_from_env() {
                    Some(_) => format!("the folder that ${env} names"),
                    None => "the shipped models' folder, in the checkout this binary was built in,".to_string(),
                };
                return Err(CliError::BadInput(format!(
                    "{flag}{spec}: {whose} {} does not exist; set {env} to a folder that holds \
                     {spec}.safetensors and its card (models/checkpoints in a checkout), or give a path",
                    dir.display()
                )));
            }
            path
        };
        let ck =
            Checkpoint::load(&path, tch::Device::Cpu).map_err(|e| CliError::BadInput(format!("{flag}{spec}: {e}")))?;
        Ok(LearnedModel::from_checkpoint(spec, path, ck))
    }

    /// A model from a checkpoint already in memory.
    pub fn from_checkpoint(spec: &str, path: PathBuf, ck: Checkpoint) -> LearnedModel {
        LearnedModel {
            spec: spec.to_string(),
            path,
            template: ActionTemplate::new(ck.card.tuning.template),
            card: ck.card,
            net: Mutex::new(ck.net),
            warned_untrained_speed: AtomicBool::new(false),
        }
    }

    /// The MDP the model was trained on (features, template, bounds, control interval).
    pub fn tuning(&self) -> &TuningConfig {
        &self.card.tuning
    }

    /// The Q-value of every template action for each observation row (row-major).
    pub fn q_values(&self, obs: &[f32]) -> Vec<f32> {
        self.net.lock().unwrap_or_else(|p| p.into_inner()).q_values(obs)
    }

    /// The discount the model was trained with (its Q-values are sums discounted by it).
    pub fn gamma(&self) -> f64 {
        self.card.training.hyperparameters["ddqn"]["gamma"]
            .as_f64()
            .unwrap_or(crate::learn::ddqn::DdqnConfig::default().gamma)
    }

    /// One action per observation row (row-major), falling back to the template entry
    /// nearest the reference baseline wherever the network's output is not finite.
    pub fn decide(&self, obs: &[f32], links: &[BitsPerSec]) -> Vec<usize> {
        self.warn_on_untrained_speeds(links);
        let net = self.net.lock().unwrap_or_else(|p| p.into_inner());
        trainer::greedy_or_fallback(&net, &self.template, obs, links)
    }

    /// Whether the model trained on ports of this line rate. Cards that do not record their
    /// rates (older than the field) are taken at their word: every rate counts as trained.
    pub fn trained_at(&self, link: BitsPerSec) -> bool {
        let trained = &self.card.training.link_speeds_bps;
        trained.is_empty() || trained.contains(&link.0)
    }

    /// Whether telemetry that covers `interval_ns` per sample is what the model trained on:
    /// within [`INTERVAL_TOLERANCE`] of its card's control interval. Its features are rates and
    /// averages over one interval, and what they say about a queue changes with the interval.
    pub fn trained_at_interval(&self, interval_ns: u64) -> bool {
        same_interval(interval_ns, self.tuning().control_interval.0)
    }

    /// Whether (and why) the model may not decide for a queue at `link` whose recent telemetry
    /// is `history`, unless the operator allowed untrained rates or intervals. The rate is
    /// checked first. Of the intervals, the card's `history` newest count, those the model would
    /// observe: after a gap in the telemetry (a reconnect, a stalled poller) the interval that
    /// spans the gap holds the queue until it ages out. (A gap the telemetry states, an
    /// interval dropped before a sample that says what it covers, starts the history again
    /// instead: `controller::telemetry::QueueWatch`.)
    pub fn untrained(
        &self,
        link: BitsPerSec,
        history: &QueueHistory,
        allow_rates: bool,
        allow_intervals: bool,
    ) -> Option<Untrained> {
        if !allow_rates && !self.trained_at(link) {
            return Some(Untrained::Rate(link));
        }
        if allow_intervals {
            return None;
        }
        let mut observed = history.intervals().take(self.tuning().history).map(|iv| iv.interval_ns);
        observed.find(|&ns| !self.trained_at_interval(ns)).map(Untrained::Interval)
    }

    /// Why a queue is not the model's to decide, for decision logs and recommendations: `the
    /// model never trained on 25G ports (its card lists 100G, 400G)`, or `the model trained on
    /// 100µs telemetry intervals, and this queue's cover 1s`.
    pub fn untrained_reason(&self, why: Untrained) -> String {
        match why {
            Untrained::Rate(link) => {
                format!(
                    "the model never trained on {} ports (its card lists {})",
                    gbps_list([link.0]),
                    self.trained_rates()
                )
            }
            Untrained::Interval(ns) => format!(
                "the model trained on {:?} telemetry intervals, and this queue's cover {:?}",
                Duration::from_nanos(self.tuning().control_interval.0),
                Duration::from_nanos(ns)
            ),
        }
    }

    /// The line rates its card lists, as `100G, 400G`.
    fn trained_rates(&self) -> String {
        gbps_list(self.card.training.link_speeds_bps.iter().copied())
    }

    /// Warn once per model when it decides for a port at a line rate its training never saw:
    /// the settings there are untested, and the shipped model loses at 25G (README "Scenarios
    /// it was not trained on").
    fn warn_on_untrained_speeds(&self, links: &[BitsPerSec]) {
        if self.warned_untrained_speed.load(Ordering::Relaxed) {
            return;
        }
        let untrained: BTreeSet<u64> = links.iter().filter(|&&l| !self.trained_at(l)).map(|l| l.0).collect();
        if !untrained.is_empty() && !self.warned_untrained_speed.swap(true, Ordering::Relaxed) {
            warn!(
                model = %self.spec,
                trained_on = %self.trained_rates(),
                "deciding for ports at {} that this model never trained on; its settings there are untested",
                gbps_list(untrained)
            );
        }
    }

    /// Where the observation `obs` (one row) lies outside the range the model's training saw,
    /// by more than `margin_std` standard deviations: up to three features, as `kmin = 0.210
    /// (trained on -0.746..-0.246)`. `None` inside it, or for a card without calibration.
    pub fn outside_training(&self, obs: &[f32], margin_std: f32) -> Option<String> {
        let outside = self.card.calibration.as_ref()?.out_of_range(obs, margin_std);
        if outside.is_empty() {
            return None;
        }
        let names = self.tuning().features.names(self.tuning().history);
        let list: Vec<String> = outside
            .iter()
            .take(3)
            .map(|&(i, v, lo, hi)| format!("{} = {v:.3} (trained on {lo:.3}..{hi:.3})", names[i]))
            .collect();
        Some(list.join(", "))
    }

    /// Settings for queues given their telemetry histories; `None` for a queue with no
    /// usable history yet (the caller's guardrails then fall back to the baseline).
    pub fn propose(&self, queues: &[(BitsPerSec, &QueueHistory)]) -> Vec<Proposal> {
        let tuning = self.tuning();
        let (features, history): (FeatureSet, usize) = (tuning.features, tuning.history);
        let width = features.dim(history);
        let mut obs = Vec::new();
        let mut rows = Vec::new();
        let mut links = Vec::new();
        let mut out = vec![Proposal::default(); queues.len()];
        for (i, (link, h)) in queues.iter().enumerate() {
            if h.observe(features, history, &mut obs) {
                let row = &obs[obs.len() - width..];
                out[i].observed = true;
                out[i].outside_training = self.outside_training(row, OOD_MARGIN_STD);
                rows.push(i);
                links.push(*link);
            }
        }
        if rows.is_empty() {
            return out;
        }
        for (&i, a) in rows.iter().zip(self.decide(&obs, &links)) {
            out[i].setting = self.template.setting(a, queues[i].0, &tuning.bounds);
        }
        out
    }

    /// Whether `proposed`, this model's choice for a queue on `current` (a setting this run has
    /// not changed), means keeping `current`. A model trained offline learned from logged
    /// settings labelled by their nearest template entry, so to it a setting off the template
    /// (a switch's own profile) is that entry: choosing it is keeping the setting, as
    /// `recommend` says. Not so for a model trained in the simulator, whose actions are moves
    /// to template entries (as `sim` and `eval` run them), nor for a setting outside the
    /// model's bounds, which its choice clamps into them.
    pub fn keeps(&self, current: &EcnSetting, link: BitsPerSec, proposed: &EcnSetting) -> bool {
        let bounds = &self.tuning().bounds;
        self.card.training.algorithm == crate::learn::offline::ALGORITHM
            && bounds.contains(current)
            && self.template.setting(self.template.nearest(current, link), link, bounds) == Some(*proposed)
    }
}

/// How far outside its training range (in the calibration's standard deviations) an input may
/// lie before a model's choice from it counts as an extrapolation.
pub const OOD_MARGIN_STD: f32 = 1.0;

/// A learned model's proposal for one queue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Proposal {
    /// The setting it chose; `None` for a queue with no usable history yet (see `observed`),
    /// or for a choice outside the template.
    pub setting: Option<EcnSetting>,
    /// Whether the queue had the history the model observes (after a start or a break in its
    /// telemetry it has not, for the model's `history` intervals).
    pub observed: bool,
    /// Where the queue's observation lies outside the model's training range
    /// ([`LearnedModel::outside_training`]): the choice is then an extrapolation.
    pub outside_training: Option<String>,
}

/// Line rates as `25G, 100G`.
fn gbps_list(bps: impl IntoIterator<Item = u64>) -> String {
    bps.into_iter().map(|b| format!("{}G", BitsPerSec(b).as_gbps())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A choice of the entry nearest the setting in force keeps that setting for a model
    /// trained offline (to which it is that entry), within its bounds; a simulator-trained
    /// model's choice is a move to the entry.
    #[test]
    fn only_an_offline_model_keeps_a_setting_off_the_template() {
        let link = BitsPerSec(100_000_000_000);
        let mut model = LearnedModel::load("default", "model:").expect("shipped model");
        let profile = EcnSetting { kmin_bytes: 1_048_576, kmax_bytes: 2_097_152, pmax: 0.05 };
        let entry = model.template.setting(model.template.nearest(&profile, link), link, &model.tuning().bounds);
        let entry = entry.expect("an entry");
        assert_ne!(entry, profile, "the switch's profile is no template entry");
        assert!(!model.keeps(&profile, link, &entry), "simulator-trained: a move to the entry");
        model.card.training.algorithm = crate::learn::offline::ALGORITHM.into();
        assert!(model.keeps(&profile, link, &entry), "offline: keeping the profile");
        let other = model.template.setting(0, link, &model.tuning().bounds).expect("an entry");
        assert!(other == entry || !model.keeps(&profile, link, &other), "another entry is a move");
        // Outside the model's bounds (Pmax below its least): its choice clamps into them.
        let off = EcnSetting { pmax: 0.0, ..profile };
        let clamped = model.template.setting(model.template.nearest(&off, link), link, &model.tuning().bounds).unwrap();
        assert!(!model.keeps(&off, link, &clamped));
    }
}
