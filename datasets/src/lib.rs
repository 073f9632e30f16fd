//! Data contracts of ecn-tuner: the per-queue telemetry sample, the per-flow record, and the
//! built-in flow-size distributions.
//!
//! The types here are plain structs so that the simulator can produce them without pulling in
//! a dataframe library. Reading and writing them (Parquet, CSV, the HPCC FCT text format) lives
//! behind the `io` feature; [`signals`] holds off Ctrl-C while written files are put in place.

pub mod bounded;
pub mod counters;
pub mod digest;
pub mod records;
pub mod signals;
pub mod workloads;

#[cfg(feature = "io")]
pub mod decoding;
#[cfg(feature = "io")]
pub mod io;
#[cfg(feature = "io")]
pub mod telemetry;

pub use records::{FlowRecord, QueueSample, TelemetrySample, TELEMETRY_SCHEMA_VERSION};
