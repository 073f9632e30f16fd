//! Parquet, the interchange format: telemetry (with its schema version in the file's key-value
//! metadata, and a streaming writer for runs too long to hold) and flow records.

use super::{
    guarded, guarded_read, write_parquet_frame, IoError, Temporary, PARQUET_ROW_GROUP_ROWS, TELEMETRY_SCHEMA_KEY,
};
use crate::records::{FlowRecord, QueueSample, TelemetrySample, TELEMETRY_SCHEMA_VERSION};
use crate::telemetry::{CounterMode, COUNTERS_KEY};
use polars::prelude::*;
use std::fs::File;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// Parquet reading helpers

/// A decoded Parquet file plus its path, so that every column accessor can produce errors that
/// name the file.
pub(super) struct ParquetFile<'a> {
    path: &'a Path,
    pub(super) df: DataFrame,
    /// File-level key-value metadata, `(key, value)`.
    kv: Vec<(String, Option<String>)>,
}

impl<'a> ParquetFile<'a> {
    pub(super) fn open(path: &'a Path) -> Result<Self, IoError> {
        let file = File::open(path).map_err(|e| IoError::io(path, "open for reading", e))?;
        let (df, kv) = guarded_read(path, || {
            let mut reader = ParquetReader::new(file);
            let kv = reader
                .get_metadata()?
                .key_value_metadata
                .iter()
                .flatten()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect();
            Ok((reader.finish()?, kv))
        })?;
        Ok(ParquetFile { path, df, kv })
    }

