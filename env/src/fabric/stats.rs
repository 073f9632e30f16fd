//! Per-queue counters, reset every telemetry interval (the simulator turns them into samples).

/// Counters of one (port, priority) egress queue, reset at every telemetry interval.
#[derive(Debug, Clone)]
pub struct QueueStats {
    /// Bytes transmitted this interval.
    pub tx_bytes: u64,
    /// Packets transmitted this interval.
    pub tx_pkts: u64,
    /// Packets CE-marked by this queue this interval.
    pub marked: u64,
    /// PAUSE frames for this priority received on this port this interval.
    pub pause_rx: u64,
    /// PAUSE frames for this priority sent from this port this interval.
    pub pause_tx: u64,
    /// Packets dropped at admission towards this queue this interval.
    pub drops: u64,
    /// ∫ depth dt over the interval, byte·ns.
    pub depth_area: f64,
    /// Deepest depth seen this interval.
    pub depth_max: u64,
    /// When the depth last changed (start of the current constant piece).
    pub last_change: u64,
    /// When the current pause began, or `u64::MAX` if the queue is not paused.
    pub paused_since: u64,
    /// Paused nanoseconds accumulated this interval (excluding an ongoing pause).
    pub paused_ns: u64,
}

impl Default for QueueStats {
    fn default() -> Self {
        QueueStats {
            tx_bytes: 0,
            tx_pkts: 0,
            marked: 0,
            pause_rx: 0,
            pause_tx: 0,
            drops: 0,
            depth_area: 0.0,
            depth_max: 0,
            last_change: 0,
            paused_since: u64::MAX,
            paused_ns: 0,
        }
    }
}

impl QueueStats {
    /// The depth is about to change from `depth` at time `now`: close the constant piece.
    #[inline]
    pub fn before_depth_change(&mut self, now: u64, depth: u64) {
        self.depth_area += depth as f64 * (now - self.last_change) as f64;
        self.last_change = now;
    }

    /// The depth just changed to `depth`.
    #[inline]
    pub fn after_depth_change(&mut self, depth: u64) {
        self.depth_max = self.depth_max.max(depth);
    }

    /// Close the interval `[start, now]` with the queue at `depth`: returns
    /// `(average depth, paused ns)` and resets the counters for the next interval.
    pub fn close_interval(&mut self, start: u64, now: u64, depth: u64) -> (f64, u64) {
        self.before_depth_change(now, depth);
        let span = (now - start).max(1) as f64;
        let avg = self.depth_area / span;
        let mut paused = self.paused_ns;
        if self.paused_since != u64::MAX {
            paused += now - self.paused_since.max(start);
        }
        let paused_since = if self.paused_since != u64::MAX { now } else { u64::MAX };
        *self = QueueStats { last_change: now, depth_max: depth, paused_since, ..QueueStats::default() };
        (avg, paused.min(now - start))
    }
}

/// The p-th percentile of sorted data as the HPCC analysis scripts compute it (and the
/// reference `summary.json` with them): `sorted[min(n - 1, floor(p/100 · n))]`, no
/// interpolation. Using the same estimator keeps our figures comparable with the reference's.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((p / 100.0 * sorted.len() as f64).floor() as usize).min(sorted.len() - 1);
    Some(sorted[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_weighted_average() {
        let mut s = QueueStats::default();
        // depth 0 for 10 ns, then 100 for 30 ns: average 75 over 40 ns.
        s.before_depth_change(10, 0);
        s.after_depth_change(100);
        let (avg, _) = s.close_interval(0, 40, 100);
        assert!((avg - 75.0).abs() < 1e-9);
        assert_eq!(s.depth_max, 100);
    }

    #[test]
    fn percentiles_are_nearest_rank_floor() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile_sorted(&v, 50.0), Some(6.0));
        assert_eq!(percentile_sorted(&v, 99.0), Some(10.0));
        assert_eq!(percentile_sorted(&v, 100.0), Some(10.0));
        assert_eq!(percentile_sorted(&v, 0.0), Some(1.0));
        assert_eq!(percentile_sorted(&[], 50.0), None);
    }
}
