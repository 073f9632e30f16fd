//! Validated telemetry ingest: Parquet or CSV files of the telemetry schema (README
//! "Telemetry schema") into per-queue time series, with every problem reported by file, row
//! and column, and an explicit repair policy.
//!
//! Two entry points:
//! - [`load_telemetry`] reads a file that fits in memory into one [`QueueSeries`] per queue;
//! - [`stream_telemetry`] reads a file of any size one Parquet row group (or 64 Ki CSV rows)
//!   at a time and hands each sample to a callback, keeping only per-queue state.
//!
//! **Problems** (each located by 1-based data row and column where one applies): unreadable
//! or truncated file, empty file, other schema major version, missing column, wrong type, null,
//! NaN or infinity, negative value, queue index above 7, zero link rate, duplicate rows (exact
//! or conflicting), rows out of order within a queue, gaps longer than
//! [`ReadOptions::max_gap_intervals`] sample intervals, implausible per-interval deltas
//! (beyond line rate × interval with 25% slack), counter resets (cumulative files), unknown
//! queues, and an ECN setting that contradicts itself or the bounds.
//!
//! **Repair** ([`ReadOptions::repair`]) fixes only what has one safe answer: it sorts rows
//! into time order (in memory only), drops exact duplicates, drops a sample across a counter
//! reset or with an implausible delta, and marks gaps; a dropped sample or a gap is a
//! continuity break ([`Continuity`], [`QueueSeries::segment_starts`]) so that no history is
//! built across it. Everything else stays an error. Streaming cannot sort a file larger than
//! memory, so there an out-of-order row stays an error even with repair.

mod csv;
mod parquet;
pub mod problem;
mod rows;
mod track;

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::counters::CounterWidth;
use crate::io::TelemetryFormat;
use crate::records::TelemetrySample;

use problem::Collector;
pub use problem::{counted, Problem, ProblemKind, RepairReport, TelemetryError};
use rows::{check_rows, Batch, Interner};
use track::{Track, TrackContext, Traffic};

/// Parquet key-value metadata key saying how the file's counters are given: `delta` (the
/// schema's default when the key is absent) or `cumulative`.
pub const COUNTERS_KEY: &str = "ecn_tuner.counters";

/// How counter columns are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterMode {
    /// Per-interval deltas (the schema's default).
    #[default]
    Delta,
    /// Cumulative hardware counters, turned into deltas with wrap and reset handling.
    Cumulative,
}

impl CounterMode {
    /// `delta` or `cumulative`, as in the metadata key and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            CounterMode::Delta => "delta",
            CounterMode::Cumulative => "cumulative",
        }
    }

    /// Parses `delta` or `cumulative`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "delta" => Some(CounterMode::Delta),
            "cumulative" => Some(CounterMode::Cumulative),
            _ => None,
        }
    }
}

/// Bounds on the ECN setting in effect, checked on every row when given (mirrors
/// `ecn_env::tuning::Bounds`, which this crate cannot depend on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettingBounds {
    /// Smallest Kmin.
    pub kmin_min_bytes: u64,
    /// Largest Kmax.
    pub kmax_max_bytes: u64,
    /// Smallest Pmax.
    pub pmax_min: f64,
    /// Largest Pmax.
    pub pmax_max: f64,
}

/// How to read and check a telemetry file.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Counter mode; `None` follows the file's [`COUNTERS_KEY`] (delta when absent). Asking for
    /// one mode when the file's key says the other is a problem.
    pub counters: Option<CounterMode>,
    /// Width of cumulative counters, for wrap detection (64 for SAI; 32 for SNMP `ifInOctets`).
    pub counter_width: CounterWidth,
    /// A step between two samples of a queue longer than this many sample intervals is a gap.
    pub max_gap_intervals: f64,
    /// The sample interval; `None` infers it per queue as the median of its first 32 steps.
    pub interval_ns: Option<u64>,
    /// The queues the caller knows; a row of any other queue is a problem. `None` accepts all.
    pub known_queues: Option<HashSet<QueueKey>>,
    /// Bounds the setting in effect must respect, besides `kmin <= kmax` and `pmax in [0, 1]`.
    pub bounds: Option<SettingBounds>,
    /// Repair what can safely be repaired (see the module documentation).
    pub repair: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            counters: None,
            counter_width: CounterWidth::SAI,
            max_gap_intervals: 1.5,
            interval_ns: None,
            known_queues: None,
            bounds: None,
            repair: false,
        }
    }
}

