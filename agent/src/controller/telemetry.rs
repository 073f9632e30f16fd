//! Per-queue telemetry as the controller sees it: validation, staleness, and the recent
//! intervals that health checks compare.

use super::guardrails::TelemetryHealth;
use super::health::IntervalStats;
use crate::actuator::telemetry::queue_sample_from_wire;
use ecn_env::tuning::{QueueHistory, QueueInterval};
use ecn_proto::v1 as pb;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The controller's view of one queue's telemetry.
#[derive(Debug)]
pub struct QueueWatch {
    /// The last `keep` intervals: a change's health check compares the window before it.
    history: VecDeque<IntervalStats>,
    keep: usize,
    /// Intervals completed since the queue's setting last changed.
    at_setting: usize,
    /// When (`ts_ns`) the current setting took effect: only intervals that start then or
    /// later were measured under it.
    setting_since_ns: u64,
    last: Option<pb::TelemetrySample>,
    last_valid: bool,
    last_problem: Option<String>,
    /// When a sample last arrived, and when its timestamp last moved forward.
    arrived_at: Option<Instant>,
    advanced_at: Option<Instant>,
    /// What a learned policy observes: the same per-interval features as in training.
    features: QueueHistory,
    /// Intervals of `features` kept: the model's history (a fixed 8 once, so that a card with
    /// a longer one saw its oldest intervals padded).
    feature_history: usize,
}

/// Why a sample cannot be trusted, or `None`.
pub fn problem(s: &pb::TelemetrySample, span_ns: Option<u64>) -> Option<String> {
    if !s.queue_bytes_avg.is_finite() {
        return Some(format!("queue_bytes_avg is {}", s.queue_bytes_avg));
    }
    if s.queue_bytes_avg < 0.0 {
        return Some(format!("queue_bytes_avg is negative ({})", s.queue_bytes_avg));
    }
    if (s.queue_bytes_max as f64) + 1.0 < s.queue_bytes_avg {
        return Some(format!("queue_bytes_max {} is below queue_bytes_avg {}", s.queue_bytes_max, s.queue_bytes_avg));
    }
    if s.queue_bytes > s.queue_bytes_max {
        return Some(format!("queue_bytes_max {} is below queue_bytes {}", s.queue_bytes_max, s.queue_bytes));
    }
    if s.link_bps == 0 {
        return Some("link_bps is 0".into());
    }
    if let Some(span) = span_ns.filter(|&n| n > 0) {
        // More bytes than the line can carry in the interval, with the slack the actuator's
        // counter poller allows for a read a little late (plus one jumbo frame in flight): a
        // tighter bound here would turn samples the actuator passed on into a fallback.
        let cap = ecn_datasets::counters::max_plausible_bytes(s.link_bps, span).saturating_add(9000);
        if s.tx_bytes > cap {
            return Some(format!("tx_bytes {} exceed the line rate over {span} ns", s.tx_bytes));
        }
    }
    if let Some(e) = &s.ecn {
        if !(e.pmax.is_finite() && e.kmin_bytes < e.kmax_bytes) {
            return Some("the reported ECN setting is invalid".into());
        }
    }
    None
}

/// A valid sample covering `span_ns`, as the tuning environment's interval record. A sample
/// without its ECN setting gets the placeholder setting (0 B, 1 B, 0).
fn interval(s: &pb::TelemetrySample, span_ns: u64) -> QueueInterval {
    let unknown = pb::EcnSetting { kmin_bytes: 0, kmax_bytes: 1, pmax: 0.0 };
    let sample = queue_sample_from_wire(s, s.ecn.as_ref().unwrap_or(&unknown));
    QueueInterval::from_queue_sample(&sample, span_ns)
}

impl QueueWatch {
    /// A watch that keeps the last `keep` intervals (at least one): the health window.
    pub fn keeping(keep: usize) -> QueueWatch {
        QueueWatch {
            history: VecDeque::new(),
            keep: keep.max(1),
            at_setting: 0,
            setting_since_ns: 0,
            last: None,
            last_valid: false,
            last_problem: None,
            arrived_at: None,
            advanced_at: None,
            features: QueueHistory::default(),
            feature_history: 1,
        }
    }

    /// The same, keeping `n` intervals of features (at least one) for a learned policy: its
    /// card's history.
    pub fn with_feature_history(self, n: usize) -> QueueWatch {
        QueueWatch { feature_history: n.max(1), ..self }
    }

    /// Why the latest sample cannot be trusted, if it cannot.
    pub fn problem(&self) -> Option<&str> {
        self.last_problem.as_deref()
    }

