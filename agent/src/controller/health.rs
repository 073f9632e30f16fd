//! Health checks after a change: compare the fabric before and after an apply, and decide
//! whether to confirm it or roll it back.
//!
//! A change is judged queue by queue on the queues it touched, over `window` telemetry
//! intervals before and after. A queue is degraded when, after the change, any of these holds:
//! - there are more drops than in the window before (in a lossless fabric, which drops
//!   nothing, any drop);
//! - PFC pause frames rise above `max(pause_floor, pause_ratio × before)`;
//! - the queue spends more than `max(paused_floor, pause_ratio × before)` of its time paused;
//! - average depth exceeds `depth_ratio × before + depth_slack_bytes`;
//! - and, over all changed queues together, utilization falls below `util_ratio × before`
//!   while they had real load before, unless a smaller fraction of their packets was
//!   ECN-marked than before.
//!
//! Drops and pauses are judged as soon as intervals arrive (a change that causes them is rolled
//! back at once); the rest once the window is complete.
//!
//! Drops and pauses are strong signals in a lossless fabric; utilization and depth move with
//! the traffic itself, so their thresholds are loose by default. A change of ECN thresholds can
//! only slow senders down through marks (marks, then CNPs, then DCQCN rate cuts: REFERENCE.md
//! §1), so a fall in utilization with less marking is the traffic ending, not the change, and so
//! is a fall with no marks at all after the change where the backend vouches that it counts
//! them (`ecn_marks_counted`: a simulator, a SONiC switch polling its ECN-mark counters).
//! Without that word, no marks before or after is judged as a collapse: a switch that does not
//! count marks reads as zero.

use serde::Serialize;
use std::fmt;

/// Which check a change failed. Its label is the `reason` of the controller's
/// `rollbacks_total` metric, so that an operator sees why changes come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Check {
    /// New drops.
    Drops,
    /// More PFC pause frames.
    Pauses,
    /// More time paused.
    PausedTime,
    /// Average depth grew past its bound.
    Depth,
    /// The changed queues' combined utilization collapsed.
    Utilization,
    /// The telemetry of a changed queue went stale or invalid during the watch.
    Telemetry,
    /// Too few intervals arrived to judge the change before its confirm deadline.
    Deadline,
}

impl Check {
    /// Every check, gravest first.
    pub const ALL: [Check; 7] = [
        Check::Drops,
        Check::Pauses,
        Check::PausedTime,
        Check::Depth,
        Check::Utilization,
        Check::Telemetry,
        Check::Deadline,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Check::Drops => "drops",
            Check::Pauses => "pauses",
            Check::PausedTime => "paused_time",
            Check::Depth => "depth",
            Check::Utilization => "utilization",
            Check::Telemetry => "telemetry",
            Check::Deadline => "deadline",
        }
    }
}

/// One failed check, with the figures that failed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The check.
    pub check: Check,
    /// What it saw, e.g. "average queue depth rose from 0 B to 1853153 B".
    pub detail: String,
}

impl Finding {
    fn new(check: Check, detail: String) -> Finding {
        Finding { check, detail }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

/// What one queue did during one telemetry interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IntervalStats {
    /// When the interval began, on the telemetry's clock (`ts_ns`).
    pub start_ns: u64,
    /// Interval length, ns.
    pub span_ns: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_pkts: u64,
    /// Packets sent with an ECN mark.
    pub ecn_marked_pkts: u64,
    /// Whether the backend counted the marks (a zero then means none).
    pub ecn_marks_counted: bool,
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
            // A setting that CE-marks every packet leaves the simulated fabric at 25–40% of its
            // throughput over a 5 ms window (DCQCN recovers between CNPs, and new flows start at
            // line rate), so a bar at 30% missed it about half the time. Halving while marks do
            // not fall is no traffic swing: a swing in demand marks less.
            util_ratio: 0.5,
            util_min_before: 0.5,
            depth_ratio: 2.0,
            depth_slack_bytes: 1_000_000.0,
        }
    }
}

impl HealthConfig {
    /// The thresholds that `--health-thresholds` names: `pause_floor`, `pause_ratio`,
    /// `paused_floor`, `util_ratio`, `util_min_before`, `depth_ratio`, `depth_slack_bytes`.
    pub const KEYS: [&'static str; 7] = [
        "pause_floor",
        "pause_ratio",
        "paused_floor",
        "util_ratio",
        "util_min_before",
        "depth_ratio",
        "depth_slack_bytes",
    ];