/// A queue's identity. The names are shared (`Arc`), so cloning a key allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey {
    /// Switch name.
    pub switch: Arc<str>,
    /// Egress port name.
    pub port: Arc<str>,
    /// Priority 0–7.
    pub queue: u8,
}

impl QueueKey {
    /// A key from plain names.
    pub fn new(switch: &str, port: &str, queue: u8) -> Self {
        QueueKey { switch: switch.into(), port: port.into(), queue }
    }
}

impl fmt::Display for QueueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.switch, self.port, self.queue)
    }
}

pub use crate::records::QueueSample;

impl QueueSample {
    /// The full row, with its queue's identity.
    pub fn to_row(&self, key: &QueueKey) -> TelemetrySample {
        TelemetrySample { switch: key.switch.to_string(), port: key.port.to_string(), queue: key.queue, sample: *self }
    }
}

/// How a delivered sample relates to the previous delivered sample of its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuity {
    /// The queue's first sample.
    First,
    /// Directly follows the previous sample: history may be built across.
    Continues,
    /// Follows a gap in the recording (repaired): start the history again.
    AfterGap,
    /// Follows a dropped sample (counter reset, implausible delta; repaired): start again.
    AfterDrop,
}

impl Continuity {
    /// True if the sample starts a new continuous segment.
    pub fn is_break(self) -> bool {
        self != Continuity::Continues
    }
}

/// Dense id of a queue within one read: an index into [`StreamSummary::queues`], in order of
/// first appearance, so per-queue state can live in a `Vec`.
pub type QueueId = u32;

/// One queue's validated history.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSeries {
    /// The queue.
    pub key: QueueKey,
    /// Its sample interval (given or inferred); `None` for a queue with a single sample.
    pub interval_ns: Option<u64>,
    /// Samples in time order, counters as per-interval deltas.
    pub samples: Vec<QueueSample>,
    /// Index of the first sample of each continuous segment (always `0` first when there are
    /// samples): a history must not be built across a segment start.
    pub segment_starts: Vec<usize>,
}

impl QueueSeries {
    /// The continuous segments, in order.
    pub fn segments(&self) -> impl Iterator<Item = &[QueueSample]> + '_ {
        let ends = self.segment_starts.iter().skip(1).copied().chain(std::iter::once(self.samples.len()));
        self.segment_starts.iter().zip(ends).map(move |(&a, b)| &self.samples[a..b])
    }
}

/// A file read by [`load_telemetry`].
#[derive(Debug, Clone)]
pub struct TelemetryData {
    /// The file.
    pub path: PathBuf,
    /// How its counters were given.
    pub counters: CounterMode,
    /// One series per queue, ordered by (switch, port, queue).
    pub queues: Vec<QueueSeries>,
    /// Data rows in the file.
    pub rows: u64,
    /// What repair changed.
    pub report: RepairReport,
}

impl TelemetryData {
    /// Number of samples over all queues.
    pub fn samples(&self) -> usize {
        self.queues.iter().map(|q| q.samples.len()).sum()
    }