    /// Take in one sample; returns the interval it completed, if it was valid and moved the
    /// queue's clock forward (a repeated or reset timestamp completes none).
    pub fn push(&mut self, s: &pb::TelemetrySample) -> Option<IntervalStats> {
        let now = Instant::now();
        if self.last.as_ref().is_some_and(|p| s.ts_ns < p.ts_ns) {
            self.clock_restarted(s.ts_ns);
        }
        let prev_ts = self.last.as_ref().map(|p| p.ts_ns);
        let advanced = prev_ts.is_none_or(|t| s.ts_ns > t);
        let step = prev_ts.filter(|&t| s.ts_ns > t).map(|t| s.ts_ns - t);
        // The counters cover the span the sample states, where it states one: after a hole in
        // the stream (an interval the poller dropped) that is less than the step.
        let span = step.map(|step| if s.span_ns > 0 { s.span_ns.min(step) } else { step });
        let issue = problem(s, span);
        // A hole before this sample (an interval the poller dropped: a span shorter than the
        // step by more than half), or a sample that cannot be trusted, breaks the series. A
        // learned model's history starts again after it, as offline training's does (the same
        // half-interval rule as its gaps, `Continuity::AfterGap` and `AfterDrop`): built across
        // it, the model would read intervals as back to back that were not.
        let hole = matches!((step, span), (Some(step), Some(span)) if step - span > span / 2);
        if hole || issue.is_some() {
            self.features = QueueHistory::default();
        }
        self.last_valid = issue.is_none();
        self.last_problem = issue;
        self.arrived_at = Some(now);
        if advanced {
            self.advanced_at = Some(now);
        }
        let mut completed = None;
        if let (Some(span), true) = (span, self.last_valid) {
            self.features.push(interval(s, span), self.feature_history);
            if self.history.len() == self.keep {
                self.history.pop_front();
            }
            let stats = IntervalStats {
                start_ns: s.ts_ns - span,
                span_ns: span,
                tx_bytes: s.tx_bytes,
                tx_pkts: s.tx_pkts,
                ecn_marked_pkts: s.ecn_marked_pkts,
                ecn_marks_counted: s.ecn_marks_counted,
                link_bps: s.link_bps,
                queue_bytes_avg: s.queue_bytes_avg,
                // Counters come from a remote peer: saturate rather than overflow.
                pauses: s.pfc_pause_rx.saturating_add(s.pfc_pause_tx),
                paused_ns: s.paused_ns,
                drops: s.drops,
            };
            self.history.push_back(stats);
            if stats.start_ns >= self.setting_since_ns {
                self.at_setting = self.at_setting.saturating_add(1);
            }
            completed = Some(stats);
        }
        self.last = Some(s.clone());
        completed
    }

    /// The telemetry's clock went back to `ts_ns`: a new one (a restarted actuator's; a
    /// simulated fabric's starts at 0). Intervals and features measured on the old clock are
    /// dropped, and a setting in effect since a time on it counts as in effect since the new
    /// clock began: left at an old time, no new interval would ever count as measured under
    /// it, and the queue would wait as long as the old clock had run (a held queue, minutes
    /// on an actuator that had run for minutes).
    fn clock_restarted(&mut self, ts_ns: u64) {
        self.history.clear();
        self.features = QueueHistory::default();
        self.last = None;
        self.at_setting = 0;
        if self.setting_since_ns > ts_ns {
            self.setting_since_ns = 0;
        }
    }

    /// Whether any sample has arrived yet.
    pub fn has_arrived(&self) -> bool {
        self.arrived_at.is_some()
    }

    /// The feature history a learned policy observes.
    pub fn features(&self) -> &QueueHistory {
        &self.features
    }

    /// Fresh and valid, stale (absent, late or frozen), or invalid.
    pub fn health(&self, now: Instant, stale_after: Duration) -> TelemetryHealth {
        let (Some(arrived), Some(advanced)) = (self.arrived_at, self.advanced_at) else {
            return TelemetryHealth::Stale;
        };
        if now.duration_since(arrived) > stale_after || now.duration_since(advanced) > stale_after {
            return TelemetryHealth::Stale;
        }
        if !self.last_valid {
            return TelemetryHealth::Invalid;
        }
        TelemetryHealth::Good
    }

    /// How many of the intervals it holds (at most `keep`) passed at the queue's current
    /// setting.
    pub fn intervals_at_setting(&self) -> usize {
        self.at_setting.min(self.history.len())
    }

