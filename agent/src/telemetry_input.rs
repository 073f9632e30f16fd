//! Telemetry files as `validate`, `train --telemetry` and `recommend` read them: the shared
//! flags (`--counters`, `--max-gap`, `--repair`), the validated reader of
//! `ecn_datasets::telemetry` behind them, and what the learning code needs from a file (the
//! intervals of the tuning environment, the file's hash for provenance).
//!
//! Every problem a file has is a bad-input error (exit 2) naming the file, row and column;
//! nothing is learned from or recommended on a file that failed validation.

use crate::error::CliError;
use clap::Args;
use ecn_datasets::telemetry::{
    load_telemetry, stream_telemetry, CounterMode, QueueKey, QueueSample, ReadOptions, SettingBounds, TelemetryData,
};
use ecn_env::tuning::{Bounds, QueueInterval};
use std::collections::VecDeque;
use std::path::Path;

/// The flags every command that reads telemetry files shares.
#[derive(Args, Debug, Clone)]
pub struct ReadArgs {
    /// How counters are given: delta (per interval) or cumulative. Default: the file's
    /// `ecn_tuner.counters` metadata key, else delta.
    #[arg(long, value_name = "delta|cumulative", value_parser = parse_counters)]
    pub counters: Option<CounterMode>,
    /// A step longer than this many sample intervals between two samples of a queue is a gap
    /// [default: 1.5].
    // No clap default, so that the flag given where no file is read is seen and refused.
    #[arg(long, value_name = "N")]
    pub max_gap: Option<f64>,
    /// Repair what can safely be repaired: sort, drop exact duplicates, drop samples across
    /// counter resets or with implausible deltas, mark gaps. Everything else stays an error.
    #[arg(long)]
    pub repair: bool,
}

fn parse_counters(s: &str) -> Result<CounterMode, String> {
    CounterMode::parse(s).ok_or_else(|| format!("`{s}` is not delta or cumulative"))
}

/// `--max-gap`'s default, in sample intervals.
const DEFAULT_MAX_GAP: f64 = 1.5;

impl ReadArgs {
    /// Refuse these flags where no telemetry file is read (`mode` says what is read instead),
    /// rather than ignore them.
    pub fn refuse_unless_reading(&self, mode: &str) -> Result<(), CliError> {
        let given = crate::commands::first_given(&[
            ("--counters", self.counters.is_some()),
            ("--max-gap", self.max_gap.is_some()),
            ("--repair", self.repair),
        ]);
        match given {
            Some(flag) => Err(CliError::BadInput(format!("{flag} checks telemetry files; {mode} reads none"))),
            None => Ok(()),
        }
    }

    /// Reader options from the flags, checking the settings in effect against `bounds`.
    pub fn options(&self, bounds: Option<&Bounds>) -> Result<ReadOptions, CliError> {
        let max_gap = self.max_gap.unwrap_or(DEFAULT_MAX_GAP);
        if !(max_gap.is_finite() && max_gap >= 1.0) {
            return Err(CliError::BadInput(format!("--max-gap {max_gap}: must be a number of intervals >= 1")));
        }
        Ok(ReadOptions {
            counters: self.counters,
            max_gap_intervals: max_gap,
            repair: self.repair,
            bounds: bounds.map(|b| SettingBounds {
                kmin_min_bytes: b.kmin_min_bytes,
                kmax_max_bytes: b.kmax_max_bytes,
                pmax_min: b.pmax_min,
                pmax_max: b.pmax_max,
            }),
            ..ReadOptions::default()
        })
    }
}

/// Load a whole file (repair may sort it), failing with every problem it has.
pub fn load(path: &Path, opts: &ReadOptions) -> Result<TelemetryData, CliError> {
    load_telemetry(path, opts).map_err(|e| CliError::BadInput(e.to_string()))
}

/// The sample interval of a loaded file: the median of its queues' intervals, which is the one
/// most of them have when they share timestamps, and a typical one when each queue's jitter
/// is its own.
pub fn interval_ns(data: &TelemetryData) -> Result<u64, CliError> {
    let mut intervals: Vec<u64> = data.queues.iter().filter_map(|q| q.interval_ns).collect();
    intervals.sort_unstable();
    intervals.get(intervals.len() / 2).copied().filter(|&i| i > 0).ok_or_else(|| {
        CliError::BadInput(format!(
            "{}: cannot tell the sample interval (every queue needs two samples at distinct times)",
            data.path.display()
        ))
    })
}