    /// All samples as rows, ordered by time and then queue (how the simulator writes them), for
    /// writing a repaired file.
    pub fn to_rows(&self) -> Vec<TelemetrySample> {
        let mut order: Vec<(u64, usize, usize)> = Vec::with_capacity(self.samples());
        for (q, series) in self.queues.iter().enumerate() {
            order.extend(series.samples.iter().enumerate().map(|(i, s)| (s.ts_ns, q, i)));
        }
        order.sort_unstable();
        order.into_iter().map(|(_, q, i)| self.queues[q].samples[i].to_row(&self.queues[q].key)).collect()
    }
}

/// What [`stream_telemetry`] read.
#[derive(Debug, Clone)]
pub struct StreamSummary {
    /// The file.
    pub path: PathBuf,
    /// How its counters were given.
    pub counters: CounterMode,
    /// Every queue, indexed by [`QueueId`].
    pub queues: Vec<QueueKey>,
    /// Each queue's sample interval (given or inferred), indexed by [`QueueId`].
    pub intervals_ns: Vec<Option<u64>>,
    /// Data rows in the file.
    pub rows: u64,
    /// Samples delivered to the callback.
    pub samples: u64,
    /// What repair changed.
    pub report: RepairReport,
}

/// Either source.
enum Source {
    Parquet(parquet::ParquetSource),
    // Boxed: the CSV reader's buffers and line counts make it several times the Parquet one.
    Csv(Box<csv::CsvSource>),
}

impl Source {
    fn next_batch(&mut self, batch: &mut Batch, interner: &mut Interner, problems: &mut Collector) -> bool {
        match self {
            Source::Parquet(s) => s.next_batch(batch, interner, problems),
            Source::Csv(s) => s.next_batch(batch, interner, problems),
        }
    }
}

/// Opens the file and settles the counter mode; `None` after a problem that stops reading.
/// Returns the source, the counter mode, and whether the file's own key states a mode.
fn open(path: &Path, opts: &ReadOptions, problems: &mut Collector) -> Option<(Source, CounterMode, bool)> {
    let (source, key) = match TelemetryFormat::of(path) {
        Some(TelemetryFormat::Parquet) => {
            let s = parquet::ParquetSource::open(path, problems)?;
            let key = s.counters_key.clone();
            (Source::Parquet(s), key)
        }
        Some(TelemetryFormat::Csv) => (Source::Csv(Box::new(csv::CsvSource::open(path, problems)?)), None),
        None => {
            let m = "unknown file type: the name must end in .parquet or .csv".to_string();
            problems.push(None, None, ProblemKind::Unreadable(m), false);
            return None;
        }
    };
    let file_mode = match key.as_deref() {
        None => None,
        Some(v) => match CounterMode::parse(v) {
            Some(m) => Some(m),
            None => {
                let m = format!("metadata key {COUNTERS_KEY} is `{v}`, expected `delta` or `cumulative`");
                problems.push(None, None, ProblemKind::Unreadable(m), false);
                return None;
            }
        },
    };
    let mode = match (opts.counters, file_mode) {
        (Some(asked), Some(file)) if asked != file => {
            let kind = ProblemKind::CounterModeConflict { file: file.as_str().into(), requested: asked.as_str() };
            problems.push(None, None, kind, false);
            return None;
        }
        (Some(asked), _) => asked,
        (None, file) => file.unwrap_or_default(),
    };
    Some((source, mode, file_mode.is_some()))
}

/// What [`scan`] hands on.
enum Scanned {
    /// The next queue id was seen for the first time; `known` unless the caller's set of
    /// known queues lacks it.
    Queue { known: bool },
    /// A row that passed the row-level checks.
    Row { id: QueueId, row: u64, sample: QueueSample },
}

