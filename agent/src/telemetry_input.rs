//! Telemetry files as `train --telemetry` and `recommend --telemetry` read them: per-queue
//! series in time order with their continuity breaks, the sample interval, and the file's
//! provenance (hash, rows).

use crate::error::CliError;
use crate::learn::offline::QueueSeries;
use ecn_datasets::{io, TelemetrySample};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// One file's content, grouped by queue.
pub struct TelemetryFile {
    /// The queues, sorted by name.
    pub series: Vec<QueueSeries>,
    /// Rows in the file.
    pub rows: u64,
    /// The sample interval: the most common step between a queue's consecutive samples.
    pub interval_ns: u64,
}

/// Read `path` and group it by queue.
pub fn read(path: &Path) -> Result<TelemetryFile, CliError> {
    let rows = io::read_telemetry_parquet(path).map_err(|e| CliError::BadInput(e.to_string()))?;
    group(rows, &path.display().to_string())
}

/// Group rows from `source` (a file name or URL, for messages) by queue, in time order, with a
/// continuity break wherever a queue's step is not the sample interval.
pub fn group(rows: Vec<TelemetrySample>, source: &str) -> Result<TelemetryFile, CliError> {
    let n = rows.len() as u64;
    if rows.is_empty() {
        return Err(CliError::BadInput(format!("{source}: no telemetry rows")));
    }
    let mut by_queue: BTreeMap<String, Vec<TelemetrySample>> = BTreeMap::new();
    for r in rows {
        by_queue.entry(format!("{}/{}/{}", r.switch, r.port, r.queue)).or_default().push(r);
    }
    let mut steps: BTreeMap<u64, u64> = BTreeMap::new();
    for samples in by_queue.values_mut() {
        samples.sort_by_key(|s| s.ts_ns);
        for w in samples.windows(2) {
            *steps.entry(w[1].ts_ns - w[0].ts_ns).or_default() += 1;
        }
    }
    let interval_ns = steps.iter().max_by_key(|(_, &count)| count).map(|(&step, _)| step).unwrap_or(0);
    if interval_ns == 0 {
        return Err(CliError::BadInput(format!(
            "{source}: cannot tell the sample interval (every queue needs two samples at distinct times)"
        )));
    }
    let series = by_queue
        .into_iter()
        .map(|(name, samples)| {
            let breaks =
                (1..samples.len()).filter(|&i| samples[i].ts_ns - samples[i - 1].ts_ns != interval_ns).collect();
            QueueSeries { name, samples, breaks }
        })
        .collect();
    Ok(TelemetryFile { series, rows: n, interval_ns })
}

/// SHA-256 of a file's bytes, lowercase hex.
pub fn sha256(path: &Path) -> Result<String, CliError> {
    let mut f = std::fs::File::open(path).map_err(|e| CliError::BadInput(format!("{}: {e}", path.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| CliError::BadInput(format!("{}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