    /// The queue's setting changed, in effect from `in_effect_from_ns` on the telemetry's clock
    /// (`None`, unknown: from the last sample seen). Intervals from before no longer describe
    /// it, nor do those still in flight that started before it.
    pub fn setting_changed(&mut self, in_effect_from_ns: Option<u64>) {
        self.at_setting = 0;
        self.setting_since_ns = in_effect_from_ns.unwrap_or_else(|| self.last.as_ref().map_or(0, |s| s.ts_ns));
    }

    /// The last `n` intervals.
    pub fn recent(&self, n: usize) -> impl Iterator<Item = &IntervalStats> {
        self.history.iter().skip(self.history.len().saturating_sub(n))
    }

    /// What the decision log records as the observation.
    pub fn observation(&self) -> serde_json::Value {
        match (&self.last, self.history.back()) {
            (Some(s), Some(i)) => serde_json::json!({
                "ts_ns": s.ts_ns,
                "queue_bytes": s.queue_bytes,
                "queue_bytes_avg": s.queue_bytes_avg,
                "queue_bytes_max": s.queue_bytes_max,
                "utilization": i.utilization(),
                "ecn_mark_fraction": if s.tx_pkts > 0 { s.ecn_marked_pkts as f64 / s.tx_pkts as f64 } else { 0.0 },
                "pfc_pause_rx": s.pfc_pause_rx,
                "pfc_pause_tx": s.pfc_pause_tx,
                "drops": s.drops,
                "valid": self.last_valid,
                "problem": self.last_problem,
            }),
            (Some(s), None) => {
                serde_json::json!({"ts_ns": s.ts_ns, "valid": self.last_valid, "problem": self.last_problem})
            }
            _ => serde_json::Value::Null,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ts: u64, avg: f64, tx: u64) -> pb::TelemetrySample {
        pb::TelemetrySample {
            ts_ns: ts,
            link_bps: 100_000_000_000,
            queue_bytes_avg: avg,
            queue_bytes_max: avg.max(0.0) as u64 + 10,
            tx_bytes: tx,
            ..Default::default()
        }
    }

    #[test]
    fn nan_negative_and_impossible_samples_are_invalid() {
        assert!(problem(&sample(1, f64::NAN, 0), None).is_some());
        assert!(problem(&sample(1, -5.0, 0), None).is_some());
        assert!(problem(&sample(1, 10.0, 2_000_000), Some(100_000)).is_some());
        assert!(problem(&sample(1, 10.0, 1_000_000), Some(100_000)).is_none());
        // 1.2x line rate over 100 µs: a late counter read the SONiC poller passes on.
        assert!(problem(&sample(1, 10.0, 1_500_000), Some(100_000)).is_none());
        assert!(problem(&sample(1, 10.0, 1_600_000), Some(100_000)).is_some());
        let deeper_than_its_maximum = pb::TelemetrySample { queue_bytes: 21, ..sample(1, 10.0, 0) };
        assert!(problem(&deeper_than_its_maximum, None).is_some_and(|p| p.contains("below queue_bytes 21")));
    }

    /// A restarted actuator's clock starts again near 0: intervals on it count as measured
    /// under the queue's setting, however late on the old clock that setting took effect.
    #[test]
    fn a_telemetry_clock_that_starts_again_starts_the_watch_again() {
        let mut w = QueueWatch::keeping(8);
        for ts in [900_000_000, 900_100_000, 900_200_000] {
            w.push(&sample(ts, 5.0, 100));
        }
        w.setting_changed(None);
        assert_eq!(w.intervals_at_setting(), 0);
        for ts in [100_000, 200_000, 300_000, 400_000] {
            w.push(&sample(ts, 5.0, 100));
        }
        assert_eq!(w.recent(8).count(), 3, "only the new clock's intervals");
        assert_eq!(w.intervals_at_setting(), 3);
        assert!(w.recent(8).all(|i| i.start_ns >= 100_000));
    }

    #[test]
    fn huge_pause_counters_saturate() {
        let mut w = QueueWatch::keeping(8);
        w.push(&sample(100, 5.0, 0));
        w.push(&pb::TelemetrySample { pfc_pause_rx: u64::MAX, pfc_pause_tx: 7, ..sample(200, 5.0, 100) });
        assert_eq!(w.recent(1).next().map(|i| i.pauses), Some(u64::MAX));
    }

    #[test]
    fn the_window_before_a_change_counts_only_intervals_at_the_current_setting() {
        let mut w = QueueWatch::keeping(3);
        for ts in [100, 200, 300, 400, 500] {
            w.push(&sample(ts, 5.0, 100));
        }
        // Four intervals arrived; the watch keeps the window's three.
        assert_eq!((w.intervals_at_setting(), w.recent(10).count()), (3, 3));
        w.setting_changed(None);
        assert_eq!(w.intervals_at_setting(), 0);
        w.push(&sample(600, 5.0, 100));
        assert_eq!((w.intervals_at_setting(), w.recent(10).count()), (1, 3));
        // A change in effect from 800 ns, with the samples up to there still in flight: the
        // intervals that started before it were measured under the old setting.
        w.setting_changed(Some(800));
        for ts in [700, 800, 900] {
            w.push(&sample(ts, 5.0, 100));
        }
        assert_eq!(w.intervals_at_setting(), 1);
    }

    #[test]
    fn rates_are_measured_over_the_span_a_sample_states() {
        let mut w = QueueWatch::keeping(8);
        // 100 Gb/s for 100 µs is 1.25 MB; half that is 50% utilization.
        w.push(&sample(100_000, 5.0, 625_000));
        w.push(&sample(200_000, 5.0, 625_000));
        // The interval ending at 300 µs was dropped (a counter reset): the next sample covers
        // its own 100 µs, not the 200 µs since the sample before.
        let after = w.push(&pb::TelemetrySample { span_ns: 100_000, ..sample(400_000, 5.0, 625_000) }).unwrap();
        assert_eq!((after.start_ns, after.span_ns), (300_000, 100_000));
        assert!((after.utilization() - 0.5).abs() < 1e-9, "{}", after.utilization());
        assert_eq!(w.features().latest().unwrap().interval_ns, 100_000);
        // Without a stated span, the step; a stated span longer than the step is cut to it.
        let plain = w.push(&sample(600_000, 5.0, 625_000)).unwrap();
        assert_eq!(plain.span_ns, 200_000);
        let long = w.push(&pb::TelemetrySample { span_ns: 500_000, ..sample(700_000, 5.0, 625_000) }).unwrap();
        assert_eq!(long.span_ns, 100_000);
    }

    /// Offline training starts a queue's history again after a dropped or invalid sample;
    /// so does the controller, or a model would decide from intervals it reads as back to back.
    #[test]
    fn the_feature_history_starts_again_after_a_hole_or_an_invalid_sample() {
        let mut w = QueueWatch::keeping(8).with_feature_history(3);
        let observed = |w: &QueueWatch| w.features().intervals().count();
        for ts in [100_000, 200_000, 300_000, 400_000] {
            w.push(&sample(ts, 5.0, 100));
        }
        assert_eq!(observed(&w), 3);
        // The interval ending at 500 µs was dropped: the next one covers only its own 100 µs.
        w.push(&pb::TelemetrySample { span_ns: 100_000, ..sample(600_000, 5.0, 100) });
        assert_eq!(observed(&w), 1);
        w.push(&sample(700_000, 5.0, 100));
        assert_eq!(observed(&w), 2);
        // A poller's two clocks disagreeing by a little is no hole.
        w.push(&pb::TelemetrySample { span_ns: 99_000, ..sample(800_000, 5.0, 100) });
        assert_eq!(observed(&w), 3);
        // An invalid sample: the next valid one starts the history again.
        w.push(&sample(900_000, f64::NAN, 100));
        assert_eq!(observed(&w), 0);
        w.push(&sample(1_000_000, 5.0, 100));
        assert_eq!(observed(&w), 1);
    }

    #[test]
    fn the_feature_history_holds_as_many_intervals_as_the_model_observes() {
        let history = ecn_models::card::MAX_HISTORY;
        let mut w = QueueWatch::keeping(3).with_feature_history(history);
        for i in 0..=history as u64 + 5 {
            w.push(&sample(100_000 * (i + 1), 5.0, 100));
        }
        assert_eq!(w.features().intervals().count(), history);
    }

    #[test]
    fn health_tracks_validity_and_freshness() {
        let mut w = QueueWatch::keeping(8);
        let t = Duration::from_secs(1);
        assert_eq!(w.health(Instant::now(), t), TelemetryHealth::Stale);
        w.push(&sample(100, 5.0, 0));
        w.push(&sample(200, 5.0, 100));
        assert_eq!(w.health(Instant::now(), t), TelemetryHealth::Good);
        assert_eq!(w.recent(5).count(), 1);
        w.push(&sample(300, f64::NAN, 100));
        assert_eq!(w.health(Instant::now(), t), TelemetryHealth::Invalid);
        assert_eq!(w.health(Instant::now() + Duration::from_secs(2), t), TelemetryHealth::Stale);
    }
}