/// An unbroken run of one queue's samples as the intervals they cover: each over its stated
/// `span_ns`, else over the step from the sample before it (its counters are deltas since
/// then), as the online controller measures it, so that a poller's jitter reads as the time it
/// was; the first of the run (or a repeated timestamp) without a stated span over `nominal_ns`.
pub fn intervals<'a, I>(run: I, nominal_ns: u64) -> impl Iterator<Item = QueueInterval> + use<'a, I>
where
    I: IntoIterator<Item = &'a QueueSample>,
{
    let mut previous_ts = None;
    run.into_iter().map(move |s| {
        let covered = match previous_ts {
            _ if s.span_ns > 0 => s.span_ns,
            Some(p) if s.ts_ns > p => s.ts_ns - p,
            _ => nominal_ns,
        };
        previous_ts = Some(s.ts_ns);
        QueueInterval::from_queue_sample(s, covered)
    })
}

/// The newest samples of one queue since its last continuity break.
#[derive(Debug, Clone)]
pub struct QueueTail {
    /// The queue.
    pub key: QueueKey,
    /// Its sample interval, when known.
    pub interval_ns: Option<u64>,
    /// Up to the requested number of samples, oldest first, none across a break.
    pub recent: VecDeque<QueueSample>,
    /// The newest sample, even when a break just emptied `recent`.
    pub last: Option<QueueSample>,
}

/// The last `keep` unbroken samples of every queue in the file, one without any sample (only
/// a cumulative baseline reading) included with none.
///
/// Without `--repair` this streams, so a file larger than memory works; with it the file is
/// loaded, because repair sorts.
pub fn tails(path: &Path, opts: &ReadOptions, keep: usize) -> Result<Vec<QueueTail>, CliError> {
    if opts.repair {
        let data = load(path, opts)?;
        return Ok(data
            .queues
            .iter()
            .map(|q| {
                let segment = q.segments().last().unwrap_or(&[]);
                let from = segment.len().saturating_sub(keep);
                QueueTail {
                    key: q.key.clone(),
                    interval_ns: q.interval_ns,
                    recent: segment[from..].iter().copied().collect(),
                    last: q.samples.last().copied(),
                }
            })
            .collect());
    }
    // Queue ids are indices in order of first appearance, but samples can reach the callback in
    // another order (a queue's first samples wait until its interval is known).
    let mut slots: Vec<Option<QueueTail>> = Vec::new();
    let summary = stream_telemetry(path, opts, |id, key, s, continuity| {
        let id = id as usize;
        if slots.len() <= id {
            slots.resize_with(id + 1, || None);
        }
        let t = slots[id].get_or_insert_with(|| QueueTail {
            key: key.clone(),
            interval_ns: None,
            recent: VecDeque::new(),
            last: None,
        });
        if continuity.is_break() {
            t.recent.clear();
        }
        if t.recent.len() == keep.max(1) {
            t.recent.pop_front();
        }
        t.recent.push_back(*s);
        t.last = Some(*s);
    })
    .map_err(|e| CliError::BadInput(e.to_string()))?;
    // Every queue of the file, those with no sample delivered (a cumulative file's queue with
    // only its baseline reading) included, with nothing in them.
    let mut tails: Vec<QueueTail> = summary
        .queues
        .iter()
        .zip(&summary.intervals_ns)
        .enumerate()
        .map(|(id, (key, &interval_ns))| {
            let t = slots.get_mut(id).and_then(Option::take);
            let t =
                t.unwrap_or_else(|| QueueTail { key: key.clone(), interval_ns, recent: VecDeque::new(), last: None });
            QueueTail { interval_ns, ..t }
        })
        .collect();
    tails.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(tails)
}

/// SHA-256 of a file's bytes, lowercase hex; an error names the file.
pub fn sha256(path: &Path) -> Result<String, CliError> {
    ecn_datasets::digest::sha256_file(path).map_err(|e| CliError::BadInput(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poller's jitter is the time a sample covered, and stays one interval for learning; a
    /// sample every other interval is another interval.
    #[test]
    fn a_sample_covers_the_step_from_the_one_before_it() {
        use crate::learned::same_interval;
        let at = |ts_ns| QueueSample { ts_ns, ..QueueSample::default() };
        let run = [at(400), at(510), at(510)];
        let covered: Vec<u64> = intervals(&run, 100).map(|iv| iv.interval_ns).collect();
        // The first of a run: the nominal interval; a repeated timestamp covers no time.
        assert_eq!(covered, [100, 110, 100]);
        // A stated span is the time covered, the first of a run's too.
        let spanning = |ts_ns, span_ns| QueueSample { ts_ns, span_ns, ..QueueSample::default() };
        let run = [spanning(400, 90), at(500), spanning(750, 250)];
        assert_eq!(intervals(&run, 100).map(|iv| iv.interval_ns).collect::<Vec<_>>(), [90, 100, 250]);
        // Two recordings of one SONiC switch polled every 100 ms (measured in the sonic suite).
        assert!(same_interval(99_963_812, 100_081_853));
        assert!(!same_interval(200_000, 100_000) && !same_interval(50_000, 100_000));
    }
}