    /// These thresholds with some replaced, from `name=value,...`. Each value must keep its
    /// check meaningful: growth factors at least 1 (a bar below "as before" would roll back
    /// every change), fractions within [0, 1], `util_ratio` above 0, counts and bytes whole.
    pub fn with_thresholds(&self, spec: &str) -> Result<HealthConfig, String> {
        let mut out = self.clone();
        for (pair, name, v) in ecn_env::units::named_numbers(spec)? {
            // Below 2^53, where every whole number is exact (1e30 passed as "whole").
            let whole = |v: f64| (0.0..=9_007_199_254_740_992.0).contains(&v) && v.fract() == 0.0;
            let bad = |why: &str| Err(format!("'{pair}': {name} {why}"));
            match name {
                "pause_floor" if !whole(v) => return bad("is a count of pause frames: a whole number, 0 to 2^53"),
                "pause_floor" => out.pause_floor = v as u64,
                "pause_ratio" | "depth_ratio" if !(v.is_finite() && v >= 1.0) => {
                    return bad("is a growth factor: finite and at least 1")
                }
                "pause_ratio" => out.pause_ratio = v,
                "depth_ratio" => out.depth_ratio = v,
                "paused_floor" | "util_min_before" if !(0.0..=1.0).contains(&v) => {
                    return bad("is a fraction: within [0, 1]")
                }
                "paused_floor" => out.paused_floor = v,
                "util_min_before" => out.util_min_before = v,
                "util_ratio" if !(v > 0.0 && v <= 1.0) => return bad("is a fraction of before: above 0, at most 1"),
                "util_ratio" => out.util_ratio = v,
                "depth_slack_bytes" if !whole(v) => return bad("is a byte count: a whole number, 0 to 2^53"),
                "depth_slack_bytes" => out.depth_slack_bytes = v,
                _ => return Err(format!("'{name}': not a health threshold ({})", Self::KEYS.join(", "))),
            }
        }
        Ok(out)
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
    /// Packets sent.
    pub tx_pkts: u64,
    /// Packets sent with an ECN mark.
    pub ecn_marked_pkts: u64,
    /// Whether the backend counted the marks of every interval (and there was one).
    pub ecn_marks_counted: bool,
}

impl WindowStats {
    /// Aggregate the intervals of one queue.
    pub fn of<'a>(it: impl IntoIterator<Item = &'a IntervalStats>) -> Self {
        let (mut n, mut util, mut depth, mut paused, mut span) = (0usize, 0.0, 0.0, 0, 0);
        let mut w = WindowStats { ecn_marks_counted: true, ..WindowStats::default() };
        for s in it {
            n += 1;
            w.ecn_marks_counted &= s.ecn_marks_counted;
            util += s.utilization();
            depth += s.queue_bytes_avg;
            // Counters come from a remote peer: saturate rather than overflow.
            w.pauses = w.pauses.saturating_add(s.pauses);
            w.drops = w.drops.saturating_add(s.drops);
            w.tx_pkts = w.tx_pkts.saturating_add(s.tx_pkts);
            w.ecn_marked_pkts = w.ecn_marked_pkts.saturating_add(s.ecn_marked_pkts);
            paused = u64::saturating_add(paused, s.paused_ns);
            span = u64::saturating_add(span, s.span_ns);
        }
        w.ecn_marks_counted &= n > 0;
        let n = n.max(1) as f64;
        w.paused_fraction = if span > 0 { paused as f64 / span as f64 } else { 0.0 };
        WindowStats { utilization: util / n, queue_bytes_avg: depth / n, ..w }
    }
}

/// Fraction of the packets sent by these queues together that carried an ECN mark.
fn marked_fraction(queues: &[WindowStats]) -> f64 {
    let sent = queues.iter().fold(0u64, |n, w| n.saturating_add(w.tx_pkts));
    let marked = queues.iter().fold(0u64, |n, w| n.saturating_add(w.ecn_marked_pkts));
    if sent == 0 {
        0.0
    } else {
        marked as f64 / sent as f64
    }
}

/// Mean utilization of these queues.
fn mean_utilization(queues: &[WindowStats]) -> f64 {
    queues.iter().map(|w| w.utilization).sum::<f64>() / queues.len().max(1) as f64
}