/// Reads the file batch by batch, checks each row, and hands on new queues and good rows.
/// Returns the number of data rows.
fn scan(
    source: &mut Source,
    opts: &ReadOptions,
    interner: &mut Interner,
    problems: &mut Collector,
    mut on: impl FnMut(&Interner, Scanned, &mut Collector),
) -> u64 {
    let mut batch = Batch::default();
    let mut rows = 0;
    let mut queues = 0usize;
    while source.next_batch(&mut batch, interner, problems) {
        rows += batch.len() as u64;
        check_rows(&mut batch, opts, problems);
        for i in 0..batch.len() {
            if !batch.ok[i] {
                continue;
            }
            let id = batch.ids[i];
            while queues <= id as usize {
                // Ids are dense and handed out in order, so each new one is the next index.
                let key = &interner.keys[queues];
                let known = opts.known_queues.as_ref().is_none_or(|k| k.contains(key));
                if !known {
                    problems.push(Some(batch.row(i)), Some("queue"), ProblemKind::UnknownQueue(key.to_string()), false);
                }
                on(interner, Scanned::Queue { known }, problems);
                queues += 1;
            }
            on(interner, Scanned::Row { id, row: batch.row(i), sample: batch.samples[i] }, problems);
        }
    }
    rows
}

/// Whether a queue looks as a rule says, with the counts behind it: `(rows that look so, rows
/// judged)`.
type Judged = (bool, (u64, u64));

/// A queue's rows as a whole, for [`judge_the_whole`].
struct QueueVerdict {
    key: QueueKey,
    rows: u64,
    /// Rows with traffic.
    busy: u64,
    interval_ns: Option<u64>,
    /// More than half of at least 3 rows have a delta beyond line rate.
    mostly_implausible: bool,
    /// Samples that passed every check.
    kept: u64,
    /// Judged where the queue is mostly implausible and changed enough: whether it looks so.
    looks_cumulative: Option<bool>,
    /// Judged where the queue moved enough: whether it looks so, and the counts that say.
    looks_delta: Option<Judged>,
    traffic: Traffic,
    /// `(dropped, rows, dropped with traffic, rows with traffic)`, where most rows, or most
    /// rows with traffic, have a sample to drop.
    mostly_bad: Option<[u64; 4]>,
}

impl QueueVerdict {
    fn of(key: &QueueKey, track: &Track) -> Self {
        QueueVerdict {
            key: key.clone(),
            rows: track.rows(),
            busy: track.busy(),
            interval_ns: track.interval_ns,
            mostly_implausible: track.mostly_implausible(),
            kept: track.kept(),
            looks_cumulative: track.looks_cumulative(),
            looks_delta: track.looks_delta(),
            traffic: track.traffic(),
            mostly_bad: track.mostly_dropped(),
        }
    }
}

/// Whether `(rows, rows with traffic)` make a tenth of the file's, by either count: a rule
/// about the file must not rest on one short odd queue (3 rows of 6819 refused a healthy
/// recording), nor on a sparse queue's few bad rows.
fn a_tenth_of((rows, busy): (u64, u64), all: &[QueueVerdict]) -> bool {
    let (all_rows, all_busy) = all.iter().fold((0, 0), |(r, b), v| (r + v.rows, b + v.busy));
    rows * 10 >= all_rows || (all_busy > 0 && busy * 10 >= all_busy)
}

/// Where at least half of the queues a rule could judge look so, as a rule of `judge`: how
/// many, and the first with its counts. Half, not all (a file has its odd queue), and only of
/// those judged (idle queues say nothing either way: 232 of a switch's 256 queues hid the
/// other 24 under a share of all rows).
fn most_judged(
    verdicts: &[QueueVerdict],
    judge: fn(&QueueVerdict) -> Option<Judged>,
) -> Option<(u64, &QueueKey, (u64, u64))> {
    let judged: Vec<(Judged, &QueueKey)> = verdicts.iter().filter_map(|v| Some((judge(v)?, &v.key))).collect();
    let flagged: Vec<&(Judged, &QueueKey)> = judged.iter().filter(|((so, _), _)| *so).collect();
    let ((_, counts), key) = **flagged.first().filter(|_| flagged.len() * 2 >= judged.len())?;
    Some((flagged.len() as u64, key, counts))
}

