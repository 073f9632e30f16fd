//! The per-queue checks that need the queue's history: duplicates, order, gaps, cumulative
//! counters (wrap, reset) and the plausibility of per-interval deltas. One [`Track`] per queue
//! holds only that queue's last sample, so memory is bounded by the number of queues, not by
//! the file.

use super::problem::{Collector, ProblemKind};
use super::{Continuity, CounterMode, QueueSample, ReadOptions};
use crate::counters::{counter_step, max_plausible_bytes, CounterStep, CounterWidth};

/// Steps used to infer a queue's sample interval: the median of the queue's first steps. A
/// fixed prefix (not the whole queue) so that streaming and in-memory reading agree and the
/// streaming reader holds back only a few samples per queue.
pub(crate) const INTERVAL_STEPS: usize = 32;

/// The smallest Ethernet frame, bytes: bounds packet and PAUSE-frame counts by line rate.
const MIN_FRAME_BYTES: u64 = 64;

/// More ports than any switch has (512 on the largest in 2026): bounds the drops of one queue.
const MAX_INGRESS_PORTS: u64 = 1024;

/// The counter columns, in [`QueueSample`] field order.
pub(crate) const COUNTER_COLUMNS: [&str; 7] =
    ["tx_bytes", "tx_pkts", "ecn_marked_pkts", "pfc_pause_rx", "pfc_pause_tx", "paused_ns", "drops"];

fn counters(s: &QueueSample) -> [u64; 7] {
    [s.tx_bytes, s.tx_pkts, s.ecn_marked_pkts, s.pfc_pause_rx, s.pfc_pause_tx, s.paused_ns, s.drops]
}

fn set_counters(s: &mut QueueSample, c: [u64; 7]) {
    [s.tx_bytes, s.tx_pkts, s.ecn_marked_pkts, s.pfc_pause_rx, s.pfc_pause_tx, s.paused_ns, s.drops] = c;
}

/// The largest plausible value of each counter over `interval_ns` on a `link_bps` link. Drops
/// come from many ingress ports overrunning one egress, so their bound is loose: what
/// [`MAX_INGRESS_PORTS`] ports could send at this rate, enough for any incast and far below
/// a wrapped 64-bit counter.
fn plausible_max(link_bps: u64, interval_ns: u64) -> [Option<u64>; 7] {
    let bytes = max_plausible_bytes(link_bps, interval_ns);
    let frames = bytes / MIN_FRAME_BYTES;
    let paused = interval_ns.saturating_add(interval_ns / 4);
    [
        Some(bytes),
        Some(frames),
        Some(frames),
        Some(frames),
        Some(frames),
        Some(paused),
        Some(frames.saturating_mul(MAX_INGRESS_PORTS)),
    ]
}

/// Where the columns of one interval (as deltas) contradict each other, the column to blame and
/// why. A queue marks only packets it sends, and neither its depth at the interval's end nor
/// its time average can exceed the maximum taken over the interval (the average give or take
/// a byte of rounding).
fn inconsistency(s: &QueueSample) -> Option<(&'static str, String)> {
    if s.ecn_marked_pkts > s.tx_pkts {
        let why = format!("{} packets marked, but only {} sent in the interval", s.ecn_marked_pkts, s.tx_pkts);
        return Some(("ecn_marked_pkts", why));
    }
    if s.queue_bytes > s.queue_bytes_max {
        let why = format!("depth {} at the end is above the interval's maximum {}", s.queue_bytes, s.queue_bytes_max);
        return Some(("queue_bytes", why));
    }
    let max = s.queue_bytes_max as f64;
    if s.queue_bytes_avg > max + 1.0 + max * 1e-9 {
        let why = format!("mean depth {} is above the interval's maximum {}", s.queue_bytes_avg, s.queue_bytes_max);
        return Some(("queue_bytes_avg", why));
    }
    None
}

