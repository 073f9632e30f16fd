//! Loopback ports for the processes a test starts and tells where to listen by number (a
//! controller's `--metrics`, a `redis-server`).
//!
//! A port the kernel gives a probe socket (`bind` to port 0) is free once the probe closes, but
//! the kernel may hand the same port to any outgoing connection before the child binds it, and
//! the suites open hundreds of loopback connections while children start: the child then
//! fails with "address in use". So these ports come from below the kernel's ephemeral range,
//! which it never hands out by itself. Each test process walks its own stretch of them, and a
//! probe checks that nobody holds the one it picks.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port taken from; below it are the well-known and registered services one is
/// likelier to find running.
const FLOOR: u32 = 10_000;

/// How many ports one call may probe before it settles for one from the kernel.
const TRIES: u32 = 200;

/// A loopback TCP port that nothing listens on or is connected from: from 10 000 up to the
/// kernel's ephemeral range, where that range leaves a thousand ports or more below it (else
/// one the kernel picks).
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = ephemeral_start().saturating_sub(FLOOR);
    if span >= 1_000 {
        // Processes that run beside each other start in different places.
        let start = std::process::id().wrapping_mul(7_919) % span;
        for _ in 0..TRIES {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = FLOOR + (start + n) % span;
            if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
                return port as u16;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0").expect("bind a free port").local_addr().expect("local addr").port()
}

/// The first port of the kernel's ephemeral range (Linux's default where it cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        let below = ephemeral_start() >= FLOOR + 1_000;
        for &p in &ports {
            assert!(!below || (FLOOR..ephemeral_start()).contains(&u32::from(p)), "{p}");
            TcpListener::bind(("127.0.0.1", p)).expect("still free");
        }
    }
}
