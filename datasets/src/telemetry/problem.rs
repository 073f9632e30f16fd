//! What can be wrong with a telemetry file, which of it `repair` may fix, and the error that
//! lists every problem found.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// How many problems an error keeps in full; the rest are only counted (a file of ten million
/// NaN rows must not need ten million messages in memory).
pub const MAX_KEPT_PROBLEMS: usize = 1_000;

/// How many problems the error's `Display` prints before summing up the rest.
pub const SHOWN_PROBLEMS: usize = 20;

/// One thing wrong with a telemetry file.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The file cannot be opened or decoded: I/O error, truncated or corrupt Parquet, unknown
    /// extension.
    Unreadable(String),
    /// The file is 0 bytes long or has no data rows.
    Empty,
    /// The file records a telemetry schema of another major version.
    SchemaVersion {
        /// Version found in the file.
        found: String,
    },
    /// The caller asked for one counter mode and the file's metadata says the other.
    CounterModeConflict {
        /// What the file's `ecn_tuner.counters` key says.
        file: String,
        /// What the caller asked for.
        requested: &'static str,
    },
    /// A required column is absent.
    MissingColumn,
    /// A column (Parquet) or a cell (CSV) has a type the schema does not allow.
    WrongType {
        /// What was found: a type name, or the offending CSV text.
        found: String,
        /// What the schema requires.
        expected: &'static str,
    },
    /// An empty cell or a null value.
    Null,
    /// NaN or an infinity.
    NotFinite(f64),
    /// A negative number where the schema has an unsigned quantity, as written (an i64 shown
    /// as an f64 would round: -9223372036854775807 read -9223372036854776000).
    Negative(String),
    /// A value outside what the schema allows (queue index above 7, zero link rate).
    OutOfRange(String),
    /// The same (ts, switch, port, queue) row again with identical values.
    Duplicate {
        /// Row of the copy that is kept.
        first_row: u64,
    },
    /// The same (ts, switch, port, queue) again with different values: which one is true is
    /// unknowable.
    ConflictingDuplicate {
        /// Row of the other copy.
        first_row: u64,
    },
    /// A timestamp earlier than an earlier row of the same queue.
    OutOfOrder {
        /// The earlier row with the later timestamp.
        previous_row: u64,
    },
    /// More than the allowed number of sample intervals between two samples of a queue.
    Gap {
        /// Nanoseconds between the two samples.
        step_ns: u64,
        /// The queue's sample interval.
        interval_ns: u64,
        /// The part of the step this row's `span_ns` says it covers, where it says.
        covered_ns: Option<u64>,
    },
    /// A per-interval delta the link could not have produced (how a wrapped counter shows up
    /// in a delta file).
    ImplausibleDelta {
        /// The delta.
        value: u64,
        /// The largest plausible delta.
        max: u64,
        /// The time it was judged over: the step from the queue's previous row, or its interval.
        span_ns: u64,
    },
    /// Columns of one interval that contradict each other: more packets marked than sent, a
    /// mean depth above the interval's maximum.
    Inconsistent(String),
    /// A cumulative counter went down (or jumped implausibly far): reset, so the interval's
    /// delta is unknown.
    CounterReset {
        /// The previous cumulative value.
        previous: u64,
        /// This row's cumulative value.
        current: u64,
    },
    /// The queue is not among the queues the caller knows.
    UnknownQueue(String),
    /// The ECN setting in effect contradicts itself or the bounds.
    BadSetting(String),
    /// Queues of a file read as per-interval deltas whose counters look cumulative: more than
    /// half their rows have a delta beyond line rate, and their counters rise from row to row
    /// (a file rewritten by pandas or polars loses the Parquet key that says so).
    LooksCumulative {
        /// How many queues look so.
        queues: u64,
        /// Queues in the file.
        of: u64,
        /// One of them.
        example: String,
        /// The file's `ecn_tuner.counters` key says `delta` (so `--counters cumulative` is
        /// refused: the file must be rewritten).
        keyed: bool,
    },
    /// Queues of a file read as cumulative counters whose `tx_bytes` looks like per-interval
    /// deltas: it goes down at far more of its changes than a cleared counter would.
    LooksDelta {
        /// How many queues look so.
        queues: u64,
        /// Queues in the file.
        of: u64,
        /// One of them.
        example: String,
        /// The rows the example's `tx_bytes` went down at (not as a 32-bit counter wraps).
        went_down: u64,
        /// The rows it moved at.
        moved: u64,
        /// The file's `ecn_tuner.counters` key says `cumulative`.
        keyed: bool,
    },
    /// Counters refreshed less often than the file samples them: `tx_bytes` stands still at
    /// most rows of the queues that move, then leaps beyond line rate, and the leaps, which
    /// repair would drop, carry most of the traffic.
    RefreshedSlowly {
        /// Share of the traffic in leaps, percent.
        percent: u64,
        /// Rows that leap.
        leaps: u64,
        /// Queues with a leap.
        queues: u64,
        /// The queue with most bytes in leaps.
        example: String,
        /// Rows where the queues that move stand still.
        still: u64,
        /// All rows of the queues that move.
        rows: u64,
    },
    /// Queues most of whose rows have a sample to drop: the file is more likely misread
    /// (timestamps not in ns, a link rate not in b/s) than damaged, and repair would leave
    /// little of it.
    MostlyBad {
        /// How many queues.
        queues: u64,
        /// Queues in the file.
        of: u64,
        /// One of them.
        example: String,
        /// The example's rows with a sample to drop.
        bad: u64,
        /// The example's rows.
        rows: u64,
        /// Of them, rows with traffic with a sample to drop.
        busy_bad: u64,
        /// The example's rows with traffic.
        busy: u64,
    },
    /// Repair would leave no sample at all: a repaired file of nothing. Holds what repair
    /// dropped, as the repair report says it.
    NothingLeft(String),
}