/// The first column whose value differs between two samples of the same timestamp.
fn first_difference(a: &QueueSample, b: &QueueSample) -> &'static str {
    let ca = counters(a);
    let cb = counters(b);
    if let Some(i) = (0..7).find(|&i| ca[i] != cb[i]) {
        return COUNTER_COLUMNS[i];
    }
    let fields: [(&'static str, bool); 8] = [
        ("link_bps", a.link_bps != b.link_bps),
        ("queue_bytes", a.queue_bytes != b.queue_bytes),
        ("queue_bytes_avg", a.queue_bytes_avg.to_bits() != b.queue_bytes_avg.to_bits()),
        ("queue_bytes_max", a.queue_bytes_max != b.queue_bytes_max),
        ("kmin_bytes", a.kmin_bytes != b.kmin_bytes),
        ("kmax_bytes", a.kmax_bytes != b.kmax_bytes),
        ("pmax", a.pmax.to_bits() != b.pmax.to_bits()),
        ("span_ns", a.span_ns != b.span_ns),
    ];
    fields.iter().find(|(_, d)| *d).map_or("ts_ns", |(c, _)| c)
}

/// Median of the positive steps between consecutive timestamps.
fn median_step(ts: impl Iterator<Item = u64>) -> Option<u64> {
    let mut prev = None;
    let mut steps = Vec::with_capacity(INTERVAL_STEPS);
    for t in ts {
        if let Some(p) = prev {
            if t > p {
                steps.push(t - p);
            }
        }
        prev = Some(t);
    }
    if steps.is_empty() {
        return None;
    }
    steps.sort_unstable();
    Some(steps[steps.len() / 2])
}

/// One queue's state.
#[derive(Debug)]
pub(crate) struct Track {
    /// The sample interval, once known (given by the caller or inferred).
    pub(crate) interval_ns: Option<u64>,
    /// Samples held back until the interval is inferred: `(row, sample)`.
    warmup: Vec<(u64, QueueSample)>,
    warming: bool,
    /// The last sample seen (kept or dropped), with its row.
    last: Option<(u64, QueueSample)>,
    /// The previous cumulative counter values; `None` when the next sample must be a baseline.
    cumulative: Option<[u64; 7]>,
    /// Continuity of the next delivered sample.
    next: Continuity,
    /// The queue is rejected (unknown): its rows are skipped.
    pub(crate) rejected: bool,
    /// The last plausibility bounds computed, keyed by (link_bps, interval_ns): the bound
    /// needs a 128-bit division, too slow to repeat on every row.
    bounds: Option<(u64, u64, [Option<u64>; 7])>,
    /// What the queue's rows came to, to judge the queue as a whole.
    tally: Tally,
}

/// A queue's rows as a whole, judged on `tx_bytes` (the counter every queue moves; another
/// counter may behave otherwise, a `drops` cleared on read). Cumulative readings read as
/// deltas are told from deltas with a few bad values by most of them being beyond line rate
/// and rising (timestamps in another unit, or a link rate in kb/s, make deltas look too large
/// too, but they go up and down); deltas read as cumulative readings, by going down at far more
/// of their changes than a counter is cleared; counters refreshed less often than sampled, by
/// standing still for most rows and then leaping beyond line rate; a repair that drops most of
/// a queue's rows has met a misread file, not a damaged one.
#[derive(Debug, Default)]
struct Tally {
    /// Rows judged, in time order.
    rows: u64,
    /// Of them, rows with a delta beyond line rate.
    implausible: u64,
    /// Of them, rows whose sample was dropped (or would be, by repair).
    dropped: u64,
    /// How often `tx_bytes` went up, and down, from one row to the next.
    rises: u64,
    falls: u64,
    /// Rows with traffic: a delta above 0, or a cumulative reading above the one before.
    busy: u64,
    /// Of them, rows dropped.
    busy_dropped: u64,
    /// Whether the row judged last had traffic.
    last_busy: bool,
    /// Samples that passed every check: what a repair keeps (delivered, unless the read failed).
    kept: u64,
    /// Rows where `tx_bytes` changed at all (read as cumulative).
    moved: u64,
    /// Read as cumulative: rows where `tx_bytes` went down, but not as a 32-bit counter could
    /// wrap (SNMP's are; `validate` reads 64-bit counters, so a wrap is dropped as a reset, but
    /// it says nothing about how the file was read).
    went_down: u64,
    /// Traffic in `tx_bytes`, as repair would keep and drop it.
    traffic: Traffic,
}

