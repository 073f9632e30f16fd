//! # ecn-models
//!
//! The networks of ecn-tuner and their checkpoint format.
//!
//! - [`qnet`]: the Q-network, a small MLP from one queue's observation to one value per
//!   template action, on CPU or CUDA.
//! - [`card`]: the JSON model card that sits beside the weights (PRODUCT.md "Data
//!   contracts") and the checks that a card matches this build.
//! - [`checkpoint`]: save and load, safetensors weights plus card.
//! - [`cuda`]: libtorch's CUDA library, loaded at run time and only where a GPU may be.
//! - [`staged`]: files that belong together, replaced all at once or not at all.
//! - [`arithmetic`]: libtorch's CPU arithmetic, and pinning it so that training reproduces on
//!   other CPUs.
//!
//! Networks run wherever libtorch can: [`default_device`] picks CUDA when present.

pub mod arithmetic;
pub mod card;
pub mod checkpoint;
pub mod cuda;
pub mod qnet;
pub mod staged;

pub use card::{Calibration, CardError, ModelCard, NetworkSpec, TrainingRecord};
pub use checkpoint::{default_model_path, models_dir_from_env, Checkpoint, MODELS_DIR_ENV};
pub use qnet::{greedy, QNetwork};

/// CUDA if libtorch sees a GPU ([`cuda::available`]), else the CPU.
pub fn default_device() -> tch::Device {
    if cuda::available() {
        tch::Device::Cuda(0)
    } else {
        tch::Device::Cpu
    }
}
