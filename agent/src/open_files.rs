//! How many files the process may hold open (`RLIMIT_NOFILE`). The servers hold a descriptor
//! per connection and reach their device over more: under a low soft limit (1024 is common, far
//! less under some supervisors) a flood of idle connections took every descriptor, and a SONiC
//! actuator could not reach Redis to revert an expired change for as long as the flood lasted.

use tracing::{info, warn};

/// Descriptors a server keeps for itself beyond its connections: its device (a switch's
/// Redis connections), its journal and logs, the runtime's own.
pub const RESERVE: u64 = 64;

/// Raise the soft limit to the hard one, as services commonly do (Go's runtime, for one); the
/// limit in force afterwards, `None` where it cannot be read.
pub fn raise_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads the struct it is given, which lives for the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            info!(from = limit.rlim_cur, to = limit.rlim_max, "open-file limit raised to its hard limit");
            limit = raised;
        }
    }
    // `rlim_t` is 32 bits wide on some targets. RLIM_INFINITY is the largest value: no bound
    // worth counting.
    #[allow(clippy::useless_conversion)]
    Some(u64::try_from(limit.rlim_cur).unwrap_or(u64::MAX))
}

/// How many of `wanted` connections a server named `what` may hold at once under the open-file
/// `limit` (`None`: unknown, all of them), leaving [`RESERVE`] descriptors; at least a few, so
/// that a controller can still connect. Fewer than `wanted` is warned of.
pub fn connections_within(wanted: usize, limit: Option<u64>, what: &str) -> usize {
    let Some(limit) = limit else { return wanted };
    let room = usize::try_from(limit.saturating_sub(RESERVE)).unwrap_or(usize::MAX);
    let connections = wanted.min(room).max(4);
    if connections < wanted {
        warn!(
            open_file_limit = limit,
            connections,
            "the {what} serves {connections} connections at once, not {wanted}: the open-file limit leaves no more \
             beside its own files; raise it (ulimit -n, systemd's LimitNOFILE=)"
        );
    }
    connections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_fit_under_the_limit_with_a_reserve() {
        assert_eq!(connections_within(256, None, "test"), 256);
        assert_eq!(connections_within(256, Some(1 << 20), "test"), 256);
        assert_eq!(connections_within(256, Some(100), "test"), 36);
        assert_eq!(connections_within(256, Some(40), "test"), 4);
    }

    #[test]
    fn the_limit_in_force_is_read() {
        assert!(raise_limit().is_some_and(|l| l > 0));
    }
}