/// A queue's traffic in `tx_bytes`, split by whether repair keeps it: counters refreshed less
/// often than sampled stand still, then leap beyond line rate, and repair drops every leap.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Traffic {
    /// Rows judged.
    pub(crate) rows: u64,
    /// Rows where `tx_bytes` moved: a cumulative reading changed, or a delta was not 0.
    pub(crate) moved: u64,
    /// Rows where it moved up by more than line rate allows, but not absurdly more.
    pub(crate) leaps: u64,
    /// Bytes in those leaps.
    pub(crate) leap_bytes: u128,
    /// Bytes in moves line rate allows.
    pub(crate) plausible_bytes: u128,
}

/// Beyond this many times line rate a leap is a counter reset or wrap (2^64 less a little, in
/// a delta file), not traffic a slow refresh gathered: a switch refreshing every 10 s, polled
/// every 10 ms, leaps 1000 intervals' worth.
const MAX_LEAP_INTERVALS: u64 = 1_000;

impl Traffic {
    /// Counts one row's move of `bytes` where line rate allows `max` (`None`: unknown, not
    /// judged).
    fn count(&mut self, bytes: u64, max: Option<u64>) {
        self.moved += u64::from(bytes > 0);
        match max {
            Some(m) if bytes > m && bytes / MAX_LEAP_INTERVALS <= m => {
                self.leaps += 1;
                self.leap_bytes += u128::from(bytes);
            }
            Some(m) if bytes <= m => self.plausible_bytes += u128::from(bytes),
            _ => {}
        }
    }
}

/// What the tracks need to know about the read.
pub(crate) struct TrackContext<'a> {
    pub(crate) opts: &'a ReadOptions,
    pub(crate) counters: CounterMode,
    /// Streaming cannot sort, so an out-of-order row is an error even with repair.
    pub(crate) streaming: bool,
}

impl Track {
    pub(crate) fn new(interval_ns: Option<u64>) -> Self {
        Track {
            interval_ns,
            warmup: Vec::new(),
            warming: interval_ns.is_none(),
            last: None,
            cumulative: None,
            next: Continuity::First,
            rejected: false,
            bounds: None,
            tally: Tally::default(),
        }
    }

    /// Most of the queue's rows (at least three) have a delta beyond line rate.
    pub(crate) fn mostly_implausible(&self) -> bool {
        let t = &self.tally;
        t.rows >= 3 && t.implausible * 2 > t.rows
    }

    /// Read as deltas, the queue's counters look cumulative: mostly implausible, and `tx_bytes`
    /// changing at 3 rows or more, going down at most once in 20 of them (a counter cleared
    /// by a reboot or a syncd restart), where deltas go up and down. Standing still between
    /// changes is what a cumulative counter of a bursty queue does. Returns `None` where the
    /// queue is not mostly implausible or changed too little to judge (a flat queue says
    /// nothing: a constant implausible delta is as misread as a constant cumulative count).
    pub(crate) fn looks_cumulative(&self) -> Option<bool> {
        let t = &self.tally;
        let changes = t.rises + t.falls;
        (self.mostly_implausible() && changes >= 3).then_some(t.falls * 20 <= changes)
    }

    /// Read as cumulative, the queue's `tx_bytes` looks like per-interval deltas: it moved
    /// at 10 rows or more, and went down at more than a fifth of them. A cumulative counter
    /// goes down only when cleared (a reboot, a syncd restart); deltas go down about as often
    /// as they go up. Returns `(went_down, moved)`, or `None` where the queue moved too little
    /// to judge.
    pub(crate) fn looks_delta(&self) -> Option<(bool, (u64, u64))> {
        let t = &self.tally;
        (t.moved >= 10).then_some((t.went_down * 5 > t.moved, (t.went_down, t.moved)))
    }

