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
use ecn_datasets::telemetry::{load_telemetry, CounterMode, ReadOptions, TelemetryData};
use ecn_datasets::TelemetrySample;
use ecn_env::units::MAX_DURATION;
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
    /// Native interval: the shortest of the queues' own sample intervals (each the median of
    /// its steps). Not the most common step between any two rows: queues polled at one
    /// interval but out of phase (two switches 0.3 s apart) made that 0.3 s.
    pub interval_ns: u64,
    /// One pass of the loop: from the first row to one interval past each queue's last row,
    /// the latest of them, so that no queue's first row of a pass comes sooner after its last
    /// row of the pass before than its own interval (it carried a whole interval's traffic
    /// over less, beyond line rate).
    pub loop_ns: u64,
}

/// How the actuator reads a recording: as `validate` does, with the file's own counter mode,
/// except that gaps are replayed as gaps (no batch, or a queue missing from its batches, for
/// a while): a repaired recording has one wherever repair dropped a sample, and refusing them
/// sent the repaired copy back to `validate --repair` for ever.
fn replay_options() -> ReadOptions {
    ReadOptions { max_gap_intervals: f64::INFINITY, ..ReadOptions::default() }
}

impl Recording {
    /// Read a telemetry file (Parquet or CSV), checked as `validate` checks it: a file with
    /// problems is refused, not replayed, and where a `validate --repair --out` run would
    /// write a copy this actuator replays (tried here), the error names it.
    pub fn load(path: &Path) -> Result<Recording, ActuatorError> {
        let data = load_telemetry(path, &replay_options()).map_err(|e| {
            let way = fixed_copy(path).map_or(String::new(), |flags| {
                let file = shell_word(&path.display().to_string());
                format!(": replay the copy that `ecn-tuner validate --telemetry {file} {flags} --out FIXED.parquet` writes")
            });
            ActuatorError::BadInput(format!(
                "--telemetry {e}\nthe actuator replays a file as it is (it takes no --counters, --max-gap or --repair){way}"
            ))
        })?;
        Recording::from_data(data)
            .map_err(|why| ActuatorError::BadInput(format!("--telemetry {}: {why}", path.display())))
    }

    fn from_data(data: TelemetryData) -> Result<Recording, String> {
        // Of queues with two samples or more: a copy written from `data` (`validate --out`) has
        // only its samples to infer intervals from, and the check must hold for it too.
        let sampled = data.queues.iter().filter(|q| q.samples.len() >= 2);
        let intervals = sampled.filter_map(|q| Some((q.interval_ns?, q.samples.last()?.ts_ns)));
        // Saturating: a corrupt timestamp near 2^64 ns is refused below, not an overflow here.
        let (interval_ns, loop_end) =
            intervals.fold((u64::MAX, 0), |(i, end), (qi, last)| (i.min(qi), end.max(last.saturating_add(qi))));
        let mut rows = data.to_rows();
        if rows.is_empty() {
            return Err("no telemetry samples".into());
        }
        if interval_ns == u64::MAX {
            return Err("no queue has two samples (a cumulative file's first row is only its baseline): a replay \
                 needs at least two sample times"
                .into());
        }
        rows.sort_by_key(|r| r.sample.ts_ns);
        let loop_ns = loop_end - rows[0].sample.ts_ns;
        // The replay's clock adds loops of this length: a recording of more than 2^62 ns (146
        // years, a corrupt timestamp) would overflow it, as no recording of a switch spans.
        if loop_ns > MAX_DURATION.0 {
            return Err(format!(
                "its samples span {loop_ns} ns, more than 2^62 ns (146 years): a corrupt ts_ns? A replay \
                 cannot run so long"
            ));
        }
        Ok(Recording { rows, interval_ns, loop_ns })
    }
}

/// The flags of a `validate --repair --out` run whose copy this actuator would replay, tried
/// in turn: as the file says, then as cumulative counters (a file rewritten by pandas lost the
/// key that says so). Advice is given only where it works: a guess sent users to commands
/// that failed, or to copies refused again.
fn fixed_copy(path: &Path) -> Option<&'static str> {
    let repair = ReadOptions { repair: true, ..ReadOptions::default() };
    let cumulative = ReadOptions { counters: Some(CounterMode::Cumulative), ..repair.clone() };
    [("--repair", repair), ("--counters cumulative --repair", cumulative)]
        .into_iter()
        .find_map(|(flags, opts)| Recording::from_data(load_telemetry(path, &opts).ok()?).ok().map(|_| flags))
}

/// `word` as one shell word: quoted where it holds anything a shell would split or expand.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
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
    // Timestamps start near zero in every loop: shift the first row to one interval.
    let span = rec.loop_ns;
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
            // Saturating: loops of up to 2^62 ns each would pass 2^64 after four.
            let ts = base.saturating_add(b.ts_ns - first).saturating_add(rec.interval_ns);
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
        base = base.saturating_add(span);
        debug!(loop_start_ns = base, "telemetry recording looped");
    }
}
