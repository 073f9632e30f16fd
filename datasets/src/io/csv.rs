//! CSV writers, for spreadsheets and quick looks (the validated CSV reader is
//! `telemetry::load_telemetry`).

use super::{write_atomically, IoError, FLOW_COLUMNS, TELEMETRY_COLUMNS};
use crate::records::{FlowRecord, TelemetrySample};
use std::fmt::Display;
use std::io::Write;
use std::path::Path;

/// RFC 4180 quoting, needed only for the free-text columns (switch and port names).
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// Writes telemetry rows as CSV with a header of [`TELEMETRY_COLUMNS`]. Switch and port
/// names are quoted when they contain a comma, quote or newline.
///
/// The file appears atomically: it is written to `<path>.tmp` and renamed into place.
pub fn write_telemetry_csv(path: &Path, rows: &[TelemetrySample]) -> Result<(), IoError> {
    write_atomically(path, |w| {
        let io = |e| IoError::io(path, "write", e);
        writeln!(w, "{}", TELEMETRY_COLUMNS.join(",")).map_err(io)?;
        for r in rows {
            writeln!(
                w,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                r.sample.ts_ns,
                csv_field(&r.switch),
                csv_field(&r.port),
                r.queue,
                r.sample.link_bps,
                r.sample.queue_bytes,
                r.sample.queue_bytes_avg,
                r.sample.queue_bytes_max,
                r.sample.tx_bytes,
                r.sample.tx_pkts,
                r.sample.ecn_marked_pkts,
                r.sample.pfc_pause_rx,
                r.sample.pfc_pause_tx,
                r.sample.paused_ns,
                r.sample.drops,
                r.sample.kmin_bytes,
                r.sample.kmax_bytes,
                r.sample.pmax
            )
            .map_err(io)?;
        }
        Ok(())
    })
}

/// Writes flow records as CSV with a header of [`FLOW_COLUMNS`]; an incomplete flow's
/// `fct_ns` and `slowdown` are empty fields.
///
/// The file appears atomically: it is written to `<path>.tmp` and renamed into place.
pub fn write_flows_csv(path: &Path, rows: &[FlowRecord]) -> Result<(), IoError> {
    fn opt<T: Display>(v: Option<T>) -> String {
        v.map(|v| v.to_string()).unwrap_or_default()
    }
    write_atomically(path, |w| {
        let io = |e| IoError::io(path, "write", e);
        writeln!(w, "{}", FLOW_COLUMNS.join(",")).map_err(io)?;
        for r in rows {
            writeln!(
                w,
                "{},{},{},{},{},{},{},{},{},{}",
                r.src,
                r.dst,
                r.sport,
                r.dport,
                r.priority,
                r.size_bytes,
                r.start_ns,
                opt(r.fct_ns),
                r.ideal_ns,
                opt(r.slowdown)
            )
            .map_err(io)?;
        }
        Ok(())
    })
}