    fn metadata(&self, key: &str) -> Option<&str> {
        self.kv.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.as_deref())
    }

    fn rows(&self) -> usize {
        self.df.height()
    }

    fn column(&self, name: &str, expected: &DataType) -> Result<&Column, IoError> {
        let col = self
            .df
            .column(name)
            .map_err(|_| IoError::MissingColumn { path: self.path.to_path_buf(), column: name.to_string() })?;
        if col.dtype() != expected {
            return Err(IoError::WrongType {
                path: self.path.to_path_buf(),
                column: name.to_string(),
                expected: expected.to_string(),
                found: col.dtype().to_string(),
            });
        }
        Ok(col)
    }

    /// A numeric column with nulls kept, for the schema's nullable columns.
    fn nullable<T: PolarsNumericType>(&self, name: &str) -> Result<Vec<Option<T::Native>>, IoError> {
        let col = self.column(name, &T::get_static_dtype())?;
        let ca = col.as_materialized_series().unpack::<T>().map_err(|e| IoError::parquet(self.path, e))?;
        Ok(ca.iter().collect())
    }

    /// A nullable numeric column that older files may lack: all nulls when it is absent.
    fn optional<T: PolarsNumericType>(&self, name: &str) -> Result<Vec<Option<T::Native>>, IoError> {
        if self.df.column(name).is_err() {
            return Ok(vec![None; self.rows()]);
        }
        self.nullable::<T>(name)
    }

    /// A column of [`OPTIONAL_TELEMETRY_COLUMNS`](super::OPTIONAL_TELEMETRY_COLUMNS): `default`
    /// throughout when the file lacks it, and a null an error where it has it.
    fn defaulted<T: PolarsNumericType>(&self, name: &str, default: T::Native) -> Result<Vec<T::Native>, IoError> {
        if self.df.column(name).is_err() {
            return Ok(vec![default; self.rows()]);
        }
        self.required::<T>(name)
    }

    /// A numeric column in which a null is an error.
    fn required<T: PolarsNumericType>(&self, name: &str) -> Result<Vec<T::Native>, IoError> {
        self.no_nulls(name, self.nullable::<T>(name)?)
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, IoError> {
        let col = self.column(name, &DataType::String)?;
        let ca = col.str().map_err(|e| IoError::parquet(self.path, e))?;
        let values: Vec<Option<String>> = ca.iter().map(|v| v.map(str::to_string)).collect();
        self.no_nulls(name, values)
    }

    fn no_nulls<V>(&self, name: &str, values: Vec<Option<V>>) -> Result<Vec<V>, IoError> {
        values
            .into_iter()
            .enumerate()
            .map(|(row, v)| {
                v.ok_or_else(|| IoError::Null { path: self.path.to_path_buf(), column: name.to_string(), row })
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Telemetry

/// Column built from one field, of the row or of its [`QueueSample`]; `stringify!` keeps the
/// column name and the field name the same by construction.
macro_rules! field_column {
    ($rows:expr, $field:ident) => {
        Column::new(stringify!($field).into(), $rows.iter().map(|r| r.$field).collect::<Vec<_>>())
    };
    ($rows:expr, sample.$field:ident) => {
        Column::new(stringify!($field).into(), $rows.iter().map(|r| r.sample.$field).collect::<Vec<_>>())
    };
}

/// The frame [`write_telemetry_parquet`] writes; public so that tests and converters can alter a
/// column (type, values) before writing a variant file.
pub fn telemetry_frame(rows: &[TelemetrySample]) -> PolarsResult<DataFrame> {
    let columns = vec![
        field_column!(rows, sample.ts_ns),
        Column::new("switch".into(), rows.iter().map(|r| r.switch.as_str()).collect::<Vec<_>>()),
        Column::new("port".into(), rows.iter().map(|r| r.port.as_str()).collect::<Vec<_>>()),
        field_column!(rows, queue),
        field_column!(rows, sample.link_bps),
        field_column!(rows, sample.queue_bytes),
        field_column!(rows, sample.queue_bytes_avg),
        field_column!(rows, sample.queue_bytes_max),
        field_column!(rows, sample.tx_bytes),
        field_column!(rows, sample.tx_pkts),
        field_column!(rows, sample.ecn_marked_pkts),
        field_column!(rows, sample.pfc_pause_rx),
        field_column!(rows, sample.pfc_pause_tx),
        field_column!(rows, sample.paused_ns),
        field_column!(rows, sample.drops),
        field_column!(rows, sample.kmin_bytes),
        field_column!(rows, sample.kmax_bytes),
        field_column!(rows, sample.pmax),
        field_column!(rows, sample.span_ns),
    ];
    DataFrame::new(rows.len(), columns)
}

/// Writes telemetry rows as Parquet, one column per [`TelemetrySample`] field (u64 → UInt64,
/// `queue` → UInt8, f64 → Float64, `switch`/`port` → String), with
/// [`TELEMETRY_SCHEMA_VERSION`] under the key-value metadata key [`TELEMETRY_SCHEMA_KEY`].
///
/// The file appears atomically: it is written to a temporary file of its own beside `path`
/// (`<path>.<pid>-<n>.tmp`) and renamed into place.
/// Row groups hold [`PARQUET_ROW_GROUP_ROWS`] rows, so that the streaming reader
/// ([`crate::telemetry::stream_telemetry`]) needs only one group's worth of memory.
pub fn write_telemetry_parquet(path: &Path, rows: &[TelemetrySample]) -> Result<(), IoError> {
    write_telemetry_parquet_with(path, rows, CounterMode::Delta)
}

/// As [`write_telemetry_parquet`], recording how the counter columns are given under the
/// metadata key [`COUNTERS_KEY`] (for files of cumulative counters; readers treat a file
/// without the key as deltas).
pub fn write_telemetry_parquet_with(
    path: &Path,
    rows: &[TelemetrySample],
    counters: CounterMode,
) -> Result<(), IoError> {
    let df = guarded(path, || telemetry_frame(rows))?;
    let mut kv = vec![(TELEMETRY_SCHEMA_KEY.to_string(), TELEMETRY_SCHEMA_VERSION.to_string())];
    if counters != CounterMode::Delta {
        kv.push((COUNTERS_KEY.to_string(), counters.as_str().to_string()));
    }
    write_parquet_frame(path, df, Some(KeyValueMetadata::from_static(kv)))
}

/// Writes a telemetry Parquet file of any size a row group at a time: rows are buffered up
/// to [`PARQUET_ROW_GROUP_ROWS`] and then encoded, so memory stays bounded however many rows
/// pass through (for recordings and test files larger than memory). Same schema, metadata and
/// atomic rename of a temporary file as [`write_telemetry_parquet`]; nothing appears under
/// `path` unless [`TelemetryParquetWriter::finish`] succeeds, and a writer dropped unfinished
/// removes its temporary file.
pub struct TelemetryParquetWriter {
    path: PathBuf,
    tmp: Temporary,
    file: File,
    writer: polars::io::parquet::write::BatchedWriter<File>,
    pending: Vec<TelemetrySample>,
    rows: u64,
}

impl TelemetryParquetWriter {
    /// Starts the temporary file.
    pub fn create(path: &Path, counters: CounterMode) -> Result<Self, IoError> {
        let (tmp, file) = Temporary::create(path)?;
        let handle = file.try_clone().map_err(|e| IoError::io(path, "open", e))?;
        let mut kv = vec![(TELEMETRY_SCHEMA_KEY.to_string(), TELEMETRY_SCHEMA_VERSION.to_string())];
        if counters != CounterMode::Delta {
            kv.push((COUNTERS_KEY.to_string(), counters.as_str().to_string()));
        }
        let writer = guarded(path, || {
            let schema = telemetry_frame(&[])?.schema().as_ref().clone();
            ParquetWriter::new(handle)
                .with_compression(ParquetCompression::Zstd(None))
                .with_key_value_metadata(Some(KeyValueMetadata::from_static(kv)))
                .batched(&schema)
        })?;
        Ok(TelemetryParquetWriter { path: path.to_path_buf(), tmp, file, writer, pending: Vec::new(), rows: 0 })
    }

    /// Adds rows; a row group is written whenever enough are buffered.
    pub fn write(&mut self, rows: &[TelemetrySample]) -> Result<(), IoError> {
        for chunk in rows.chunks(PARQUET_ROW_GROUP_ROWS) {
            self.pending.extend_from_slice(chunk);
            if self.pending.len() >= PARQUET_ROW_GROUP_ROWS {
                self.flush_group()?;
            }
        }
        Ok(())
    }

    fn flush_group(&mut self) -> Result<(), IoError> {
        let take = self.pending.len().min(PARQUET_ROW_GROUP_ROWS);
        let group: Vec<TelemetrySample> = self.pending.drain(..take).collect();
        let writer = &mut self.writer;
        guarded(&self.path, || writer.write_batch(&telemetry_frame(&group)?))?;
        self.rows += group.len() as u64;
        Ok(())
    }

    /// Writes the last row group and the footer, syncs, and renames the file into place.
    /// Returns the number of rows written. Where the rename fails, the file is kept under its
    /// temporary name, which the error gives: a recording is not lost to a destination that
    /// cannot be replaced.
    pub fn finish(mut self) -> Result<u64, IoError> {
        while !self.pending.is_empty() {
            self.flush_group()?;
        }
        let writer = &self.writer;
        guarded(&self.path, || writer.finish())?;
        self.tmp.place(&self.file, true)?;
        Ok(self.rows)
    }
}

/// The telemetry schema version recorded in a Parquet file, or `None` if the file carries none
/// (e.g. converted by a user's own script). Reads only the footer.
pub fn telemetry_schema_version(path: &Path) -> Result<Option<String>, IoError> {
    let file = File::open(path).map_err(|e| IoError::io(path, "open for reading", e))?;
    guarded_read(path, || {
        let mut reader = ParquetReader::new(file);
        let md = reader.get_metadata()?;
        Ok(md
            .key_value_metadata
            .iter()
            .flatten()
            .find(|kv| kv.key == TELEMETRY_SCHEMA_KEY)
            .and_then(|kv| kv.value.clone()))
    })
}

/// The major part of a schema version (`1` of `1.0`).
pub(crate) fn schema_major(version: &str) -> &str {
    version.split('.').next().unwrap_or(version)
}

/// Whether schema version `found` has the same major version as `ours` and a higher minor one:
/// compatible, but written with columns this build does not know.
pub(crate) fn newer_minor(found: &str, ours: &str) -> bool {
    let minor = |v: &str| v.split('.').nth(1).and_then(|m| m.trim().parse::<u64>().ok());
    schema_major(found) == schema_major(ours) && matches!((minor(found), minor(ours)), (Some(f), Some(o)) if f > o)
}

/// Why a file whose schema key holds `found` is refused, and what to do: the key is named,
/// and the value shown as written (a blank or a stray space shows).
pub(crate) fn schema_version_said(found: &str) -> String {
    format!(
        "metadata key {TELEMETRY_SCHEMA_KEY} is `{found}`, but this build reads schema version {TELEMETRY_SCHEMA_VERSION} \
         (any {}.x): another version's file, or a wrong key; write it in the schema of README \"Telemetry schema\" \
         (the key may be left out)",
        schema_major(TELEMETRY_SCHEMA_VERSION)
    )
}

/// Reads a whole telemetry Parquet file into memory.
///
/// Meant for tests and small files; it checks presence, type and nullness of every column and
/// refuses a file whose recorded schema has another major version, but does no semantic
/// validation. A file without a recorded version is accepted, since hand-converted files rarely
/// carry one.
pub fn read_telemetry_parquet(path: &Path) -> Result<Vec<TelemetrySample>, IoError> {
    let f = ParquetFile::open(path)?;
    if let Some(found) = f.metadata(TELEMETRY_SCHEMA_KEY) {
        if schema_major(found) != schema_major(TELEMETRY_SCHEMA_VERSION) {
            return Err(IoError::SchemaVersion { path: path.to_path_buf(), found: found.to_string() });
        }
    }
    let ts_ns = f.required::<UInt64Type>("ts_ns")?;
    let mut switch = f.strings("switch")?;
    let mut port = f.strings("port")?;
    let queue = f.required::<UInt8Type>("queue")?;
    let link_bps = f.required::<UInt64Type>("link_bps")?;
    let queue_bytes = f.required::<UInt64Type>("queue_bytes")?;
    let queue_bytes_avg = f.required::<Float64Type>("queue_bytes_avg")?;
    let queue_bytes_max = f.required::<UInt64Type>("queue_bytes_max")?;
    let tx_bytes = f.required::<UInt64Type>("tx_bytes")?;
    let tx_pkts = f.required::<UInt64Type>("tx_pkts")?;
    let ecn_marked_pkts = f.required::<UInt64Type>("ecn_marked_pkts")?;
    let pfc_pause_rx = f.required::<UInt64Type>("pfc_pause_rx")?;
    let pfc_pause_tx = f.required::<UInt64Type>("pfc_pause_tx")?;
    let paused_ns = f.required::<UInt64Type>("paused_ns")?;
    let drops = f.required::<UInt64Type>("drops")?;
    let kmin_bytes = f.required::<UInt64Type>("kmin_bytes")?;
    let kmax_bytes = f.required::<UInt64Type>("kmax_bytes")?;
    let pmax = f.required::<Float64Type>("pmax")?;
    let span_ns = f.defaulted::<UInt64Type>("span_ns", 0)?;
    Ok((0..f.rows())
        .map(|i| TelemetrySample {
            switch: std::mem::take(&mut switch[i]),
            port: std::mem::take(&mut port[i]),
            queue: queue[i],
            sample: QueueSample {
                ts_ns: ts_ns[i],
                link_bps: link_bps[i],
                queue_bytes: queue_bytes[i],
                queue_bytes_avg: queue_bytes_avg[i],
                queue_bytes_max: queue_bytes_max[i],
                tx_bytes: tx_bytes[i],
                tx_pkts: tx_pkts[i],
                ecn_marked_pkts: ecn_marked_pkts[i],
                pfc_pause_rx: pfc_pause_rx[i],
                pfc_pause_tx: pfc_pause_tx[i],
                paused_ns: paused_ns[i],
                drops: drops[i],
                kmin_bytes: kmin_bytes[i],
                kmax_bytes: kmax_bytes[i],
                pmax: pmax[i],
                span_ns: span_ns[i],
            },
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------
// Flows

pub(super) fn flows_frame(rows: &[FlowRecord]) -> PolarsResult<DataFrame> {
    let columns = vec![
        field_column!(rows, src),
        field_column!(rows, dst),
        field_column!(rows, sport),
        field_column!(rows, dport),
        field_column!(rows, priority),
        field_column!(rows, size_bytes),
        field_column!(rows, start_ns),
        field_column!(rows, fct_ns),
        field_column!(rows, ideal_ns),
        field_column!(rows, slowdown),
        field_column!(rows, sent_ns),
        field_column!(rows, delivered_ns),
        field_column!(rows, base_rtt_ns),
    ];
    DataFrame::new(rows.len(), columns)
}

/// Writes flow records as Parquet, one column per [`FlowRecord`] field with the field's
/// integer width (`src`/`dst` UInt32, ports UInt16, `priority` UInt8, the rest UInt64 or
/// Float64). `fct_ns` and `slowdown` are nullable: null marks a flow that had not completed.
/// `sent_ns`, `delivered_ns` and `base_rtt_ns` are nullable too: null where unknown.
///
/// The file appears atomically: it is written to a temporary file of its own beside `path`
/// (`<path>.<pid>-<n>.tmp`) and renamed into place.
pub fn write_flows_parquet(path: &Path, rows: &[FlowRecord]) -> Result<(), IoError> {
    let df = guarded(path, || flows_frame(rows))?;
    write_parquet_frame(path, df, None)
}

/// Reads a whole flow-record Parquet file into memory; columns must have the types that
/// [`write_flows_parquet`] writes. Files written before `sent_ns`, `delivered_ns` and
/// `base_rtt_ns` existed read with those fields `None`.
pub fn read_flows_parquet(path: &Path) -> Result<Vec<FlowRecord>, IoError> {
    let f = ParquetFile::open(path)?;
    let src = f.required::<UInt32Type>("src")?;
    let dst = f.required::<UInt32Type>("dst")?;
    let sport = f.required::<UInt16Type>("sport")?;
    let dport = f.required::<UInt16Type>("dport")?;
    let priority = f.required::<UInt8Type>("priority")?;
    let size_bytes = f.required::<UInt64Type>("size_bytes")?;
    let start_ns = f.required::<UInt64Type>("start_ns")?;
    let fct_ns = f.nullable::<UInt64Type>("fct_ns")?;
    let ideal_ns = f.required::<UInt64Type>("ideal_ns")?;
    let slowdown = f.nullable::<Float64Type>("slowdown")?;
    let sent_ns = f.optional::<UInt64Type>("sent_ns")?;
    let delivered_ns = f.optional::<UInt64Type>("delivered_ns")?;
    let base_rtt_ns = f.optional::<UInt64Type>("base_rtt_ns")?;
    Ok((0..f.rows())
        .map(|i| FlowRecord {
            src: src[i],
            dst: dst[i],
            sport: sport[i],
            dport: dport[i],
            priority: priority[i],
            size_bytes: size_bytes[i],
            start_ns: start_ns[i],
            fct_ns: fct_ns[i],
            ideal_ns: ideal_ns[i],
            slowdown: slowdown[i],
            sent_ns: sent_ns[i],
            delivered_ns: delivered_ns[i],
            base_rtt_ns: base_rtt_ns[i],
        })
        .collect())
}
