//! Health checks after a change: compare the fabric before and after an apply, and decide
//! whether to confirm it or roll it back.
//!
//! A change is judged queue by queue on the queues it touched, over `window` telemetry
//! intervals before and after. A queue is degraded when, after the change, any of these holds:
//! - new drops appear;
//! - PFC pause frames rise above `max(pause_floor, pause_ratio × before)`;
//! - the queue spends more than `max(paused_floor, pause_ratio × before)` of its time paused;
//! - average depth exceeds `depth_ratio × before + depth_slack_bytes`;
//! - and, over all changed queues together, utilization falls below `util_ratio × before`
//!   while they had real load before.
//!
//! Drops and pauses are judged as soon as intervals arrive (a change that causes them is rolled
//! back at once); the rest once the window is complete.
//!
//! Drops and pauses are strong signals in a lossless fabric; utilization and depth move with
//! the traffic itself, so their thresholds are loose by default.

use serde::Serialize;

/// What one queue did during one telemetry interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IntervalStats {
    /// Interval length, ns.
    pub span_ns: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Line rate.
    pub link_bps: u64,
    /// Time-weighted average depth.
    pub queue_bytes_avg: f64,
    /// PAUSE frames received and sent.
    pub pauses: u64,
    /// Time paused, ns.
    pub paused_ns: u64,
    /// Drops.
    pub drops: u64,
}

impl IntervalStats {
    /// Fraction of line rate used.
    pub fn utilization(&self) -> f64 {
        if self.span_ns == 0 || self.link_bps == 0 {
            return 0.0;
        }
        self.tx_bytes as f64 * 8.0 / (self.link_bps as f64 * self.span_ns as f64 * 1e-9)
    }
}

/// Thresholds of the health check.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// Intervals compared before and after.
    pub window: usize,
    /// Pause frames per window always tolerated.
    pub pause_floor: u64,
    /// Allowed growth factor of pauses and paused time.
    pub pause_ratio: f64,
    /// Fraction of time paused always tolerated.
    pub paused_floor: f64,
    /// Utilization may not fall below this fraction of before...
    pub util_ratio: f64,
    /// ...when it was at least this high before.
    pub util_min_before: f64,
    /// Allowed growth factor of average depth...
    pub depth_ratio: f64,
    /// ...plus this many bytes.
    pub depth_slack_bytes: f64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            window: 5,
            pause_floor: 2,
            pause_ratio: 2.0,
            paused_floor: 0.05,
            util_ratio: 0.3,
            util_min_before: 0.5,
            depth_ratio: 2.0,
            depth_slack_bytes: 1_000_000.0,
        }
    }
}

/// Aggregate of a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WindowStats {
    /// Mean utilization.
    pub utilization: f64,
    /// Mean average depth, bytes.
    pub queue_bytes_avg: f64,
    /// Pause frames.
    pub pauses: u64,
    /// Fraction of the window spent paused.
    pub paused_fraction: f64,
    /// Drops.
    pub drops: u64,
}

impl WindowStats {
    /// Aggregate the intervals of one queue.
    pub fn of<'a>(it: impl IntoIterator<Item = &'a IntervalStats>) -> Self {
        let (mut n, mut util, mut depth, mut pauses, mut drops, mut paused, mut span) = (0usize, 0.0, 0.0, 0, 0, 0, 0);
        for s in it {
            n += 1;
            util += s.utilization();
            depth += s.queue_bytes_avg;
            pauses += s.pauses;
            drops += s.drops;
            paused += s.paused_ns;
            span += s.span_ns;
        }
        let n = n.max(1) as f64;
        let paused_fraction = if span > 0 { paused as f64 / span as f64 } else { 0.0 };
        WindowStats { utilization: util / n, queue_bytes_avg: depth / n, pauses, paused_fraction, drops }
    }
}

