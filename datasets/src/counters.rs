//! Turning cumulative hardware counters into per-interval deltas.
//!
//! Switches expose cumulative counters (SAI `COUNTERS_DB`, SNMP, gNMI); the telemetry schema
//! carries per-interval deltas. Between two reads a counter can do three things:
//! - grow, the normal case: the delta is the difference;
//! - wrap past its width (a 32-bit counter at 100 Gb/s wraps bytes every 0.34 s): the delta is
//!   the distance to the top plus the new value;
//! - reset to zero (a reboot, a `sonic-clear counters`, a line card swap): the true delta is
//!   unknown, and any guess would be a spike or a negative throughput downstream.
//!
//! A decrease is told apart from a wrap by plausibility: a wrap must give a delta that the link
//! could have carried in the interval. Growth that is too large to be plausible (a reset
//! followed by fast counting past the old value) is treated as a reset too.

/// What one step of a cumulative counter means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterStep {
    /// The counter grew by this much.
    Delta(u64),
    /// The counter wrapped past its width once; this is the delta across the wrap.
    Wrapped(u64),
    /// The counter was reset (or the step is implausible); the interval's delta is unknown and
    /// the sample must be dropped, not guessed.
    Reset,
}

impl CounterStep {
    /// The delta, if it is known.
    pub fn delta(self) -> Option<u64> {
        match self {
            CounterStep::Delta(d) | CounterStep::Wrapped(d) => Some(d),
            CounterStep::Reset => None,
        }
    }
}

/// Width of a hardware counter, in bits (SAI counters are 64-bit; SNMP `ifInOctets` and some
/// ASIC counters are 32-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterWidth(pub u32);

impl CounterWidth {
    /// 64-bit counters, as SAI reports them.
    pub const SAI: CounterWidth = CounterWidth(64);

    /// The largest value the counter can hold.
    pub fn max_value(self) -> u64 {
        if self.0 >= 64 {
            u64::MAX
        } else {
            (1u64 << self.0) - 1
        }
    }
}

/// Classifies one step of a cumulative counter from `previous` to `current`.
///
/// `max_plausible` is the largest delta the interval could produce (for bytes: line rate ×
/// interval, with some slack); `None` accepts any growth. A decrease is a wrap only when the
/// counter is narrower than 64 bits and the wrapped delta is plausible.
pub fn counter_step(previous: u64, current: u64, width: CounterWidth, max_plausible: Option<u64>) -> CounterStep {
    let plausible = |d: u64| max_plausible.is_none_or(|m| d <= m);
    if current >= previous {
        let d = current - previous;
        return if plausible(d) { CounterStep::Delta(d) } else { CounterStep::Reset };
    }
    if width.0 < 64 && previous <= width.max_value() {
        let d = width.max_value() - previous + current + 1;
        if plausible(d) {
            return CounterStep::Wrapped(d);
        }
    }
    CounterStep::Reset
}

/// Largest plausible byte delta over `interval_ns` on a `link_bps` link: line rate × interval,
/// with 25% slack for sampling jitter (the read happens a little late or early).
pub fn max_plausible_bytes(link_bps: u64, interval_ns: u64) -> u64 {
    let bytes = link_bps as u128 * interval_ns as u128 / 8 / 1_000_000_000;
    (bytes * 5 / 4).min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_a_delta() {
        assert_eq!(counter_step(100, 250, CounterWidth::SAI, None), CounterStep::Delta(150));
        assert_eq!(counter_step(7, 7, CounterWidth::SAI, Some(0)), CounterStep::Delta(0));
    }

    #[test]
    fn a_32_bit_wrap_gives_the_distance_across_the_top() {
        let w = CounterWidth(32);
        let prev = u32::MAX as u64 - 9;
        assert_eq!(counter_step(prev, 5, w, Some(1_000)), CounterStep::Wrapped(15));
    }

    #[test]
    fn a_decrease_of_a_64_bit_counter_is_a_reset() {
        assert_eq!(counter_step(u64::MAX - 3, 2, CounterWidth::SAI, None), CounterStep::Reset);
        assert_eq!(counter_step(1_000_000, 10, CounterWidth::SAI, None), CounterStep::Reset);
    }

    #[test]
    fn implausible_steps_are_resets() {
        // A 32-bit counter that dropped from the middle of its range did not wrap: the wrapped
        // delta (about 2^31) is far beyond what the link carried.
        assert_eq!(counter_step(1 << 31, 10, CounterWidth(32), Some(1 << 20)), CounterStep::Reset);
        // A reset followed by counting past the old value shows up as a huge growth.
        assert_eq!(counter_step(10, 10 + (1 << 40), CounterWidth::SAI, Some(1 << 30)), CounterStep::Reset);
    }

    #[test]
    fn plausible_bytes_follow_line_rate() {
        // 100 Gb/s for 100 µs is 1.25 MB; with 25% slack, 1.5625 MB.
        assert_eq!(max_plausible_bytes(100_000_000_000, 100_000), 1_562_500);
    }
}