impl ProblemKind {
    /// A short stable name, used as the key of per-kind counts (`--json`, the repair report).
    pub fn tag(&self) -> &'static str {
        match self {
            ProblemKind::Unreadable(_) => "unreadable",
            ProblemKind::Empty => "empty",
            ProblemKind::SchemaVersion { .. } => "schema_version",
            ProblemKind::CounterModeConflict { .. } => "counter_mode",
            ProblemKind::MissingColumn => "missing_column",
            ProblemKind::WrongType { .. } => "wrong_type",
            ProblemKind::Null => "null",
            ProblemKind::NotFinite(_) => "not_finite",
            ProblemKind::Negative(_) => "negative",
            ProblemKind::OutOfRange(_) => "out_of_range",
            ProblemKind::Duplicate { .. } => "duplicate",
            ProblemKind::ConflictingDuplicate { .. } => "conflicting_duplicate",
            ProblemKind::OutOfOrder { .. } => "out_of_order",
            ProblemKind::Gap { .. } => "gap",
            ProblemKind::ImplausibleDelta { .. } => "implausible_delta",
            ProblemKind::Inconsistent(_) => "inconsistent",
            ProblemKind::CounterReset { .. } => "counter_reset",
            ProblemKind::UnknownQueue(_) => "unknown_queue",
            ProblemKind::BadSetting(_) => "bad_setting",
            ProblemKind::LooksCumulative { .. } => "looks_cumulative",
            ProblemKind::LooksDelta { .. } => "looks_delta",
            ProblemKind::RefreshedSlowly { .. } => "refreshed_slowly",
            ProblemKind::MostlyBad { .. } => "mostly_bad",
            ProblemKind::NothingLeft(_) => "nothing_left",
        }
    }
}

/// The word for `n` of a thing: `one` for one, else `many`.
fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// After an example of `queues`: `, ...` where there are more.
fn and_more(queues: u64) -> &'static str {
    if queues > 1 {
        ", ..."
    } else {
        ""
    }
}