/// Counters refreshed less often than the file samples them: in the queues that move, most
/// rows stand still, and most of the traffic comes in leaps beyond line rate, which repair
/// drops. Judged on the file's traffic, not per queue: light queues refreshed as slowly never
/// leap (and outvoted the busy ones), and a sparse queue's leap or two says nothing.
fn refreshed_slowly(verdicts: &[QueueVerdict]) -> Option<ProblemKind> {
    // Rows microseconds apart are timestamps in another unit, not a poller (`mostly_bad` asks).
    let moving = verdicts.iter().filter(|v| v.traffic.moved > 0 && v.interval_ns.is_some_and(|i| i >= 10_000));
    let (mut rows, mut moved, mut leaps, mut leap_bytes, mut all_bytes) = (0, 0, 0, 0u128, 0u128);
    for v in moving.clone() {
        let t = &v.traffic;
        (rows, moved, leaps) = (rows + t.rows, moved + t.moved, leaps + t.leaps);
        leap_bytes += t.leap_bytes;
        all_bytes += t.leap_bytes + t.plausible_bytes;
    }
    if leaps < 3 || moved * 2 > rows || leap_bytes * 2 <= all_bytes {
        return None;
    }
    let example = moving.max_by_key(|v| v.traffic.leap_bytes)?;
    Some(ProblemKind::RefreshedSlowly {
        percent: (leap_bytes * 100 / all_bytes) as u64,
        leaps,
        queues: verdicts.iter().filter(|v| v.traffic.leaps > 0).count() as u64,
        example: example.key.to_string(),
        still: rows - moved,
        rows,
    })
}

/// The checks on a read as a whole, once every row has been judged, listed first:
/// - counters read as deltas that look cumulative: at least half of the queues with mostly
///   implausible deltas that change enough to tell, and of the queues with plausible traffic,
///   look so (one queue alone can rise by chance in a file misread otherwise), holding a tenth
///   of the file;
/// - counters read as cumulative that look like deltas, in at least half of the queues that
///   moved enough to tell;
/// - counters refreshed less often than sampled, by the file's traffic;
/// - queues most of whose rows, or most of whose rows with traffic, are bad, where repair
///   would drop a tenth of the file's rows or rows with traffic in them: the file is misread,
///   and repair would keep little of it (a short bad queue alone is repaired as any bad
///   sample is);
/// - a repair that dropped samples and left none.
fn judge_the_whole(problems: &mut Collector, verdicts: &[QueueVerdict], keyed: bool) {
    let of = verdicts.len() as u64;
    let kept: u64 = verdicts.iter().map(|v| v.kept).sum();
    // Queues with plausible traffic count against: read as deltas they are right (one
    // cumulative queue among three of deltas was "cumulative", and reading the file so then
    // found the others "like deltas").
    let judged =
        verdicts.iter().filter(|v| v.looks_cumulative.is_some() || (v.busy > 0 && !v.mostly_implausible)).count();
    let cumulative: Vec<&QueueVerdict> = verdicts.iter().filter(|v| v.looks_cumulative == Some(true)).collect();
    let bad: Vec<&QueueVerdict> = verdicts.iter().filter(|v| v.mostly_bad.is_some()).collect();
    let held = cumulative.iter().fold((0, 0), |(r, b), v| (r + v.rows, b + v.busy));
    // What repair would drop in the mostly bad queues.
    let dropped = bad.iter().filter_map(|v| v.mostly_bad).fold((0, 0), |(r, b), [d, _, bd, _]| (r + d, b + bd));
    if let Some(first) = cumulative.first().filter(|_| cumulative.len() * 2 >= judged && a_tenth_of(held, verdicts)) {
        let (queues, example) = (cumulative.len() as u64, first.key.to_string());
        problems.push_first(ProblemKind::LooksCumulative { queues, of, example, keyed });
    } else if let Some((queues, key, (went_down, moved))) = most_judged(verdicts, |v| v.looks_delta) {
        let example = key.to_string();
        problems.push_first(ProblemKind::LooksDelta { queues, of, example, went_down, moved, keyed });
    } else if let Some(kind) = refreshed_slowly(verdicts) {
        problems.push_first(kind);
    } else if let Some(first) = bad.first().filter(|_| a_tenth_of(dropped, verdicts)) {
        let [dropped, rows, busy_dropped, busy] = first.mostly_bad.expect("bad");
        let (example, queues) = (first.key.to_string(), bad.len() as u64);
        problems.push_first(ProblemKind::MostlyBad {
            queues,
            of,
            example,
            bad: dropped,
            rows,
            busy_bad: busy_dropped,
            busy,
        });
    } else if let Some(mut would) = problems.repair_would().filter(|_| kept == 0) {
        // Said without repair too: a plain read offered "--repair would repair all of them",
        // and the repair then left nothing.
        if problems.report.baseline_samples > 0 {
            would.push_str(&format!("; {} cumulative baselines", problems.report.baseline_samples));
        }
        problems.push_first(ProblemKind::NothingLeft(would));
    }
}