    /// The queue's traffic in `tx_bytes`.
    pub(crate) fn traffic(&self) -> Traffic {
        Traffic { rows: self.tally.rows, ..self.tally.traffic }
    }

    /// `(dropped, rows, dropped with traffic, rows with traffic)` where more than half of at
    /// least three rows were dropped, or of at least three rows with traffic (a bursty queue's
    /// idle rows hid that repair dropped every row that carried bytes).
    pub(crate) fn mostly_dropped(&self) -> Option<[u64; 4]> {
        let t = &self.tally;
        let most = |part: u64, all: u64| all >= 3 && part * 2 > all;
        let counts = [t.dropped, t.rows, t.busy_dropped, t.busy];
        (most(t.dropped, t.rows) || most(t.busy_dropped, t.busy)).then_some(counts)
    }

    /// Samples that passed every check.
    pub(crate) fn kept(&self) -> u64 {
        self.tally.kept
    }

    /// Rows with traffic.
    pub(crate) fn busy(&self) -> u64 {
        self.tally.busy
    }

    /// Rows judged.
    pub(crate) fn rows(&self) -> u64 {
        self.tally.rows
    }

    /// Counts a row taken in time order as the queue's latest.
    fn judge(&mut self, row: u64, s: QueueSample, counters: CounterMode) {
        let previous = self.last.map(|(_, last)| last.tx_bytes);
        let t = &mut self.tally;
        t.rows += 1;
        t.rises += u64::from(previous.is_some_and(|tx| s.tx_bytes > tx));
        t.falls += u64::from(previous.is_some_and(|tx| s.tx_bytes < tx));
        t.last_busy = match counters {
            CounterMode::Delta => s.tx_bytes > 0,
            CounterMode::Cumulative => previous.is_some_and(|tx| s.tx_bytes > tx),
        };
        t.busy += u64::from(t.last_busy);
        self.last = Some((row, s));
    }

    /// Drops the latest row's sample: the next one delivered starts a new segment.
    fn drop_sample(&mut self) {
        self.tally.dropped += 1;
        self.tally.busy_dropped += u64::from(self.tally.last_busy);
        self.next = Continuity::AfterDrop;
    }

    /// Takes the queue's next sample (in timestamp order, as the file gives it) and delivers
    /// it through `sink` unless it is dropped.
    pub(crate) fn push(
        &mut self,
        row: u64,
        sample: QueueSample,
        cx: &TrackContext<'_>,
        problems: &mut Collector,
        sink: &mut dyn FnMut(&QueueSample, Continuity),
    ) {
        if self.warming {
            self.warmup.push((row, sample));
            if self.warmup.len() > INTERVAL_STEPS {
                self.end_warmup(cx, problems, sink);
            }
            return;
        }
        self.process(row, sample, cx, problems, sink);
    }

    /// Flushes what the track holds back; call once at the end of the file.
    pub(crate) fn finish(
        &mut self,
        cx: &TrackContext<'_>,
        problems: &mut Collector,
        sink: &mut dyn FnMut(&QueueSample, Continuity),
    ) {
        if self.warming {
            self.end_warmup(cx, problems, sink);
        }
    }

    fn end_warmup(
        &mut self,
        cx: &TrackContext<'_>,
        problems: &mut Collector,
        sink: &mut dyn FnMut(&QueueSample, Continuity),
    ) {
        self.warming = false;
        self.interval_ns = median_step(self.warmup.iter().map(|(_, s)| s.ts_ns));
        for (row, sample) in std::mem::take(&mut self.warmup) {
            self.process(row, sample, cx, problems, sink);
        }
    }

    fn plausible_max(&mut self, link_bps: u64, interval_ns: u64) -> [Option<u64>; 7] {
        match self.bounds {
            Some((l, i, max)) if l == link_bps && i == interval_ns => max,
            _ => {
                let max = plausible_max(link_bps, interval_ns);
                self.bounds = Some((link_bps, interval_ns, max));
                max
            }
        }
    }

