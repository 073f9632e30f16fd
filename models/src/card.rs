//! The model card: a JSON file beside the weights that says what the network means
//! (PRODUCT.md "Data contracts"). A card that does not match this build is refused, because
//! a network fed other features or read with another action template makes decisions that
//! look valid and are not.

use ecn_env::fabric::MIN_INTERVAL;
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

/// The widest hidden layer a card may declare.
pub const MAX_LAYER_WIDTH: usize = 4096;

/// The most hidden layers a card may declare: with [`MAX_LAYER_WIDTH`], a network of about
/// 0.5 GB, where an unbounded list (a hand-edited card) would exhaust memory as it is built.
pub const MAX_HIDDEN_LAYERS: usize = 8;

/// The most intervals of history a card may declare: its feature names, built to compare, grow
/// with it (the shipped models use 3).
pub const MAX_HISTORY: usize = 64;

/// The smallest Q-value noise (TD-error scale) a card may give: real training leaves TD errors
/// orders of magnitude above it (the shipped models': 0.15 to 0.97), and below it every
/// recommendation's confidence would be 1.
pub const MIN_Q_NOISE: f64 = 1e-6;

impl NetworkSpec {
    /// Whether `hidden` is a layer list a network can be built from: 1 to
    /// [`MAX_HIDDEN_LAYERS`] layers, each 1 to [`MAX_LAYER_WIDTH`] wide.
    pub fn usable_hidden(hidden: &[usize]) -> bool {
        (1..=MAX_HIDDEN_LAYERS).contains(&hidden.len()) && hidden.iter().all(|&h| (1..=MAX_LAYER_WIDTH).contains(&h))
    }
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
    /// Line rates, in bits per second, of the ports whose queues it trained on (empty when not
    /// recorded). The features read the same at any rate, but a policy's settings need not
    /// suit a rate it never saw (README "Scenarios it was not trained on").
    #[serde(default)]
    pub link_speeds_bps: Vec<u64>,
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
    /// The commit of the ecn-tuner source whose build wrote it (`git rev-parse HEAD` when it
    /// was built; uncommitted changes on top of it are not recorded). Absent in cards written
    /// before it existed, and by builds from outside a git checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_commit: Option<String>,
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
    /// SHA-256 (hex) of the weights file beside the card, written with it: loading refuses
    /// weights that are not the ones this card describes (swapped, or corrupted). Absent in
    /// cards written before it existed, which load unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_sha256: Option<String>,
    /// Training provenance.
    pub training: TrainingRecord,
    /// Evaluation results recorded at training time.
    #[serde(default)]
    pub evaluation: serde_json::Value,
    /// What the training data looked like and how noisy the Q-values are, so that
    /// `recommend` can tell an unfamiliar situation and an unsure model from a confident one.
    /// Absent in cards written before it existed; `recommend` then refuses to change anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
}

/// The training distribution of the observations, feature by feature, and the Q-value noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Observations the statistics come from.
    pub samples: u64,
    /// Per-feature mean, in input order.
    pub mean: Vec<f32>,
    /// Per-feature standard deviation.
    pub std: Vec<f32>,
    /// Per-feature 0.1st percentile: below it, a value is rarer than 1 in 1000 in training.
    pub low: Vec<f32>,
    /// Per-feature 99.9th percentile.
    pub high: Vec<f32>,
    /// Root-mean-square temporal-difference error of the shipped network on training
    /// transitions.
    pub td_error_rms: f64,
    /// A robust scale of the same errors (1.4826 × their median absolute value, the standard
    /// deviation if they were Gaussian): how far apart two Q-values must be before their order
    /// means something. The RMS is dominated by the rare transitions with pauses or drops,
    /// whose rewards are large, and would make every gap look like noise.
    #[serde(default)]
    pub td_error_scale: f64,
}

impl Calibration {
    /// Statistics of `obs` (row-major, `dim` features per row) and of `td_errors`, the TD
    /// errors of the shipped network on a sample of transitions (the trainer measures the
    /// selected network when it selects it, against the targets it was trained on then).
    pub fn of(obs: &[f32], dim: usize, td_errors: &[f32]) -> Calibration {
        let finite: Vec<f64> = td_errors.iter().filter(|e| e.is_finite()).map(|&e| e as f64).collect();
        let td_error_rms = (finite.iter().map(|e| e * e).sum::<f64>() / finite.len().max(1) as f64).sqrt();
        let mut abs: Vec<f64> = finite.iter().map(|e| e.abs()).collect();
        abs.sort_by(f64::total_cmp);
        let td_error_scale = abs.get(abs.len() / 2).map_or(0.0, |m| 1.4826 * m);
        let rows = obs.len().checked_div(dim).unwrap_or(0);
        let mut mean = vec![0f32; dim];
        let mut std = vec![0f32; dim];
        let mut low = vec![0f32; dim];
        let mut high = vec![0f32; dim];
        let mut column = Vec::with_capacity(rows);
        for f in 0..dim {
            column.clear();
            column.extend((0..rows).map(|r| obs[r * dim + f]).filter(|v| v.is_finite()));
            if column.is_empty() {
                continue;
            }
            column.sort_by(f32::total_cmp);
            let n = column.len() as f64;
            let m = column.iter().map(|&v| v as f64).sum::<f64>() / n;
            let var = column.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / n;
            let pick = |q: f64| column[((q * (n - 1.0)).round() as usize).min(column.len() - 1)];
            mean[f] = m as f32;
            std[f] = var.sqrt() as f32;
            low[f] = pick(0.001);
            high[f] = pick(0.999);
        }
        Calibration { samples: rows as u64, mean, std, low, high, td_error_rms, td_error_scale }
    }