/// Reads a telemetry file (Parquet or CSV, by extension) that fits in memory into one
/// validated series per queue.
///
/// Every problem in the file is reported in the error, not just the first. With
/// [`ReadOptions::repair`], repairable problems are repaired (rows sorted, exact duplicates
/// dropped, samples across a reset or with an implausible delta dropped, gaps marked) and
/// counted in [`TelemetryData::report`]; the others still fail the read.
pub fn load_telemetry(path: &Path, opts: &ReadOptions) -> Result<TelemetryData, TelemetryError> {
    let mut problems = Collector::new(path, opts.repair);
    let Some((mut source, counters, keyed)) = open(path, opts, &mut problems) else {
        return Err(problems.into_error());
    };
    let mut interner = Interner::default();
    // Rows per queue in file order, with their row numbers, the latest timestamp so far (and
    // its row), and whether a sort is needed.
    struct Pending {
        rows: Vec<u64>,
        samples: Vec<QueueSample>,
        latest: Option<(u64, u64)>,
        unsorted: bool,
        known: bool,
    }
    let mut pending: Vec<Pending> = Vec::new();
    let rows = scan(&mut source, opts, &mut interner, &mut problems, |_, scanned, problems| match scanned {
        Scanned::Queue { known } => {
            pending.push(Pending { rows: Vec::new(), samples: Vec::new(), latest: None, unsorted: false, known })
        }
        Scanned::Row { id, row, sample } => {
            let p = &mut pending[id as usize];
            if !p.known {
                return;
            }
            // Out of order means earlier than any earlier row of the queue, as the streaming
            // reader reports it, not only earlier than the row just before.
            match p.latest {
                Some((ts, latest_row)) if sample.ts_ns < ts => {
                    let kind = ProblemKind::OutOfOrder { previous_row: latest_row };
                    problems.push(Some(row), Some("ts_ns"), kind, true);
                    p.unsorted = true;
                }
                _ => p.latest = Some((sample.ts_ns, row)),
            }
            p.rows.push(row);
            p.samples.push(sample);
        }
    });
    if rows == 0 && !problems.failed() {
        problems.push(None, None, ProblemKind::Empty, false);
    }
    let cx = TrackContext { opts, counters, streaming: false };
    let mut queues = Vec::with_capacity(pending.len());
    let mut verdicts = Vec::with_capacity(pending.len());
    for (id, p) in pending.into_iter().enumerate() {
        if !p.known {
            continue;
        }
        let mut order: Vec<usize> = (0..p.samples.len()).collect();
        if p.unsorted {
            // Stable, so that of two rows with one timestamp the earlier row is kept.
            order.sort_by_key(|&i| p.samples[i].ts_ns);
        }
        let mut track = Track::new(opts.interval_ns);
        let mut samples = Vec::with_capacity(p.samples.len());
        let mut segment_starts = Vec::new();
        let mut sink = |s: &QueueSample, c: Continuity| {
            if c.is_break() {
                segment_starts.push(samples.len());
            }
            samples.push(*s);
        };
        for i in order {
            track.push(p.rows[i], p.samples[i], &cx, &mut problems, &mut sink);
        }
        track.finish(&cx, &mut problems, &mut sink);
        verdicts.push(QueueVerdict::of(&interner.keys[id], &track));
        queues.push(QueueSeries {
            key: interner.keys[id].clone(),
            interval_ns: track.interval_ns,
            samples,
            segment_starts,
        });
    }
    judge_the_whole(&mut problems, &verdicts, keyed);
    let report = problems.finish()?;
    queues.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(TelemetryData { path: path.to_path_buf(), counters, queues, rows, report })
}

