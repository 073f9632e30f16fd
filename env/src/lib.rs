//! # ecn-env
//!
//! The environments of ecn-tuner. Today: a packet-level RoCEv2 fabric simulator with DCQCN at
//! the NICs, PFC and a shared buffer at the switches, and RED-style ECN marking per egress
//! queue (REFERENCE.md §1–3); the scenarios and workloads that drive it (§4); and the static
//! ECN baselines (§5).
//!
//! The simulator depends on no ML crate: it builds and tests without libtorch.

pub mod dcqcn;
pub mod ecn;
pub mod fabric;
pub mod rng;
pub mod scenario;
pub mod summary;
mod text;
pub mod topology;
pub mod tuning;
pub mod units;
pub mod workload;

pub use ecn::{Baseline, EcnSetting};
pub use fabric::{FabricConfig, Simulator};
pub use units::{BitsPerSec, Bytes, Nanos};
