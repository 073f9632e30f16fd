//! # ecn-proto
//!
//! The gRPC contract between the ecn-tuner controller and actuators, package `ecn_tuner.v1`
//! (`proto/ecn_tuner/v1/actuator.proto`). Generated with tonic; both the client
//! (`actuator_client::ActuatorClient`) and the server trait (`actuator_server::Actuator`) are
//! here.

/// Version 1 of the contract.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("ecn_tuner.v1");

    /// `switch/port/queue`, as logs, journals and error messages name a queue.
    impl std::fmt::Display for QueueId {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}/{}/{}", self.switch, self.port, self.queue)
        }
    }
}
