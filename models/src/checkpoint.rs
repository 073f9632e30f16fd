//! Checkpoints on disk: `NAME.safetensors` holds the weights, `NAME.card.json` beside it
//! holds the [`ModelCard`]. Loading reads and checks the card first, then the weights.

use crate::card::{CardError, ModelCard};
use crate::qnet::QNetwork;
use crate::staged::StagedFiles;
use ecn_datasets::digest::sha256_file;
use std::path::{Path, PathBuf};
use tch::Device;

/// A network with its card.
pub struct Checkpoint {
    /// What the network means.
    pub card: ModelCard,
    /// The network.
    pub net: QNetwork,
}

/// `DIR/STEM.suffix` beside the weights at `DIR/STEM.safetensors`: the card, the training
/// curve, and anything else that belongs to one model.
pub fn sibling(weights: &Path, suffix: &str) -> PathBuf {
    let stem = weights.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    weights.with_file_name(format!("{stem}.{suffix}"))
}

/// Where the card of weights at `weights` lives.
pub fn card_path(weights: &Path) -> PathBuf {
    sibling(weights, "card.json")
}

/// The environment variable that names the folder of the shipped models, for a binary run away
/// from the checkout it was built in.
pub const MODELS_DIR_ENV: &str = "ECN_TUNER_MODELS";

/// The shipped model for `model:NAME` shorthands (`default`, `acc-baseline`): the
/// checkpoints directory of this crate, or `$ECN_TUNER_MODELS` ([`MODELS_DIR_ENV`]) when set.
pub fn default_model_path(name: &str) -> PathBuf {
    let dir = models_dir_from_env().unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("checkpoints"));
    dir.join(format!("{name}.safetensors"))
}