/// `n` and the word for that many: `1 row`, `2 rows`.
pub fn counted(n: u64, one: &'static str, many: &'static str) -> String {
    format!("{n} {}", plural(n, one, many))
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::Unreadable(m) => write!(f, "{m}"),
            ProblemKind::Empty => write!(f, "the file has no data rows"),
            ProblemKind::SchemaVersion { found } => f.write_str(&crate::io::schema_version_said(found)),
            ProblemKind::CounterModeConflict { file, requested } => {
                write!(f, "the file says its counters are {file}, but {requested} was requested")
            }
            ProblemKind::MissingColumn => write!(f, "missing column"),
            ProblemKind::WrongType { found, expected } => write!(f, "found {found}, expected {expected}"),
            ProblemKind::Null => write!(f, "empty value"),
            ProblemKind::NotFinite(v) => write!(f, "{v} is not a finite number"),
            ProblemKind::Negative(v) => write!(f, "negative value {v}"),
            ProblemKind::OutOfRange(m) => write!(f, "{m}"),
            ProblemKind::Duplicate { first_row } => write!(f, "duplicate of row {first_row}"),
            ProblemKind::ConflictingDuplicate { first_row } => {
                write!(f, "same timestamp and queue as row {first_row} but a different value")
            }
            ProblemKind::OutOfOrder { previous_row } => {
                write!(f, "timestamp earlier than row {previous_row} of the same queue")
            }
            ProblemKind::Gap { step_ns, interval_ns, covered_ns: None } => write!(
                f,
                "gap of {step_ns} ns since the queue's previous sample ({:.1} intervals of {interval_ns} ns)",
                *step_ns as f64 / (*interval_ns).max(1) as f64
            ),
            // Judged as the README says: the time no row covers, plus this row's own interval.
            ProblemKind::Gap { step_ns, interval_ns, covered_ns: Some(covered) } => write!(
                f,
                "gap of {step_ns} ns since the queue's previous sample, of which this row's span_ns covers \
                 {covered} ns: {} ns covered by no row ({:.1} intervals of {interval_ns} ns, this row's own counted)",
                step_ns - covered,
                ((step_ns - covered) as f64 + *interval_ns as f64) / (*interval_ns).max(1) as f64
            ),
            ProblemKind::ImplausibleDelta { value, max, span_ns } => {
                write!(
                    f,
                    "per-interval delta {value} exceeds the plausible {max} over {span_ns} ns (a wrapped counter?"
                )?;
                // Rows microseconds apart or less are most likely timed in other units.
                if *span_ns < 10_000 {
                    write!(f, " or is ts_ns not in nanoseconds?")?;
                }
                write!(f, ")")
            }
            ProblemKind::Inconsistent(m) => write!(f, "{m}"),
            ProblemKind::CounterReset { previous, current } => {
                write!(f, "cumulative counter went from {previous} to {current} (reset)")
            }
            ProblemKind::UnknownQueue(q) => write!(f, "queue {q} is not among the known queues"),
            ProblemKind::BadSetting(m) => write!(f, "{m}"),
            ProblemKind::LooksCumulative { queues, of, example, keyed } => {
                write!(
                    f,
                    "the counters of {queues} of {of} {} ({example}{}) look cumulative: they rise from row to row \
                     or stand still, and more than half their rows have a per-interval delta beyond line rate. ",
                    plural(*of, "queue", "queues"),
                    and_more(*queues),
                )?;
                if *keyed {
                    write!(
                        f,
                        "The file's key `ecn_tuner.counters` says `delta`, so it is wrong about them: rewrite the file \
                         with `cumulative` there (or without the key, and read it with `--counters cumulative`)"
                    )
                } else {
                    write!(
                        f,
                        "Read the file with `--counters cumulative` (pandas and polars drop the Parquet key \
                         `ecn_tuner.counters` that says so when they rewrite a file)"
                    )
                }
            }
            ProblemKind::LooksDelta { queues, of, example, went_down, moved, keyed } => {
                write!(
                    f,
                    "the tx_bytes of {queues} of {of} {} ({example}: down at {went_down} of the {moved} rows it \
                     changed at{}) go down far more often than a cumulative counter is cleared: they look like \
                     per-interval deltas. ",
                    plural(*of, "queue", "queues"),
                    and_more(*queues),
                )?;
                if *keyed {
                    write!(
                        f,
                        "The file's key `ecn_tuner.counters` says `cumulative`, so it is wrong about them: rewrite the \
                         file without the key (as pandas and polars do), and read it as deltas"
                    )
                } else {
                    write!(f, "Read the file as deltas, without `--counters cumulative`")
                }
            }
            ProblemKind::RefreshedSlowly { percent, leaps, queues, example, still, rows } => write!(
                f,
                "tx_bytes stands still at {still} of the {rows} rows of the queues that move, and {percent}% of \
                 its traffic comes in {leaps} leaps beyond line rate ({queues} {}: {example}{}): the switch \
                 refreshes its counters less often than this file samples them, and repair would drop every leap, \
                 and with it most of the traffic. Sample at the counters' own interval (SONiC refreshes queue \
                 counters every 10 s by default, `counterpoll queue interval`; the actuator's `--poll-interval`)",
                plural(*queues, "queue", "queues"),
                and_more(*queues),
            ),
            ProblemKind::MostlyBad { queues, of, example, bad, rows, busy_bad, busy } => write!(
                f,
                "most rows, or most rows with traffic, of {queues} of {of} {} have a sample to drop ({example}: \
                 {bad} of {rows} rows, {busy_bad} of the {busy} with traffic{}): the file is more likely misread \
                 than damaged (timestamps not in ns? a link rate not in b/s? counters of another kind?), and \
                 repair would leave little of it",
                plural(*of, "queue", "queues"),
                and_more(*queues),
            ),
            ProblemKind::NothingLeft(repaired) => write!(f, "repair would leave no sample ({repaired})"),
        }
    }
}

