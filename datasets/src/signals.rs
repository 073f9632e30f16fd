//! Holding off the signals that end a process while files are put in place.
//!
//! SIGINT, SIGTERM and SIGHUP end a process at once by default, wherever it is: between two
//! renames of files that belong together (new weights beside an old card), or with a
//! temporary file not yet removed. While a [`HeldSignals`] lives, those signals are noted
//! instead of acted on; when the last one is dropped, the previous handling comes back and each
//! signal that came meanwhile is raised again, so the process still ends (or its own handler
//! runs), only once the files are consistent. Holds nest and may be taken from any thread.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// The signals held.
const HELD: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The held signals that arrived, a bit each (in [`HELD`] order).
static PENDING: AtomicU32 = AtomicU32::new(0);

/// Holds alive, and the handling they replaced (taken by the first, put back by the last).
static HOLDS: Mutex<(usize, Option<[libc::sigaction; 3]>)> = Mutex::new((0, None));

extern "C" fn note(signal: libc::c_int) {
    // Only an atomic operation: all a signal handler may safely do here.
    if let Some(i) = HELD.iter().position(|&s| s == signal) {
        PENDING.fetch_or(1 << i, Ordering::SeqCst);
    }
}

/// While alive, SIGINT, SIGTERM and SIGHUP wait (see the module docs).
#[derive(Debug)]
#[must_use = "signals are held only while the value lives"]
pub struct HeldSignals(());

impl HeldSignals {
    /// Hold the signals until this, and every other hold, is dropped.
    pub fn new() -> HeldSignals {
        let mut holds = HOLDS.lock().unwrap_or_else(|e| e.into_inner());
        if holds.0 == 0 {
            let mut previous = [empty_action(); 3];
            // SAFETY: sigaction(2) with valid pointers to initialized structs; `note` only
            // stores to an atomic, which is async-signal-safe.
            unsafe {
                let mut action = empty_action();
                action.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = libc::SA_RESTART;
                for (signal, old) in HELD.iter().zip(previous.iter_mut()) {
                    libc::sigaction(*signal, &action, old);
                }
            }
            holds.1 = Some(previous);
        }
        holds.0 += 1;
        HeldSignals(())
    }
}

impl Default for HeldSignals {
    fn default() -> Self {
        HeldSignals::new()
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        let mut holds = HOLDS.lock().unwrap_or_else(|e| e.into_inner());
        holds.0 -= 1;
        if holds.0 > 0 {
            return;
        }
        if let Some(previous) = holds.1.take() {
            // SAFETY: puts back the actions sigaction(2) returned when the first hold began.
            unsafe {
                for (signal, old) in HELD.iter().zip(previous.iter()) {
                    libc::sigaction(*signal, old, std::ptr::null_mut());
                }
            }
        }
        let pending = PENDING.swap(0, Ordering::SeqCst);
        drop(holds);
        // Every one that came, each to its own handling: one the process ignores (SIGINT in a
        // background job, SIGHUP under nohup) must not stand in for a SIGTERM.
        for (i, &signal) in HELD.iter().enumerate() {
            if pending & (1 << i) != 0 {
                // SAFETY: raise(3) with a valid signal number.
                unsafe {
                    libc::raise(signal);
                }
            }
        }
    }
}

fn empty_action() -> libc::sigaction {
    // SAFETY: sigaction is plain data, valid when zeroed (SIG_DFL, no flags, empty mask).
    unsafe { std::mem::zeroed() }
}
