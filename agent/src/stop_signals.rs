//! The signals that ask a long-running command to stop: SIGINT, SIGTERM and SIGHUP (the
//! terminal went away), watched from the moment a [`StopSignals`] is made. Registered later (on
//! the first poll of a future), a signal that came in between ended the process by its
//! default action, with no clean-up: an actuator SIGTERMed right after its "listening on" line
//! died of it. SIGHUP is a clean stop too: its default action would lose what a stop keeps (a
//! recording, a reverted change).

use crate::error::CliError;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// SIGINT, SIGTERM and SIGHUP, registered with the runtime.
pub struct StopSignals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl StopSignals {
    /// Start watching now (inside a Tokio runtime).
    pub fn watch() -> Result<StopSignals, CliError> {
        let watch = |kind| signal(kind).map_err(|e| CliError::Failed(format!("cannot install a signal handler: {e}")));
        Ok(StopSignals {
            int: watch(SignalKind::interrupt())?,
            term: watch(SignalKind::terminate())?,
            hup: watch(SignalKind::hangup())?,
        })
    }

    /// Resolves on the next of them, naming it (`SIGINT`, `SIGTERM` or `SIGHUP`).
    pub async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}
