//! The model card: a JSON file beside the weights that says what the network means
//! (PRODUCT.md "Data contracts"). A card that does not match this build is refused, because
//! a network fed other features or read with another action template makes decisions that
//! look valid and are not.

use ecn_env::tuning::{ActionTemplate, TuningConfig, OBSERVATION_SCHEMA};
use ecn_env::EcnSetting;
use serde::{Deserialize, Serialize};

/// The card format this build reads and writes.
pub const CARD_FORMAT: &str = "ecn-tuner/model-card-v1";

/// The network's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// Architecture: `mlp-q` (an MLP with ReLU, one Q-value per action).
    pub kind: String,
    /// Input length.
    pub obs_dim: usize,
    /// Hidden layer widths.
    pub hidden: Vec<usize>,
    /// Output length.
    pub actions: usize,
}

/// How the model was trained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingRecord {
    /// `ddqn` (online, in the simulator) or another algorithm name.
    pub algorithm: String,
    /// What it was trained on: scenario names or the training distribution.
    pub scenarios: Vec<String>,
    /// The training seed.
    pub seed: u64,
    /// Environment steps taken (decisions per agent-set).
    pub env_steps: u64,
    /// Gradient updates.
    pub updates: u64,
    /// Wall-clock time.
    pub wall_seconds: f64,
    /// Every other knob (learning rate, γ, ε schedule…).
    pub hyperparameters: serde_json::Value,
    /// Files the model was trained from, for offline training: path, hash and row count.
    #[serde(default)]
    pub data: Vec<serde_json::Value>,
}

/// The JSON model card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// Always [`CARD_FORMAT`].
    pub format: String,
    /// A short name, e.g. `default`.
    pub name: String,
    /// The ecn-tuner version that wrote it.
    pub crate_version: String,
    /// The observation schema version ([`OBSERVATION_SCHEMA`]).
    pub observation_schema: String,
    /// Feature names, in input order.
    pub observation_features: Vec<String>,
    /// The MDP: features, history, template, reward weights, bounds, control interval.
    pub tuning: TuningConfig,
    /// The action template at 100 Gb/s, spelled out.
    pub action_template: Vec<EcnSetting>,
    /// The network.
    pub network: NetworkSpec,
    /// Training provenance.
    pub training: TrainingRecord,
    /// Evaluation results recorded at training time.
    #[serde(default)]
    pub evaluation: serde_json::Value,
}

/// Why a card cannot be used with this build.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("model card {path}: {field}: {message}")]
pub struct CardError {
    /// The card file.
    pub path: String,
    /// The offending field.
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl ModelCard {
    /// A card for a network trained on `tuning`.
    pub fn new(name: &str, tuning: TuningConfig, hidden: Vec<usize>, training: TrainingRecord) -> Self {
        let template = ActionTemplate::new(tuning.template);
        ModelCard {
            format: CARD_FORMAT.into(),
            name: name.into(),
            crate_version: env!("CARGO_PKG_VERSION").into(),
            observation_schema: OBSERVATION_SCHEMA.into(),
            observation_features: tuning.features.names(tuning.history),
            action_template: template.settings().to_vec(),
            network: NetworkSpec {
                kind: "mlp-q".into(),
                obs_dim: tuning.observation_dim(),
                hidden,
                actions: template.len(),
            },
            tuning,
            training,
            evaluation: serde_json::Value::Null,
        }
    }

    /// Check that this build computes the features and reads the actions this card
    /// describes.
    pub fn check(&self, path: &str) -> Result<(), CardError> {
        let fail = |field: &str, message: String| Err(CardError { path: path.into(), field: field.into(), message });
        let retrain = "retrain the model with this ecn-tuner, or run the ecn-tuner version that wrote it";
        if self.format != CARD_FORMAT {
            return fail("format", format!("'{}' is not '{CARD_FORMAT}'", self.format));
        }
        if self.observation_schema != OBSERVATION_SCHEMA {
            return fail(
                "observation_schema",
                format!(
                    "the model expects '{}' but this build computes '{OBSERVATION_SCHEMA}'; {retrain}",
                    self.observation_schema
                ),
            );
        }
        if self.observation_features != self.tuning.features.names(self.tuning.history) {
            return fail("observation_features", format!("they differ from what this build computes; {retrain}"));
        }
        if self.network.kind != "mlp-q" {
            return fail(
                "network.kind",
                format!("'{}' is not a network this build can run (mlp-q)", self.network.kind),
            );
        }
        if self.network.obs_dim != self.tuning.observation_dim() {
            return fail(
                "network.obs_dim",
                format!("{} inputs, but the features make {}", self.network.obs_dim, self.tuning.observation_dim()),
            );
        }
        let template = ActionTemplate::new(self.tuning.template);
        if self.action_template != template.settings() {
            return fail(
                "action_template",
                format!("it differs from this build's {:?} template; {retrain}", self.tuning.template),
            );
        }
        if self.network.actions != template.len() {
            return fail(
                "network.actions",
                format!("{} outputs for {} template actions", self.network.actions, template.len()),
            );
        }
        if self.network.hidden.is_empty() || self.network.hidden.iter().any(|&h| h == 0 || h > 4096) {
            return fail("network.hidden", format!("{:?} is not a usable layer list", self.network.hidden));
        }
        if self.tuning.control_interval.0 == 0 {
            return fail("tuning.control_interval", "must be greater than 0".into());
        }
        Ok(())
    }
}