/// One problem, located: the row is the 1-based data row (the header does not count; in a
/// CSV file data row N is line N + 1), the column is one of
/// [`TELEMETRY_COLUMNS`](crate::io::TELEMETRY_COLUMNS).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// 1-based data row, if the problem belongs to one.
    pub row: Option<u64>,
    /// Column name, if the problem belongs to one.
    pub column: Option<&'static str>,
    /// What is wrong.
    pub kind: ProblemKind,
}

impl Problem {
    /// Writes `PATH: row R, column C: message`, leaving out what does not apply.
    pub fn fmt_in(&self, path: &Path, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", path.display())?;
        if let Some(row) = self.row {
            write!(f, "row {row}, ")?;
        }
        if let Some(column) = self.column {
            write!(f, "column `{column}`: ")?;
        }
        write!(f, "{}", self.kind)
    }
}

/// Every problem found in one file. `Display` prints one line per problem (each naming the
/// file) for the first [`SHOWN_PROBLEMS`], then a line with the count of the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryError {
    /// The file.
    pub path: PathBuf,
    /// The first [`MAX_KEPT_PROBLEMS`] problems, in the order found, except that a problem
    /// about the whole file, found once every row is read, comes first.
    pub problems: Vec<Problem>,
    /// How many problems there were in all.
    pub total: u64,
    /// Count per [`ProblemKind::tag`].
    pub counts: BTreeMap<&'static str, u64>,
    /// How many of them [`ReadOptions::repair`](super::ReadOptions::repair) would repair (a
    /// row out of order too, which a streaming read reports and a repairing one sorts).
    pub repairable: u64,
    /// Rows a streaming read found out of order, and so judged no further: once sorted, they
    /// may show problems this read could not see.
    pub unsorted: u64,
}

/// The problems about a file as a whole that say it is misread rather than damaged: repair is
/// not offered for them.
const MISREAD: [&str; 4] = ["looks_cumulative", "looks_delta", "refreshed_slowly", "mostly_bad"];

impl TelemetryError {
    /// The [`ProblemKind::tag`] of the problem that says the file is misread, if one does.
    pub fn misread(&self) -> Option<&'static str> {
        MISREAD.iter().find(|k| self.counts.contains_key(*k)).copied()
    }
}