    /// The Q-value noise that confidence is measured in: the robust scale, or the RMS for
    /// cards written before the scale existed.
    pub fn q_noise(&self) -> f64 {
        if self.td_error_scale > 0.0 {
            self.td_error_scale
        } else {
            self.td_error_rms
        }
    }

    /// The features of `row` that lie outside the training range by more than `margin`
    /// standard deviations (at least `margin` × 0.05 absolute, for features that hardly
    /// varied in training): (index, value, low, high).
    pub fn out_of_range(&self, row: &[f32], margin: f32) -> Vec<(usize, f32, f32, f32)> {
        row.iter()
            .enumerate()
            .filter_map(|(i, &v)| {
                let (lo, hi) = (*self.low.get(i)?, *self.high.get(i)?);
                let slack = margin * self.std.get(i).copied().unwrap_or(0.0).max(0.05);
                (!v.is_finite() || v < lo - slack || v > hi + slack).then_some((i, v, lo, hi))
            })
            .collect()
    }
}

/// What to do with a card this build cannot use.
const RETRAIN: &str = "retrain the model with this ecn-tuner, or run the ecn-tuner version that wrote it";

/// Why a card cannot be used with this build.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {field}: {message}")]
pub struct CardError {
    /// The card file (`*.card.json`), or the weights file when they are what is wrong.
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
            source_commit: option_env!("ECN_TUNER_SOURCE_COMMIT").map(String::from),
            observation_schema: OBSERVATION_SCHEMA.into(),
            observation_features: tuning.features.names(tuning.history),
            action_template: template.settings().to_vec(),
            network: NetworkSpec {
                kind: "mlp-q".into(),
                obs_dim: tuning.observation_dim(),
                hidden,
                actions: template.len(),
            },
            weights_sha256: None,
            tuning,
            training,
            evaluation: serde_json::Value::Null,
            calibration: None,
        }
    }

    /// Read a card from its JSON `text` (the file `path`). An error names the field it is
    /// about (`tuning.features`, `training`), and where the JSON is well formed but not this
    /// build's card (a variant, a field, a type it does not know) says what to do.
    pub fn parse(text: &str, path: &str) -> Result<ModelCard, CardError> {
        let (card, unread) = Self::parse_noting_unread(text, path)?;
        // A field this build does not know is most likely a newer version's: the card still
        // loads (what it describes is checked field by field), but not without a word.
        for field in unread {
            tracing::warn!("{path}: {field}: not a field this build reads; ignored (a card from a newer version?)");
        }
        Ok(card)
    }

    /// [`Self::parse`], and the paths of the fields it did not read.
    fn parse_noting_unread(text: &str, path: &str) -> Result<(ModelCard, Vec<String>), CardError> {
        let fail = |field: String, message: String| CardError { path: path.into(), field, message };
        // A card edited in a Windows editor may start with a byte-order mark, which JSON has not.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut json = serde_json::Deserializer::from_str(text);
        let mut unread = Vec::new();
        let mut note_unread = |field: serde_ignored::Path| unread.push(field.to_string());
        let fields = serde_ignored::Deserializer::new(&mut json, &mut note_unread);
        let card = serde_path_to_error::deserialize(fields).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.into_inner();
            // A card of another version is an object; anything else is no card at all.
            let an_object = || serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object());
            match inner.classify() {
                serde_json::error::Category::Data if field != "." => fail(field, format!("{inner}; {RETRAIN}")),
                serde_json::error::Category::Data if an_object() => fail("card".into(), format!("{inner}; {RETRAIN}")),
                serde_json::error::Category::Data => fail("card".into(), format!("not a model card: {inner}")),
                // The path of a syntax error is where parsing stopped, not a field.
                _ => fail("card".into(), format!("not valid JSON: {inner}")),
            }
        })?;
        // Whatever follows the card (a second one pasted after it) is an error, as it was.
        json.end().map_err(|e| fail("card".into(), format!("not valid JSON: {e}")))?;
        Ok((card, unread))
    }

    /// Check that this build computes the features and reads the actions this card
    /// describes.
    pub fn check(&self, path: &str) -> Result<(), CardError> {
        let fail = |field: &str, message: String| Err(CardError { path: path.into(), field: field.into(), message });
        let retrain = RETRAIN;
        if self.format != CARD_FORMAT {
            return fail("format", format!("'{}' is not '{CARD_FORMAT}'; {retrain}", self.format));
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
        if !(1..=MAX_HISTORY).contains(&self.tuning.history) {
            return fail("tuning.history", format!("{} intervals; must be 1 to {MAX_HISTORY}", self.tuning.history));
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
        if !NetworkSpec::usable_hidden(&self.network.hidden) {
            return fail("network.hidden", format!("{:?} is not a usable layer list", self.network.hidden));
        }
        // Q-values are sums discounted by it: outside [0, 1) every expected gain is meaningless.
        if let Some(gamma) = self.training.hyperparameters.pointer("/ddqn/gamma") {
            if !gamma.as_f64().is_some_and(|g| (0.0..1.0).contains(&g)) {
                return fail("training.hyperparameters.ddqn.gamma", format!("{gamma} must be a number in [0, 1)"));
            }
        }
        if self.tuning.control_interval < MIN_INTERVAL {
            return fail("tuning.control_interval", format!("must be at least {MIN_INTERVAL}"));
        }
        if let Err(why) = self.tuning.bounds.check() {
            return fail("tuning.bounds", why);
        }
        if let Err(why) = self.tuning.reward.check() {
            return fail("tuning.reward", why);
        }
        // `sim`, `run` and `recommend` judge a port's speed against these.
        if self.training.link_speeds_bps.contains(&0) {
            return fail("training.link_speeds_bps", "a link speed of 0 b/s".into());
        }
        if let Some(c) = &self.calibration {
            let dim = self.network.obs_dim;
            if [c.mean.len(), c.std.len(), c.low.len(), c.high.len()].iter().any(|&l| l != dim) {
                return fail("calibration", format!("its statistics do not have {dim} features"));
            }
            // `recommend` judges confidence and novelty by these; a damaged card must not
            // pass for a sure one.
            for (name, values) in [("mean", &c.mean), ("std", &c.std), ("low", &c.low), ("high", &c.high)] {
                if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                    return fail(&format!("calibration.{name}"), format!("feature {i} is {}", values[i]));
                }
            }
            if let Some(i) = c.std.iter().position(|v| *v < 0.0) {
                return fail("calibration.std", format!("feature {i} is {}, below 0", c.std[i]));
            }
            if let Some(i) = (0..dim).find(|&i| c.low[i] > c.high[i]) {
                return fail("calibration.low", format!("feature {i}: {} is above high {}", c.low[i], c.high[i]));
            }
            for (name, v) in [("td_error_rms", c.td_error_rms), ("td_error_scale", c.td_error_scale)] {
                if !(v.is_finite() && v >= 0.0) {
                    return fail(&format!("calibration.{name}"), format!("{v} must be finite and 0 or more"));
                }
            }
            // Confidence is a Q-value gap in units of this noise: near 0 every gap is certain.
            if c.q_noise() < MIN_Q_NOISE {
                return fail(
                    "calibration.td_error_scale",
                    format!(
                        "{} (td_error_rms {}): no training yields TD errors below {MIN_Q_NOISE:e}, and every \
                         recommendation would read as certain",
                        c.td_error_scale, c.td_error_rms
                    ),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A card records the commit of the source it was built from, where that is a git
    /// checkout (as the tests' is), and follows HEAD as it moves.
    #[test]
    fn a_card_names_the_commit_it_was_built_from() {
        let git = |arg: &str| {
            std::process::Command::new("git")
                .args(["rev-parse", arg])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string())
        };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap();
        let ours =
            git("--show-toplevel").is_some_and(|t| std::path::Path::new(&t).canonicalize().ok() == Some(root.clone()));
        let (Some(head), true) = (git("HEAD"), ours) else {
            return eprintln!("not ecn-tuner's own git checkout: nothing to compare with");
        };
        let training = TrainingRecord {
            algorithm: "ddqn".into(),
            scenarios: vec![],
            seed: 1,
            env_steps: 0,
            updates: 0,
            wall_seconds: 0.0,
            hyperparameters: serde_json::Value::Null,
            data: vec![],
            link_speeds_bps: vec![],
        };
        let card = ModelCard::new("t", TuningConfig::default(), vec![4], training);
        assert_eq!(card.source_commit.as_deref(), Some(head.as_str()));
    }

    /// A field the card's writer added and this build does not know is named (it is warned
    /// of), and the card still reads as it did without it.
    #[test]
    fn fields_this_build_does_not_read_are_named() {
        let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/checkpoints");
        for entry in std::fs::read_dir(shipped).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".card.json") {
                let text = std::fs::read_to_string(&path).unwrap();
                let (_, unread) = ModelCard::parse_noting_unread(&text, "shipped").unwrap();
                assert!(unread.is_empty(), "{path:?} is read whole: {unread:?}");
            }
        }
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/checkpoints/default.card.json");
        let text = std::fs::read_to_string(path).unwrap();
        let card = ModelCard::parse(&text, path).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["trained_at"] = "2026-12-06".into();
        v["network"]["activation"] = "gelu".into();
        let (with_extra, unread) = ModelCard::parse_noting_unread(&v.to_string(), path).unwrap();
        assert_eq!(unread, ["network.activation", "trained_at"]);
        assert_eq!(serde_json::to_value(&with_extra).unwrap(), serde_json::to_value(&card).unwrap());
    }
}