/// Strong signals, judged on however much of the window has arrived: drops and pauses mean
/// harm in a lossless fabric, so a change that causes them is rolled back at once.
pub fn judge_strong(cfg: &HealthConfig, before: &WindowStats, after: &WindowStats) -> Result<(), Vec<Finding>> {
    let mut why = Vec::new();
    if after.drops > before.drops {
        why.push(Finding::new(Check::Drops, format!("drops rose from {} to {}", before.drops, after.drops)));
    }
    let pause_limit = (cfg.pause_ratio * before.pauses as f64).max(cfg.pause_floor as f64);
    if after.pauses as f64 > pause_limit {
        why.push(Finding::new(Check::Pauses, format!("PFC pauses rose from {} to {}", before.pauses, after.pauses)));
    }
    if after.paused_fraction > (cfg.pause_ratio * before.paused_fraction).max(cfg.paused_floor) {
        why.push(Finding::new(
            Check::PausedTime,
            format!(
                "time paused rose from {:.1}% to {:.1}%",
                before.paused_fraction * 100.0,
                after.paused_fraction * 100.0
            ),
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

/// The full verdict on one queue's complete window: strong signals plus depth.
pub fn judge(cfg: &HealthConfig, before: &WindowStats, after: &WindowStats) -> Result<(), Vec<Finding>> {
    let mut why = judge_strong(cfg, before, after).err().unwrap_or_default();
    if after.queue_bytes_avg > cfg.depth_ratio * before.queue_bytes_avg + cfg.depth_slack_bytes {
        why.push(Finding::new(
            Check::Depth,
            format!("average queue depth rose from {:.0} B to {:.0} B", before.queue_bytes_avg, after.queue_bytes_avg),
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

/// Utilization of all changed queues together (one queue's utilization alone moves too much
/// with its traffic to judge a change by): a collapse of their combined throughput, unless a
/// smaller fraction of their packets was marked (thresholds set too low throttle senders
/// through marks), or none, counted, after the change. The windows are the changed queues',
/// before and after, in the same order.
pub fn judge_utilization(cfg: &HealthConfig, before: &[WindowStats], after: &[WindowStats]) -> Result<(), Finding> {
    let (util_before, util_after) = (mean_utilization(before), mean_utilization(after));
    let (marked_before, marked_after) = (marked_fraction(before), marked_fraction(after));
    let none_marked_after = after.iter().all(|w| w.ecn_marks_counted && w.ecn_marked_pkts == 0);
    if util_before >= cfg.util_min_before
        && util_after < cfg.util_ratio * util_before
        && marked_after >= marked_before
        && !none_marked_after
    {
        Err(Finding::new(
            Check::Utilization,
            format!(
                "utilization of the changed queues fell from {:.1}% to {:.1}% (marked packets: {:.1}% before, {:.1}% after)",
                util_before * 100.0,
                util_after * 100.0,
                marked_before * 100.0,
                marked_after * 100.0
            ),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_replaced_by_name_and_checked() {
        let d = HealthConfig::default();
        let c = d.with_thresholds("util_ratio=0.3, depth_ratio=4,pause_floor=10,depth_slack_bytes=0").unwrap();
        assert_eq!((c.util_ratio, c.depth_ratio, c.pause_floor, c.depth_slack_bytes), (0.3, 4.0, 10, 0.0));
        assert_eq!((c.window, c.pause_ratio, c.paused_floor, c.util_min_before), (5, 2.0, 0.05, 0.5));
        assert_eq!(d.with_thresholds("").unwrap(), d);
        for (spec, says) in [
            ("util_ratio", "expected name=value"),
            ("util_ratio=0", "above 0"),
            ("util_ratio=1.5", "at most 1"),
            ("depth_ratio=0.9", "at least 1"),
            ("pause_ratio=NaN", "at least 1"),
            ("paused_floor=-0.1", "within [0, 1]"),
            ("pause_floor=2.5", "whole number"),
            ("depth_slack_bytes=lots", "not a number"),
            ("pause_floor=1e30", "0 to 2^53"),
            ("depth_slack_bytes=18446744073709551616", "0 to 2^53"),
            ("pause_floor=1,pause_floor=2", "given twice"),
            ("window=3", "not a health threshold"),
        ] {
            let e = d.with_thresholds(spec).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }

    fn w(util: f64, depth: f64, pauses: u64, drops: u64) -> WindowStats {
        WindowStats { utilization: util, queue_bytes_avg: depth, pauses, drops, ..Default::default() }
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
        let failed = |after: &WindowStats| {
            judge(&c, &before, after).unwrap_err().iter().map(|f| (f.check, f.to_string())).collect::<Vec<_>>()
        };
        assert_eq!(failed(&w(0.6, 100e3, 1, 3)), [(Check::Drops, "drops rose from 0 to 3".to_string())]);
        assert_eq!(failed(&w(0.6, 100e3, 40, 0)), [(Check::Pauses, "PFC pauses rose from 1 to 40".to_string())]);
        let deeper = failed(&w(0.6, 1.5e6, 1, 0));
        assert_eq!(deeper, [(Check::Depth, "average queue depth rose from 100000 B to 1500000 B".to_string())]);
        let stalled = WindowStats { paused_fraction: 0.9, ..w(0.6, 100e3, 1, 0) };
        assert_eq!(failed(&stalled)[0].0, Check::PausedTime);
        // Several at once are all reported, strong signals first.
        let checks: Vec<Check> = failed(&w(0.6, 1.5e6, 40, 3)).into_iter().map(|(c, _)| c).collect();
        assert_eq!(checks, [Check::Drops, Check::Pauses, Check::Depth]);
        // Strong signals do not wait for the window.
        assert!(judge_strong(&c, &before, &w(0.6, 100e3, 1, 1)).is_err());
    }

    fn sent(util: f64, tx_pkts: u64, ecn_marked_pkts: u64) -> WindowStats {
        WindowStats { tx_pkts, ecn_marked_pkts, ..w(util, 100e3, 0, 0) }
    }

    #[test]
    fn a_utilization_collapse_with_less_marking_is_the_traffic() {
        let c = HealthConfig::default();
        let before = [sent(0.7, 1000, 50), sent(0.5, 800, 0)];
        // Over-marking: senders were told to slow down, and did.
        let throttled = [sent(0.1, 150, 120), sent(0.1, 150, 30)];
        let why = judge_utilization(&c, &before, &throttled).unwrap_err();
        assert_eq!(why.check, Check::Utilization);
        let why = why.to_string();
        assert!(why.contains("fell from 60.0% to 10.0% (marked packets: 2.8% before, 50.0% after)"), "{why}");
        // The same fall with fewer marks is the traffic ending, not the change.
        let demand_fell = [sent(0.1, 150, 0), sent(0.1, 150, 2)];
        assert!(judge_utilization(&c, &before, &demand_fell).is_ok());
        // No marks at all, before or after: a switch that does not count them looks the same,
        // so the fall counts.
        let unmarked = [sent(0.7, 1000, 0), sent(0.5, 800, 0)];
        assert!(judge_utilization(&c, &unmarked, &[sent(0.1, 150, 0), sent(0.1, 150, 0)]).is_err());
        // Unless the backend counted them: no marks after the change, it throttled no sender.
        let counted = |w: WindowStats| WindowStats { ecn_marks_counted: true, ..w };
        let counted_none = [counted(sent(0.1, 150, 0)), counted(sent(0.1, 150, 0))];
        assert!(judge_utilization(&c, &unmarked, &counted_none).is_ok());
        // Every changed queue's, after the change (a queue that may have marked uncounted, or
        // one that marked, leaves the fall to the rule above).
        assert!(judge_utilization(&c, &unmarked, &[counted(sent(0.1, 150, 0)), sent(0.1, 150, 0)]).is_err());
        assert!(judge_utilization(&c, &unmarked, &[counted(sent(0.1, 150, 0)), counted(sent(0.1, 150, 1))]).is_err());
        // A smaller fall is tolerated, marks or not.
        assert!(judge_utilization(&c, &before, &[sent(0.4, 600, 300), sent(0.3, 500, 250)]).is_ok());
        // An idle fabric that stays idle is not a collapse.
        assert!(judge_utilization(&c, &[sent(0.05, 10, 0)], &[sent(0.0, 0, 0)]).is_ok());
    }

    #[test]
    fn a_window_vouches_for_its_marks_only_if_every_interval_does() {
        let i = |counted: bool| IntervalStats { span_ns: 1_000, ecn_marks_counted: counted, ..Default::default() };
        assert!(WindowStats::of(&[i(true), i(true)]).ecn_marks_counted);
        assert!(!WindowStats::of(&[i(true), i(false)]).ecn_marks_counted);
        assert!(!WindowStats::of(&[]).ecn_marks_counted);
    }

    #[test]
    fn huge_counters_saturate() {
        let huge = IntervalStats {
            span_ns: u64::MAX,
            tx_pkts: u64::MAX,
            ecn_marked_pkts: u64::MAX,
            pauses: u64::MAX,
            paused_ns: u64::MAX,
            drops: u64::MAX,
            ..Default::default()
        };
        let w = WindowStats::of(&[huge, huge]);
        assert_eq!((w.pauses, w.drops, w.tx_pkts, w.ecn_marked_pkts), (u64::MAX, u64::MAX, u64::MAX, u64::MAX));
        assert!(judge_utilization(&HealthConfig::default(), &[w, w], &[w, w]).is_ok());
    }

    #[test]
    fn utilization_from_bytes() {
        let s =
            IntervalStats { span_ns: 1_000_000, tx_bytes: 6_250_000, link_bps: 100_000_000_000, ..Default::default() };
        assert!((s.utilization() - 0.5).abs() < 1e-12);
    }
}
