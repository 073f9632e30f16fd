//! The signals that ask a long-running command to stop: SIGINT, SIGTERM and SIGHUP (the
//! terminal went away), watched from the moment a [`StopSignals`] is made. Registered later (on
//! the first poll of a future), a signal that came in between ended the process by its
//! default action, with no clean-up: an actuator SIGTERMed right after its "listening on" line
//! died of it. SIGHUP is a clean stop too: its default action would lose what a stop keeps (a
//! recording, a reverted change); but a SIGHUP ignored when the process started (`nohup`) stays
//! ignored, as the one who started it asked.
//!
//! SIGUSR1 is the controller's kill switch (`run`); sent to every ecn-tuner at once (`pkill
//! -USR1 ecn-tuner`), its default action killed an actuator with a change unconfirmed, no
//! revert. The commands that watch these signals take it and say it does nothing there.

use crate::error::CliError;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::warn;

/// SIGINT, SIGTERM and SIGHUP (unless ignored from the start), and SIGUSR1 to be said no to,
/// registered with the runtime.
pub struct StopSignals {
    int: Signal,
    term: Signal,
    hup: Option<Signal>,
    usr1: Signal,
}

impl StopSignals {
    /// Start watching now (inside a Tokio runtime).
    pub fn watch() -> Result<StopSignals, CliError> {
        let watch = |kind| signal(kind).map_err(|e| CliError::Failed(format!("cannot install a signal handler: {e}")));
        Ok(StopSignals {
            int: watch(SignalKind::interrupt())?,
            term: watch(SignalKind::terminate())?,
            hup: if ignored(libc::SIGHUP) { None } else { Some(watch(SignalKind::hangup())?) },
            usr1: watch(SignalKind::user_defined1())?,
        })
    }

    /// Resolves on the next of the stop signals, naming it (`SIGINT`, `SIGTERM` or `SIGHUP`).
    pub async fn next(&mut self) -> &'static str {
        let hup = async {
            match &mut self.hup {
                Some(hup) => hup.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(hup);
        loop {
            tokio::select! {
                _ = self.int.recv() => return "SIGINT",
                _ = self.term.recv() => return "SIGTERM",
                _ = &mut hup => return "SIGHUP",
                _ = self.usr1.recv() => {
                    warn!("SIGUSR1 does nothing here: it is the kill switch of a controller (`ecn-tuner run`)")
                }
            }
        }
    }
}

/// Whether `sig` is ignored in this process (`SIG_IGN`), as `nohup` leaves SIGHUP.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: with a null new action, sigaction only writes the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}
