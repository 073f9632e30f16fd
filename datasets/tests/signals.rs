//! `HeldSignals` changes how the whole process handles signals, so it is tested alone, in a
//! process of its own where no other test holds them at the same time.

use ecn_datasets::signals::HeldSignals;
use std::sync::atomic::{AtomicI32, Ordering};

static SEEN: AtomicI32 = AtomicI32::new(0);

extern "C" fn seen(signal: libc::c_int) {
    SEEN.store(signal, Ordering::SeqCst);
}

fn raise(signal: libc::c_int) {
    // SAFETY: raise(3) with a valid signal number; the handler runs before it returns.
    unsafe { libc::raise(signal) };
}

/// A signal that comes during a hold reaches the process's own handling only when the last
/// hold ends, and that handling is back in place then.
#[test]
fn a_signal_waits_for_the_last_hold() {
    // SAFETY: sigaction(2) with initialized structs; the handler only stores to an atomic.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = seen as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGHUP, &action, std::ptr::null_mut());
    }
    let outer = HeldSignals::new();
    let inner = HeldSignals::new();
    raise(libc::SIGHUP);
    drop(inner);
    assert_eq!(SEEN.load(Ordering::SeqCst), 0, "held by the outer hold");
    drop(outer);
    assert_eq!(SEEN.load(Ordering::SeqCst), libc::SIGHUP, "raised again once the holds ended");
    SEEN.store(0, Ordering::SeqCst);
    raise(libc::SIGHUP);
    assert_eq!(SEEN.load(Ordering::SeqCst), libc::SIGHUP, "the process's own handler is back");

    // Two signals held: each reaches its own handling, an ignored one not standing in for the
    // other (only the last used to be raised).
    // SAFETY: as above; SIGINT ignored, as in a background job.
    unsafe {
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        libc::sigaction(libc::SIGINT, &ignore, std::ptr::null_mut());
    }
    SEEN.store(0, Ordering::SeqCst);
    let held = HeldSignals::new();
    raise(libc::SIGHUP);
    raise(libc::SIGINT);
    drop(held);
    assert_eq!(SEEN.load(Ordering::SeqCst), libc::SIGHUP, "SIGHUP reached its handler after SIGINT came");
}