/// The folder `$ECN_TUNER_MODELS` names; `None` when it is unset or empty (`ECN_TUNER_MODELS=`
/// reads as unset, as shells and container files leave it, not as a folder named "").
pub fn models_dir_from_env() -> Option<PathBuf> {
    std::env::var_os(MODELS_DIR_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

impl Checkpoint {
    /// Write weights (safetensors) and card (JSON) side by side, replacing both or neither
    /// (see [`StagedFiles`]).
    pub fn save(&self, weights: &Path) -> Result<(), CardError> {
        let mut staged = StagedFiles::new();
        self.save_staged(weights, &mut staged)?;
        staged.commit().map_err(|e| CardError {
            path: weights.display().to_string(),
            field: "file".into(),
            message: e.to_string(),
        })
    }

    /// Write weights and card under temporary names in `staged`, to be moved into place with
    /// the other files of the same model when `staged` commits.
    pub fn save_staged(&self, weights: &Path, staged: &mut StagedFiles) -> Result<(), CardError> {
        let io =
            |field: &str, e: String| CardError { path: weights.display().to_string(), field: field.into(), message: e };
        if let Some(dir) = weights.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io("directory", e.to_string()))?;
        }
        if weights.extension().is_none_or(|e| e != "safetensors") {
            return Err(io("path", "a model path must end in .safetensors".into()));
        }
        let mut digest = None;
        staged
            .write(weights, |p| {
                self.net.var_store().save(p).map_err(|e| e.to_string())?;
                digest = Some(sha256_file(p).map_err(|e| e.to_string())?);
                Ok::<(), String>(())
            })
            .map_err(|e| io("weights", e))?;
        let card = ModelCard { weights_sha256: digest, ..self.card.clone() };
        let card = serde_json::to_string_pretty(&card).map_err(|e| io("card", e.to_string()))?;
        staged.write(&card_path(weights), |p| std::fs::write(p, card + "\n")).map_err(|e| io("card", e))
    }

    /// Read and check the card beside `weights`, then load the weights onto `device`.
    pub fn load(weights: &Path, device: Device) -> Result<Checkpoint, CardError> {
        let card_file = card_path(weights);
        let card_name = card_file.display().to_string();
        let err =
            |path: &str, field: &str, message: String| CardError { path: path.into(), field: field.into(), message };
        // A card is a few KiB; 16 MiB bounds what a wrong path can make this read.
        let text = ecn_datasets::bounded::read_text_at_most(&card_file, 16 << 20)
            .map_err(|e| err(&card_name, "file", format!("{e} (every model needs its card beside the weights)")))?;
        let card = ModelCard::parse(&text, &card_name)?;
        card.check(&card_name)?;
        let weights_name = weights.display().to_string();
        match std::fs::metadata(weights) {
            Ok(m) if m.is_file() => {}
            Ok(m) if m.is_dir() => return Err(err(&weights_name, "file", "is a directory, not a weights file".into())),
            Ok(_) => return Err(err(&weights_name, "file", "not a regular file (a device or a pipe?)".into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(err(&weights_name, "file", "no such file".into()))
            }
            // A link loop, a name too long, a folder that may not be entered: said as it is.
            Err(e) => return Err(err(&weights_name, "file", e.to_string())),
        }
        if let Some(recorded) = &card.weights_sha256 {
            let found = sha256_file(weights).map_err(|e| err(&weights_name, "file", e.to_string()))?;
            if !found.eq_ignore_ascii_case(recorded) {
                return Err(err(
                    &weights_name,
                    "weights",
                    format!(
                        "SHA-256 {found}, but its card ({card_name}) records {recorded}: these are not the weights the \
                         card describes (another model's, or corrupted); keep each model's weights and card together"
                    ),
                ));
            }
        }
        let net = QNetwork::new(device, card.network.obs_dim, &card.network.hidden, card.network.actions);
        // libtorch reports malformed files as errors, never as panics across the FFI boundary,
        // but be defensive: a corrupt user file must not abort us.
        let read = std::panic::catch_unwind(|| tch::Tensor::read_safetensors(weights));
        let stored = match read {
            Ok(Ok(stored)) => stored,
            Ok(Err(e)) => {
                return Err(err(&weights_name, "weights", format!("{} (is this a safetensors file?)", first_line(&e))))
            }
            Err(_) => return Err(err(&weights_name, "weights", "unreadable safetensors file".into())),
        };
        // A copy broadcasts and converts: a [1, 64] output layer would load into [54, 64] and
        // give every action the same value, and double-precision weights would turn the network
        // into one no observation fits. Only the exact tensors the card describes may load.
        let doubt =
            |message: String| err(&weights_name, "weights", format!("{message} (do the weights belong to this card?)"));
        fits(&net, &stored).map_err(doubt)?;
        // A network with a NaN or infinite weight outputs no usable Q-value anywhere.
        if let Some((name, _)) = stored.iter().find(|(_, t)| !bool::try_from(t.isfinite().all()).unwrap_or(false)) {
            return Err(err(&weights_name, "weights", format!("tensor {name} is not finite")));
        }
        // The tensors read above, copied into the network's own (on `device`): the file is read once.
        let mut vars = net.var_store().variables();
        for (name, tensor) in &stored {
            let var = vars.get_mut(name).expect("fits checked every name");
            tch::no_grad(|| var.f_copy_(tensor)).map_err(|e| doubt(first_line(&e)))?;
        }
        Ok(Checkpoint { card, net })
    }
}

/// Whether `stored` holds exactly the tensors of `net`, by name, shape and element type.
fn fits(net: &QNetwork, stored: &[(String, tch::Tensor)]) -> Result<(), String> {
    let wanted = net.var_store().variables();
    for (name, tensor) in stored {
        let Some(want) = wanted.get(name) else {
            return Err(format!("tensor {name} is not part of a network with this card's shape"));
        };
        if tensor.size() != want.size() {
            return Err(format!("tensor {name} is {:?}; the card's network has {:?}", tensor.size(), want.size()));
        }
        if tensor.kind() != want.kind() {
            return Err(format!("tensor {name} holds {:?}; the network holds {:?}", tensor.kind(), want.kind()));
        }
    }
    let mut missing: Vec<&String> =
        wanted.keys().filter(|name| !stored.iter().any(|(stored_name, _)| stored_name == *name)).collect();
    missing.sort();
    match missing.first() {
        Some(name) => Err(format!("tensor {name} is missing")),
        None => Ok(()),
    }
}

/// What libtorch says went wrong: it appends its C++ backtrace to the message.
fn first_line(e: &tch::TchError) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}