impl fmt::Display for TelemetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().take(SHOWN_PROBLEMS).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            p.fmt_in(&self.path, f)?;
        }
        let shown = self.problems.len().min(SHOWN_PROBLEMS) as u64;
        if self.total > shown {
            let counts: Vec<String> = self.counts.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            write!(
                f,
                "\n{}: ... and {} more problems ({} in all; {}; rows are 1-based data rows)",
                self.path.display(),
                self.total - shown,
                self.total,
                counts.join(", ")
            )?;
        }
        // A switch's own recording has a gap wherever it dropped a sample at a counter reset:
        // say that the way on is one flag away.
        // Repair would drop most rows of a misread file, or every sample: do not offer it.
        let futile = self.misread().is_some() || self.counts.contains_key("nothing_left");
        if self.unsorted > 0 && !futile {
            // Sorted, the rows are judged afresh: a newest-first export of a cumulative file
            // was promised a repair here that the sorting read then refused.
            let (rows, were) = (counted(self.unsorted, "row", "rows"), plural(self.unsorted, "was", "were"));
            write!(
                f,
                "\n{}: {rows} out of order {were} checked no further (a streaming read cannot sort); `validate \
                 --repair` sorts the rows in memory and checks them all in time order, then repairs what has one \
                 safe answer (dropping bad samples, marking gaps; nothing is guessed)",
                self.path.display(),
            )?;
            match self.total - self.repairable {
                0 => {}
                1 => write!(f, "; the other problem found here stays an error")?,
                other => write!(f, "; the {other} other problems found here stay errors")?,
            }
        } else if self.repairable > 0 && !futile {
            let which = if self.repairable == self.total {
                "all of them".to_string()
            } else {
                format!("{} of them", self.repairable)
            };
            write!(
                f,
                "\n{}: --repair would repair {which} (sorting rows, dropping bad samples, marking gaps; nothing is \
                 guessed), as `validate --repair` shows (`--out FIXED.parquet` writes the result)",
                self.path.display()
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for TelemetryError {}

/// What `repair` changed, as counts per [`ProblemKind::tag`] (`out_of_order`: rows moved by
/// the sort; `duplicate`: exact copies dropped; `counter_reset` and `implausible_delta`:
/// samples dropped, each a continuity break; `gap`: continuity breaks marked), plus the
/// baseline samples of cumulative counters (the first sample of a queue and the first after a
/// break only set the counters' starting point; they are not delivered).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairReport {
    /// Repairs per problem kind.
    pub repaired: BTreeMap<&'static str, u64>,
    /// Cumulative-counter samples used only as a baseline.
    pub baseline_samples: u64,
}

impl RepairReport {
    /// True if nothing was repaired.
    pub fn is_empty(&self) -> bool {
        self.repaired.is_empty()
    }

    /// How many problems of kind `tag` were repaired.
    pub fn count(&self, tag: &str) -> u64 {
        self.repaired.get(tag).copied().unwrap_or(0)
    }
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.repaired.is_empty() {
            return write!(f, "nothing repaired");
        }
        let parts: Vec<String> = self
            .repaired
            .iter()
            .map(|(tag, n)| match *tag {
                "out_of_order" => format!("{} sorted", counted(*n, "out-of-order row", "out-of-order rows")),
                "duplicate" => format!("{} dropped", counted(*n, "exact duplicate", "exact duplicates")),
                "counter_reset" => format!("{} dropped at counter resets", counted(*n, "sample", "samples")),
                "implausible_delta" => {
                    format!("{} with implausible deltas dropped", counted(*n, "sample", "samples"))
                }
                "gap" => format!("{} marked as continuity breaks", counted(*n, "gap", "gaps")),
                other => format!("{n} {other}"),
            })
            .collect();
        write!(f, "{}", parts.join(", "))
    }
}

/// Collects problems while a file is read: repairable ones become repair counts when repair is
/// on, the rest are kept (up to [`MAX_KEPT_PROBLEMS`]) for the error.
#[derive(Debug)]
pub(crate) struct Collector {
    path: PathBuf,
    repair: bool,
    problems: Vec<Problem>,
    total: u64,
    counts: BTreeMap<&'static str, u64>,
    repairable: u64,
    unsorted: u64,
    pub(crate) report: RepairReport,
}

