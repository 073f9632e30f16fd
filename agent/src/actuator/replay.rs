//! Replay of a recorded telemetry file, the dry-run backend's only telemetry source.
//!
//! A dry-run actuator has no fabric, so it has no telemetry of its own; inventing numbers
//! would mislead whoever watches them. What it can honestly serve is a recording (for example
//! `ecn-tuner sim --out DIR` writes `telemetry.parquet`): the rows exactly as recorded,
//! including the ECN setting that was in effect then, which dry-run changes do not affect.
//! The recording loops; timestamps keep growing across loops.

use super::pacer::Pacer;
use super::telemetry::batches_from_rows;
use super::ActuatorError;
use ecn_datasets::telemetry::{load_telemetry, ProblemKind, ReadOptions};
use ecn_datasets::TelemetrySample;
use ecn_proto::v1::TelemetryBatch;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::broadcast;
use tracing::debug;

/// A loaded recording.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Rows in time order.
    pub rows: Vec<TelemetrySample>,
    /// Native interval: the most common gap between consecutive timestamps. (Not the smallest:
    /// a run that ends early closes with a short, partial interval.)
    pub interval_ns: u64,
}

impl Recording {
    /// Read a telemetry file (Parquet or CSV), checked as `validate` checks it: a file with
    /// problems is refused, not replayed.
    pub fn load(path: &Path) -> Result<Recording, ActuatorError> {
        let bad = |why: String| ActuatorError::BadInput(format!("--telemetry {}: {why}", path.display()));
        // The actuator takes no reader flags: a file to fix is fixed once, by `validate`. Gaps
        // are replayed as gaps (no batch, or a queue missing from its batches, for a while):
        // a repaired recording has one wherever repair dropped a sample, and refusing them
        // sent the repaired copy back to `validate --repair` for ever.
        let opts = ReadOptions { max_gap_intervals: f64::INFINITY, ..ReadOptions::default() };
        let data = load_telemetry(path, &opts).map_err(|e| {
            // The way on that `validate` offers, where it offers one: a misread file is not
            // repaired, and the reader's own hint already says what repair would do.
            let copy = |flags: &str| {
                format!(
                    ": replay the copy that `ecn-tuner validate --telemetry {} {flags}--repair --out FIXED.parquet` \
                     writes",
                    path.display()
                )
            };
            let way = match e.problems.first().map(|p| &p.kind) {
                Some(ProblemKind::LooksCumulative { keyed: false, .. }) => copy("--counters cumulative "),
                _ if e.repairs_all() => copy(""),
                _ => String::new(),
            };
            ActuatorError::BadInput(format!(
                "--telemetry {e}\nthe actuator replays a file as it is (it takes no --counters, --max-gap or --repair){way}"
            ))
        })?;
        let mut rows = data.to_rows();
        if rows.is_empty() {
            return Err(bad("no telemetry rows".into()));
        }
        rows.sort_by_key(|r| r.sample.ts_ns);
        let mut gaps: std::collections::BTreeMap<u64, usize> = Default::default();
        for w in rows.windows(2).filter(|w| w[1].sample.ts_ns > w[0].sample.ts_ns) {
            *gaps.entry(w[1].sample.ts_ns - w[0].sample.ts_ns).or_default() += 1;
        }
        // Most frequent gap; ties go to the smaller one.
        let interval_ns = gaps.iter().max_by_key(|(g, n)| (**n, std::cmp::Reverse(**g))).map(|(g, _)| *g).unwrap_or(0);
        if interval_ns == 0 {
            return Err(bad("a single timestamp: a replay needs at least two sample intervals".into()));
        }
        Ok(Recording { rows, interval_ns })
    }
}

/// Play `rec` on `tx` in scaled time until `stop` is set; `sent_to_ns` follows the `ts_ns` of
/// the batch sent last.
pub fn play(
    rec: Recording,
    time_scale: f64,
    tx: broadcast::Sender<Arc<TelemetryBatch>>,
    sent_to_ns: &AtomicU64,
    stop: Arc<AtomicBool>,
) {
    let first = rec.rows[0].sample.ts_ns;
    let last = rec.rows[rec.rows.len() - 1].sample.ts_ns;
    // Timestamps start near zero in every loop: shift the first row to one interval.
    let span = last - first + rec.interval_ns;
    // A recording's zero marks may be a switch that did not count them: not vouched for.
    let batches = batches_from_rows(&rec.rows, 0, false);
    // In a later loop a queue's first row follows its last one of the loop before, an
    // interval earlier, whatever span the recording states for it: left implicit, it covers
    // that step (a stated one could overlap the row before).
    let mut looped = batches.clone();
    let mut seen = std::collections::HashSet::new();
    for s in looped.iter_mut().flat_map(|b| b.samples.iter_mut()) {
        let id = s.id.as_ref().map(|q| (q.switch.clone(), q.port.clone(), q.queue));
        if seen.insert(id) {
            s.span_ns = 0;
        }
    }
    let mut pacer = Pacer::new(time_scale, 0);
    let mut base = 0u64;
    'outer: while !stop.load(Ordering::Relaxed) {
        for b in if base == 0 { &batches } else { &looped } {
            let ts = base + (b.ts_ns - first) + rec.interval_ns;
            if !pacer.wait_until(ts, &stop) {
                break 'outer;
            }
            let mut b = b.clone();
            b.ts_ns = ts;
            for s in &mut b.samples {
                s.ts_ns = ts;
            }
            sent_to_ns.store(ts, Ordering::SeqCst);
            let _ = tx.send(Arc::new(b));
        }
        base += span;
        debug!(loop_start_ns = base, "telemetry recording looped");
    }
}