    fn process(
        &mut self,
        row: u64,
        mut s: QueueSample,
        cx: &TrackContext<'_>,
        problems: &mut Collector,
        sink: &mut dyn FnMut(&QueueSample, Continuity),
    ) {
        // Cumulative counters cover the step since the reading before, whatever a row says.
        if cx.counters == CounterMode::Cumulative {
            s.span_ns = 0;
        }
        // The time this sample's counters cover: as the row states it (at most the step since
        // the row before), else that step.
        let stated = (s.span_ns > 0).then_some(s.span_ns);
        let mut span_ns = stated;
        if let Some((last_row, last)) = &self.last {
            if s.ts_ns == last.ts_ns {
                if s == *last {
                    problems.push(Some(row), None, ProblemKind::Duplicate { first_row: *last_row }, true);
                } else {
                    let column = first_difference(&s, last);
                    let kind = ProblemKind::ConflictingDuplicate { first_row: *last_row };
                    problems.push(Some(row), Some(column), kind, false);
                }
                return;
            }
            if s.ts_ns < last.ts_ns {
                let kind = ProblemKind::OutOfOrder { previous_row: *last_row };
                problems.push(Some(row), Some("ts_ns"), kind, !cx.streaming);
                return;
            }
            let step = s.ts_ns - last.ts_ns;
            // A poller's two clocks may disagree by a rounding; more is an overlap.
            if let Some(stated) = stated.filter(|&stated| stated > step.saturating_add(step / 100)) {
                self.judge(row, s, cx.counters);
                let why = format!("covers {stated} ns, but the queue's previous row is only {step} ns earlier");
                problems.push(Some(row), Some("span_ns"), ProblemKind::Inconsistent(why), true);
                self.drop_sample();
                return;
            }
            let mut span = stated.map_or(step, |stated| stated.min(step));
            if let Some(interval_ns) = self.interval_ns {
                // Rows are missing where the time no row covers is more than jitter: the step
                // is judged as if this row covered one interval, so a late poll that says it
                // covers its whole step misses nothing.
                // Saturating: a step or an interval of more than 2^63 ns (a corrupt timestamp)
                // overflowed here.
                let judged = if stated.is_some() { (step - span).saturating_add(interval_ns) } else { step };
                if judged as f64 > cx.opts.max_gap_intervals * interval_ns as f64 {
                    problems.push(
                        Some(row),
                        Some("ts_ns"),
                        ProblemKind::Gap { step_ns: step, interval_ns, covered_ns: stated.map(|_| span) },
                        true,
                    );
                    self.next = Continuity::AfterGap;
                    // Cumulative counters across a gap give the sum over the missing intervals,
                    // not this interval's delta: start again from a baseline.
                    self.cumulative = None;
                    // The deltas of the missing polls went with their rows; this one's covers
                    // what it says, or no more than an interval.
                    if stated.is_none() {
                        span = interval_ns;
                    }
                }
            }
            span_ns = Some(span);
        }
        self.judge(row, s, cx.counters);
        if stated.is_some() {
            s.span_ns = span_ns.unwrap_or(s.span_ns);
        }

        match cx.counters {
            CounterMode::Cumulative => {
                let current = counters(&s);
                let Some(previous) = self.cumulative.replace(current) else {
                    problems.report.baseline_samples += 1;
                    return;
                };
                let max = self.plausible_max(s.link_bps, span_ns.unwrap_or(0));
                let (before, now) = (previous[0], current[0]);
                // Where the link could carry 2^32 bytes in the step, a 32-bit counter wraps beyond
                // counting, and any fall would pass for a wrap: deltas of a 1 s poll at 100G did.
                let wraps = max[0].is_some_and(|m| m < 1 << 32)
                    && matches!(counter_step(before, now, CounterWidth(32), max[0]), CounterStep::Wrapped(_));
                self.tally.moved += u64::from(now != before);
                self.tally.went_down += u64::from(now < before && !wraps);
                if now >= before {
                    self.tally.traffic.count(now - before, max[0]);
                }
                let mut deltas = [0u64; 7];
                for i in 0..7 {
                    match counter_step(previous[i], current[i], cx.opts.counter_width, max[i]) {
                        CounterStep::Delta(d) | CounterStep::Wrapped(d) => deltas[i] = d,
                        CounterStep::Reset => {
                            let kind = ProblemKind::CounterReset { previous: previous[i], current: current[i] };
                            problems.push(Some(row), Some(COUNTER_COLUMNS[i]), kind, true);
                            self.drop_sample();
                            return;
                        }
                    }
                }
                set_counters(&mut s, deltas);
            }
            CounterMode::Delta => {
                // A delta covers the time since the poll before it, so it is judged over that
                // step, as cumulative counters are: a late poll carries more bytes.
                if let Some(span_ns) = span_ns.or(self.interval_ns) {
                    let values = counters(&s);
                    let max = self.plausible_max(s.link_bps, span_ns);
                    self.tally.traffic.count(s.tx_bytes, max[0]);
                    for i in 0..7 {
                        if let Some(m) = max[i] {
                            if values[i] > m {
                                self.tally.implausible += 1;
                                let kind = ProblemKind::ImplausibleDelta { value: values[i], max: m, span_ns };
                                problems.push(Some(row), Some(COUNTER_COLUMNS[i]), kind, true);
                                self.drop_sample();
                                return;
                            }
                        }
                    }
                }
            }
        }
        if let Some((column, why)) = inconsistency(&s) {
            problems.push(Some(row), Some(column), ProblemKind::Inconsistent(why), true);
            self.drop_sample();
            return;
        }
        self.tally.kept += 1;
        if !problems.failed() {
            sink(&s, self.next);
        }
        self.next = Continuity::Continues;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_ignores_repeats_and_backsteps() {
        assert_eq!(median_step([0, 10, 20, 20, 30, 100].into_iter()), Some(10));
        assert_eq!(median_step([5].into_iter()), None);
        assert_eq!(median_step([9, 3].into_iter()), None);
    }

    /// Two rows of one timestamp are told apart by the column that differs, the span too (it
    /// was blamed on `ts_ns`).
    #[test]
    fn a_conflicting_duplicate_names_the_column_that_differs() {
        let s = QueueSample { ts_ns: 300_000, ..Default::default() };
        assert_eq!(first_difference(&s, &QueueSample { span_ns: 100_000, ..s }), "span_ns");
        assert_eq!(first_difference(&s, &QueueSample { tx_bytes: 1, ..s }), "tx_bytes");
    }

    /// The depth at an interval's end is one of the depths its maximum is taken over; a mean
    /// is within them too. (A queue above its own maximum passed unnoticed.)
    #[test]
    fn an_interval_contradicting_itself_names_the_column() {
        let s = QueueSample {
            queue_bytes: 10,
            queue_bytes_avg: 5.0,
            queue_bytes_max: 10,
            tx_pkts: 2,
            ..Default::default()
        };
        assert_eq!(inconsistency(&s), None);
        assert_eq!(inconsistency(&QueueSample { queue_bytes: 11, ..s }).map(|(c, _)| c), Some("queue_bytes"));
        assert_eq!(inconsistency(&QueueSample { queue_bytes_avg: 12.0, ..s }).map(|(c, _)| c), Some("queue_bytes_avg"));
        assert_eq!(inconsistency(&QueueSample { ecn_marked_pkts: 3, ..s }).map(|(c, _)| c), Some("ecn_marked_pkts"));
    }

    #[test]
    fn plausible_counts_follow_line_rate() {
        // 100 Gb/s for 10 µs: 125 kB, 156.25 kB with slack; 2441 minimum-size frames.
        let m = plausible_max(100_000_000_000, 10_000);
        assert_eq!(m[0], Some(156_250));
        assert_eq!(m[1], Some(2_441));
        assert_eq!(m[5], Some(12_500));
        // Drops: what 1024 ports send, so that a wrapped counter (2^63 and up) is caught.
        assert_eq!(m[6], Some(2_441 * 1024));
        assert!(plausible_max(u64::MAX, u64::MAX)[6].is_some());
    }
}
