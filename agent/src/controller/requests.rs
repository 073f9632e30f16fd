//! Requests from outside the control loops: stop (SIGINT, SIGTERM, or another target's loop
//! failing) and the kill switch (SIGUSR1).
//!
//! The signal handlers are installed once per process, before any loop starts, and every
//! request is held in a watch channel. A loop that is busy when a request arrives (mid-apply,
//! in a health check, still connecting) sees it at its next wait. A listener created per wait,
//! as `tokio::signal::ctrl_c()` in a `select!` would be, misses a signal that arrives between
//! two waits.

use crate::error::CliError;
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// Why the control loops are asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// SIGINT.
    Interrupted,
    /// SIGTERM.
    Terminated,
    /// Another target's loop failed; this one stops cleanly instead of being abandoned.
    PeerFailed,
}

/// The sending side, held by [`super::run_all`] and by the signal task.
#[derive(Clone)]
pub struct Requester {
    stop: Arc<watch::Sender<Option<StopReason>>>,
    kill: Arc<watch::Sender<bool>>,
}

/// One loop's view of the requests. Each loop gets its own clone; a request made before a loop
/// first waits is still seen.
#[derive(Clone)]
pub struct Requests {
    /// Stop requests.
    pub stop: StopRequests,
    /// The kill switch.
    pub kill: KillSwitch,
}

/// The receiving end of stop requests.
#[derive(Clone)]
pub struct StopRequests(watch::Receiver<Option<StopReason>>);

/// The receiving end of the kill switch.
#[derive(Clone)]
pub struct KillSwitch(watch::Receiver<bool>);

/// A pair of ends with no request made yet.
pub fn channel() -> (Requester, Requests) {
    let (stop_tx, stop) = watch::channel(None);
    let (kill_tx, kill) = watch::channel(false);
    let requests = Requests { stop: StopRequests(stop), kill: KillSwitch(kill) };
    (Requester { stop: Arc::new(stop_tx), kill: Arc::new(kill_tx) }, requests)
}

impl Requester {
    /// Ask every loop to stop; the first reason given is the one kept.
    pub fn stop(&self, why: StopReason) {
        self.stop.send_if_modified(|r| {
            let first = r.is_none();
            r.get_or_insert(why);
            first
        });
    }

    /// Install the SIGINT, SIGTERM and SIGUSR1 handlers now, and turn each signal into a
    /// request from then on; a second SIGINT or SIGTERM exits the process at once (130 or 143).
    /// Must be called inside the runtime.
    pub fn listen_for_signals(&self) -> Result<(), CliError> {
        let install =
            |kind| signal(kind).map_err(|e| CliError::Failed(format!("cannot install a signal handler: {e}")));
        let (mut int, mut term, mut usr1) = (
            install(SignalKind::interrupt())?,
            install(SignalKind::terminate())?,
            install(SignalKind::user_defined1())?,
        );
        let me = self.clone();
        tokio::spawn(async move {
            let mut asked = false;
            loop {
                let (why, name, code) = tokio::select! {
                    _ = int.recv() => (StopReason::Interrupted, "SIGINT", 130),
                    _ = term.recv() => (StopReason::Terminated, "SIGTERM", 143),
                    _ = usr1.recv() => { me.kill.send_replace(true); continue; }
                };
                // A clean stop can take a while (a rollback, a slow actuator, the comparison
                // runs of `--target sim`); a second signal is someone who will not wait. What
                // it leaves unconfirmed, the actuator reverts at the confirm deadline.
                if asked {
                    tracing::error!("second stop signal ({name}): exiting without cleaning up");
                    crate::output::flush_logs(std::time::Duration::from_millis(200));
                    std::process::exit(code);
                }
                asked = true;
                tracing::info!("{name}: stopping cleanly; a second signal exits at once");
                me.stop(why);
            }
        });
        Ok(())
    }
}

impl StopRequests {
    /// Whether a stop has been asked for, now.
    pub fn is_requested(&self) -> bool {
        self.0.borrow().is_some()
    }

    /// Wait for a stop request; returns its reason. Pending for ever once every sender is gone.
    pub async fn stopped(&mut self) -> StopReason {
        let why = self.0.wait_for(Option::is_some).await.ok().and_then(|r| *r);
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }
}

impl KillSwitch {
    /// Whether SIGUSR1 has thrown it, now.
    pub fn is_thrown(&self) -> bool {
        *self.0.borrow()
    }

    /// Wait for the kill switch to be thrown (at once if it already was, so a loop waits on it
    /// only until it has acted on it). Pending for ever once every sender is gone.
    pub async fn thrown(&mut self) {
        if self.0.wait_for(|k| *k).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_made_before_a_loop_waits_is_seen_and_the_first_reason_stands() {
        let (tx, rx) = channel();
        let mut late = rx.stop.clone();
        tx.stop(StopReason::PeerFailed);
        tx.stop(StopReason::Terminated);
        assert_eq!(late.stopped().await, StopReason::PeerFailed);
        let mut other = rx.stop.clone();
        assert_eq!(other.stopped().await, StopReason::PeerFailed);
    }

    #[tokio::test]
    async fn the_kill_switch_stays_thrown() {
        let (tx, mut rx) = channel();
        tx.kill.send_replace(true);
        rx.kill.thrown().await;
        rx.kill.thrown().await; // still thrown: a loop that already acted on it sees it again
    }
}
