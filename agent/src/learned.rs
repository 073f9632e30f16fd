//! Learned policies (`model:default`, `model:PATH`): a checkpoint that decides every queue's
//! setting from its recent telemetry, in closed loop at its card's control interval.

use crate::error::CliError;
use crate::learn::trainer;
use ecn_env::tuning::{ActionTemplate, FeatureSet, QueueHistory, TuningConfig};
use ecn_env::{BitsPerSec, EcnSetting};
use ecn_models::{Checkpoint, ModelCard, QNetwork};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
        let path = if spec.ends_with(".safetensors") {
            PathBuf::from(spec)
        } else if spec.contains('/') {
            let with_suffix = PathBuf::from(format!("{spec}.safetensors"));
            if with_suffix.is_file() && !Path::new(spec).is_file() {
                with_suffix
            } else {
                PathBuf::from(spec)
            }
        } else {
            ecn_models::default_model_path(spec)
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
        let net = self.net.lock().unwrap_or_else(|p| p.into_inner());
        trainer::greedy_or_fallback(&net, &self.template, obs, links)
    }

    /// Settings for queues given their telemetry histories; `None` for a queue with no
    /// usable history yet (the caller's guardrails then fall back to the baseline).
    pub fn propose(&self, queues: &[(BitsPerSec, &QueueHistory)]) -> Vec<Option<EcnSetting>> {
        let tuning = self.tuning();
        let (features, history): (FeatureSet, usize) = (tuning.features, tuning.history);
        let mut obs = Vec::new();
        let mut rows = Vec::new();
        let mut links = Vec::new();
        for (i, (link, h)) in queues.iter().enumerate() {
            if h.observe(features, history, &mut obs) {
                rows.push(i);
                links.push(*link);
            }
        }
        let mut out = vec![None; queues.len()];
        if rows.is_empty() {
            return out;
        }
        for (&i, a) in rows.iter().zip(self.decide(&obs, &links)) {
            out[i] = self.template.setting(a, queues[i].0, &tuning.bounds);
        }
        out
    }
}
