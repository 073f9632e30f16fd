//! CSV writers, for spreadsheets and quick looks (the validated CSV reader is
//! `telemetry::load_telemetry`).

use super::{write_atomically, IoError, Temporary, FLOW_COLUMNS, TELEMETRY_COLUMNS};
use crate::records::{FlowRecord, TelemetrySample};
use std::fmt::Display;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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
/// The file appears atomically: it is written to a temporary file of its own beside `path`
/// (`<path>.<pid>-<n>.tmp`) and renamed into place.
pub fn write_telemetry_csv(path: &Path, rows: &[TelemetrySample]) -> Result<(), IoError> {
    write_atomically(path, |w| {
        writeln!(w, "{}", TELEMETRY_COLUMNS.join(",")).map_err(|e| IoError::io(path, "write", e))?;
        rows.iter().try_for_each(|r| write_telemetry_row(w, r).map_err(|e| IoError::io(path, "write", e)))
    })
}

/// One telemetry row as a CSV line.
fn write_telemetry_row(w: &mut impl Write, r: &TelemetrySample) -> std::io::Result<()> {
    writeln!(
        w,
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
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
        r.sample.pmax,
        r.sample.span_ns
    )
}

/// Writes a telemetry CSV file of any size as rows come, as [`write_telemetry_csv`] writes
/// one: through a temporary file of its own beside `path`, which
/// [`TelemetryCsvWriter::finish`] syncs and renames into place. Dropped unfinished, it removes
/// the temporary file.
pub struct TelemetryCsvWriter {
    path: PathBuf,
    tmp: Temporary,
    out: BufWriter<File>,
    rows: u64,
}

impl TelemetryCsvWriter {
    /// Starts the temporary file with the header.
    pub fn create(path: &Path) -> Result<Self, IoError> {
        let (tmp, file) = Temporary::create(path)?;
        let mut w = TelemetryCsvWriter { path: path.to_path_buf(), tmp, out: BufWriter::new(file), rows: 0 };
        let header = TELEMETRY_COLUMNS.join(",");
        writeln!(w.out, "{header}").map_err(|e| IoError::io(path, "write", e))?;
        Ok(w)
    }

    /// Adds rows.
    pub fn write(&mut self, rows: &[TelemetrySample]) -> Result<(), IoError> {
        for r in rows {
            write_telemetry_row(&mut self.out, r).map_err(|e| IoError::io(&self.path, "write", e))?;
        }
        self.rows += rows.len() as u64;
        Ok(())
    }

    /// Flushes, syncs, and renames the file into place. Returns the number of rows written.
    /// Where the rename fails, the file is kept under its temporary name, which the error
    /// gives: a recording is not lost to a destination that cannot be replaced.
    pub fn finish(self) -> Result<u64, IoError> {
        let file = self.out.into_inner().map_err(|e| IoError::io(&self.path, "write", e.into_error()))?;
        self.tmp.place(&file, true)?;
        Ok(self.rows)
    }
}

/// Writes flow records as CSV with a header of [`FLOW_COLUMNS`]; an incomplete flow's
/// `fct_ns` and `slowdown` are empty fields.
///
/// The file appears atomically: it is written to a temporary file of its own beside `path`
/// (`<path>.<pid>-<n>.tmp`) and renamed into place.
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