/// Streams a telemetry file of any size (Parquet or CSV, by extension) through `on_sample`,
/// holding one row group (Parquet; our writer makes them 64 Ki rows) or 64 Ki rows (CSV) and
/// per-queue state, never the whole file.
///
/// Each queue's samples arrive in time order with their [`Continuity`]; samples of different
/// queues interleave roughly in file order (a queue's first 33 samples are held back to infer
/// its interval unless [`ReadOptions::interval_ns`] is given). Checks and repairs are those of
/// [`load_telemetry`], except that rows cannot be sorted: a row out of order within its queue
/// is an error even with repair.
///
/// Every problem is collected and the whole file is scanned, but after the first problem that
/// stays an error the callback is not called again; on `Err`, discard what it built.
pub fn stream_telemetry<F>(path: &Path, opts: &ReadOptions, mut on_sample: F) -> Result<StreamSummary, TelemetryError>
where
    F: FnMut(QueueId, &QueueKey, &QueueSample, Continuity),
{
    let mut problems = Collector::new(path, opts.repair);
    let Some((mut source, counters, keyed)) = open(path, opts, &mut problems) else {
        return Err(problems.into_error());
    };
    let mut interner = Interner::default();
    let cx = TrackContext { opts, counters, streaming: true };
    let mut tracks: Vec<Track> = Vec::new();
    let mut delivered = 0u64;
    let rows = scan(&mut source, opts, &mut interner, &mut problems, |interner, scanned, problems| match scanned {
        Scanned::Queue { known } => {
            let mut t = Track::new(opts.interval_ns);
            t.rejected = !known;
            tracks.push(t);
        }
        Scanned::Row { id, row, sample } => {
            let track = &mut tracks[id as usize];
            if track.rejected {
                return;
            }
            let key = &interner.keys[id as usize];
            track.push(row, sample, &cx, problems, &mut |s, c| {
                delivered += 1;
                on_sample(id, key, s, c)
            });
        }
    });
    if rows == 0 && !problems.failed() {
        problems.push(None, None, ProblemKind::Empty, false);
    }
    for (id, track) in tracks.iter_mut().enumerate() {
        if track.rejected {
            continue;
        }
        let key = &interner.keys[id];
        track.finish(&cx, &mut problems, &mut |s, c| {
            delivered += 1;
            on_sample(id as QueueId, key, s, c)
        });
    }
    let verdicts: Vec<QueueVerdict> = tracks
        .iter()
        .zip(&interner.keys)
        .filter(|(t, _)| !t.rejected)
        .map(|(t, key)| QueueVerdict::of(key, t))
        .collect();
    judge_the_whole(&mut problems, &verdicts, keyed);
    let report = problems.finish()?;
    Ok(StreamSummary {
        path: path.to_path_buf(),
        counters,
        intervals_ns: tracks.iter().map(|t| t.interval_ns).collect(),
        queues: interner.keys,
        rows,
        samples: delivered,
        report,
    })
}