impl Collector {
    pub(crate) fn new(path: &Path, repair: bool) -> Self {
        Collector {
            path: path.to_path_buf(),
            repair,
            problems: Vec::new(),
            total: 0,
            counts: BTreeMap::new(),
            repairable: 0,
            unsorted: 0,
            report: RepairReport::default(),
        }
    }

    /// Records a problem; `repairable` says whether the current mode can repair it.
    pub(crate) fn push(&mut self, row: Option<u64>, column: Option<&'static str>, kind: ProblemKind, repairable: bool) {
        let tag = kind.tag();
        if self.repair && repairable {
            *self.report.repaired.entry(tag).or_insert(0) += 1;
            return;
        }
        self.total += 1;
        // A streaming read cannot sort, but `--repair` loads the file and does.
        let unsorted = !repairable && matches!(kind, ProblemKind::OutOfOrder { .. });
        self.unsorted += u64::from(unsorted);
        self.repairable += u64::from(repairable || unsorted);
        *self.counts.entry(tag).or_insert(0) += 1;
        if self.problems.len() < MAX_KEPT_PROBLEMS {
            self.problems.push(Problem { row, column, kind });
        }
    }

    /// A problem about the file as a whole, found once every row has been read: listed
    /// first, so that it is shown however many row problems came before it.
    pub(crate) fn push_first(&mut self, kind: ProblemKind) {
        self.total += 1;
        *self.counts.entry(kind.tag()).or_insert(0) += 1;
        self.problems.insert(0, Problem { row: None, column: None, kind });
        self.problems.truncate(MAX_KEPT_PROBLEMS);
    }

    /// True once a problem that stays an error has been found.
    pub(crate) fn failed(&self) -> bool {
        self.total > 0
    }

    /// What repair would do, where it has something to do and every problem found has a
    /// repair (else `None`): the repair report, or without repair the problems found, by kind.
    pub(crate) fn repair_would(&self) -> Option<String> {
        let repaired = if self.repair { &self.report.repaired } else { &self.counts };
        if self.total > self.repairable || repaired.is_empty() {
            return None;
        }
        Some(RepairReport { repaired: repaired.clone(), baseline_samples: 0 }.to_string())
    }

    pub(crate) fn into_error(self) -> TelemetryError {
        TelemetryError {
            path: self.path,
            problems: self.problems,
            total: self.total,
            counts: self.counts,
            repairable: self.repairable,
            unsorted: self.unsorted,
        }
    }

    /// `Err` with every problem if any stayed an error, else the repair report.
    pub(crate) fn finish(self) -> Result<RepairReport, TelemetryError> {
        if self.failed() {
            Err(self.into_error())
        } else {
            Ok(self.report)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row stating its span is judged on the time no row covers plus its own interval: the
    /// message gives that, not the bare step (which read "1.0 intervals", under the limit).
    #[test]
    fn a_gap_names_the_time_no_row_covers() {
        let gap = ProblemKind::Gap { step_ns: 100_000, interval_ns: 100_000, covered_ns: Some(40_000) };
        assert_eq!(
            gap.to_string(),
            "gap of 100000 ns since the queue's previous sample, of which this row's span_ns covers 40000 ns: \
             60000 ns covered by no row (1.6 intervals of 100000 ns, this row's own counted)"
        );
        let bare = ProblemKind::Gap { step_ns: 200_000, interval_ns: 100_000, covered_ns: None };
        assert_eq!(bare.to_string(), "gap of 200000 ns since the queue's previous sample (2.0 intervals of 100000 ns)");
    }

    #[test]
    fn an_implausible_delta_over_microseconds_asks_about_the_time_unit() {
        let over = |span_ns| ProblemKind::ImplausibleDelta { value: 2_000_000_000, max: 15, span_ns }.to_string();
        assert_eq!(over(1), "per-interval delta 2000000000 exceeds the plausible 15 over 1 ns (a wrapped counter? or is ts_ns not in nanoseconds?)");
        assert_eq!(
            over(1_000_000_000),
            "per-interval delta 2000000000 exceeds the plausible 15 over 1000000000 ns (a wrapped counter?)"
        );
    }
}
