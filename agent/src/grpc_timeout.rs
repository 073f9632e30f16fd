//! gRPC's `grpc-timeout` header, both ways: the controller writes its `--call-timeout` into it,
//! and the actuator reads its clients' deadlines from it. Its wire format: at most 8 digits
//! and a unit, `H`, `M`, `S`, `m`, `u` or `n`.

use std::time::Duration;

/// The header's name.
pub const HEADER: &str = "grpc-timeout";

/// The most digits a value has, as a number.
const MOST: u128 = 99_999_999;

/// `timeout` as a header value, rounded up to the finest unit that holds it: rounded down, a
/// deadline of less than a millisecond read `0m`, and the actuator refused every call as late.
pub fn encode(timeout: Duration) -> String {
    let up = |unit: u128| timeout.as_nanos().div_ceil(unit);
    match (up(1), up(1_000), up(1_000_000), up(1_000_000_000)) {
        (ns, ..) if ns <= MOST => format!("{ns}n"),
        (_, us, ..) if us <= MOST => format!("{us}u"),
        (_, _, ms, _) if ms <= MOST => format!("{ms}m"),
        (.., s) => format!("{}S", s.min(MOST)),
    }
}

/// A header value as a duration; `None` for one that is not in the wire format.
pub fn decode(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1).filter(|&i| text.is_char_boundary(i))?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3_600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_in_their_wire_format() {
        assert_eq!(decode("5000m"), Some(Duration::from_secs(5)));
        assert_eq!(decode("2S"), Some(Duration::from_secs(2)));
        assert_eq!(decode("1H"), Some(Duration::from_secs(3_600)));
        assert_eq!(decode("3M"), Some(Duration::from_secs(180)));
        assert_eq!(decode("7u"), Some(Duration::from_micros(7)));
        assert_eq!(decode("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "m", "100", "100x", "123456789m", "-5m", "1.5S", "５m", "5５"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn call_timeouts_go_on_the_wire_rounded_up() {
        let t = |ns: u64| encode(Duration::from_nanos(ns));
        assert_eq!(t(500_000), "500000n", "half a millisecond read 0m");
        assert_eq!(t(5_000_000_000), "5000000u");
        assert_eq!(t(200_000_000_000), "200000m");
        assert_eq!(t(100_000_000_001), "100001m", "up, never down");
        assert_eq!(t(u64::MAX), "99999999S");
    }

    /// What the controller writes, the actuator reads back no shorter.
    #[test]
    fn what_is_written_reads_back_no_shorter() {
        for ns in [1, 999, 500_000, 1_500_000, 5_000_000_000, 100_000_000_001, 3_600_000_000_000_001] {
            let timeout = Duration::from_nanos(ns);
            let read = decode(&encode(timeout)).expect("readable");
            assert!(read >= timeout, "{timeout:?} read as {read:?}");
        }
    }
}
