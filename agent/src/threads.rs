//! Threads this process starts, checked for before they are needed. Rust's and tokio's thread
//! starts panic when the system refuses one (a limit on tasks: systemd's `TasksMax`, a cgroup's
//! `pids.max`, `ulimit -u`), and a tokio runtime whose worker could not start then hung in its
//! own clean-up: an actuator under systemd looked "running" while it served nothing.

use crate::error::CliError;
use std::sync::{Arc, RwLock};

/// Threads a runtime may start beyond its workers before its first request (blocking tasks: a
/// backend's start, a SONiC write): a few, not all a command may start (a margin of 4 refused
/// an actuator that ran under `pids.max` 6).
const RUNTIME_MARGIN: usize = 2;

/// Stack of the threads [`ensure_headroom`] starts: they only wait.
const PROBE_STACK_BYTES: usize = 64 << 10;

/// Whether `n` more threads can run at once: started, then let go. `what` names the need and
/// `fewer` how to need fewer ("" when nothing does).
pub fn ensure_headroom(n: usize, what: &str, fewer: &str) -> Result<(), CliError> {
    let gate = Arc::new(RwLock::new(()));
    let closed = gate.write().expect("a fresh lock");
    let mut started = Vec::with_capacity(n);
    let mut refused = None;
    for _ in 0..n {
        let gate = gate.clone();
        let probe = std::thread::Builder::new().name("thread-probe".into()).stack_size(PROBE_STACK_BYTES);
        match probe.spawn(move || drop(gate.read())) {
            Ok(handle) => started.push(handle),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    drop(closed);
    let running = started.len();
    for handle in started {
        let _ = handle.join();
    }
    match refused {
        None => Ok(()),
        Some(e) => Err(CliError::Failed(format!(
            "cannot start the {n} threads {what} needs (the system refused one after {running}: {e}); this process \
             may start no more threads (a limit on tasks: systemd's TasksMax, a cgroup's pids.max, ulimit -u){fewer}"
        ))),
    }
}

/// A multi-threaded tokio runtime of `workers` worker threads (one per core if `None`), once
/// there is room for them and a few more.
pub fn async_runtime(workers: Option<usize>) -> Result<tokio::runtime::Runtime, CliError> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = workers.unwrap_or(cores);
    ensure_headroom(workers + RUNTIME_MARGIN, "the async runtime", "")?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_for_a_few_threads_is_found_and_they_are_let_go() {
        ensure_headroom(8, "this test", "").expect("8 threads");
        let rt = async_runtime(Some(2)).expect("a runtime");
        assert_eq!(rt.block_on(async { 1 + 1 }), 2);
    }
}