/// Strong signals, judged on however much of the window has arrived: drops and pauses mean
/// harm in a lossless fabric, so a change that causes them is rolled back at once.
pub fn judge_strong(cfg: &HealthConfig, before: &WindowStats, after: &WindowStats) -> Result<(), Vec<String>> {
    let mut why = Vec::new();
    if after.drops > before.drops {
        why.push(format!("drops rose from {} to {}", before.drops, after.drops));
    }
    let pause_limit = (cfg.pause_ratio * before.pauses as f64).max(cfg.pause_floor as f64);
    if after.pauses as f64 > pause_limit {
        why.push(format!("PFC pauses rose from {} to {}", before.pauses, after.pauses));
    }
    if after.paused_fraction > (cfg.pause_ratio * before.paused_fraction).max(cfg.paused_floor) {
        why.push(format!(
            "time paused rose from {:.1}% to {:.1}%",
            before.paused_fraction * 100.0,
            after.paused_fraction * 100.0
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

/// The full verdict on one queue's complete window: strong signals plus depth.
pub fn judge(cfg: &HealthConfig, before: &WindowStats, after: &WindowStats) -> Result<(), Vec<String>> {
    let mut why = judge_strong(cfg, before, after).err().unwrap_or_default();
    if after.queue_bytes_avg > cfg.depth_ratio * before.queue_bytes_avg + cfg.depth_slack_bytes {
        why.push(format!(
            "average queue depth rose from {:.0} B to {:.0} B",
            before.queue_bytes_avg, after.queue_bytes_avg
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

/// Utilization of all changed queues together: a collapse of their combined throughput (one
/// queue's utilization alone moves too much with its traffic to judge a change by).
pub fn judge_utilization(cfg: &HealthConfig, before: f64, after: f64) -> Result<(), String> {
    if before >= cfg.util_min_before && after < cfg.util_ratio * before {
        Err(format!("utilization of the changed queues fell from {:.1}% to {:.1}%", before * 100.0, after * 100.0))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(util: f64, depth: f64, pauses: u64, drops: u64) -> WindowStats {
        WindowStats { utilization: util, queue_bytes_avg: depth, pauses, paused_fraction: 0.0, drops }
    }

    #[test]
    fn steady_is_healthy() {
        let c = HealthConfig::default();
        assert!(judge(&c, &w(0.6, 100e3, 0, 0), &w(0.55, 150e3, 1, 0)).is_ok());
    }

    #[test]
    fn each_degradation_is_caught() {
        let c = HealthConfig::default();
        let before = w(0.6, 100e3, 1, 0);
        assert!(judge(&c, &before, &w(0.6, 100e3, 1, 3)).unwrap_err()[0].contains("drops"));
        assert!(judge(&c, &before, &w(0.6, 100e3, 40, 0)).unwrap_err()[0].contains("pauses"));
        assert!(judge_utilization(&c, 0.6, 0.1).unwrap_err().contains("utilization"));
        assert!(judge_utilization(&c, 0.6, 0.4).is_ok());
        assert!(judge(&c, &before, &w(0.6, 1.5e6, 1, 0)).unwrap_err()[0].contains("depth"));
        let stalled = WindowStats { paused_fraction: 0.9, ..w(0.6, 100e3, 1, 0) };
        assert!(judge(&c, &before, &stalled).unwrap_err()[0].contains("paused"));
        // An idle fabric that stays idle is not a utilization collapse.
        assert!(judge_utilization(&c, 0.05, 0.0).is_ok());
        // Strong signals do not wait for the window.
        assert!(judge_strong(&c, &before, &w(0.6, 100e3, 1, 1)).is_err());
    }

    #[test]
    fn utilization_from_bytes() {
        let s =
            IntervalStats { span_ns: 1_000_000, tx_bytes: 6_250_000, link_bps: 100_000_000_000, ..Default::default() };
        assert!((s.utilization() - 0.5).abs() < 1e-12);
    }
}
