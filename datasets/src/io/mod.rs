//! Reading and writing telemetry and flow records: Parquet (the interchange format, module
//! `parquet`), plain CSV (for spreadsheets and quick looks, `csv`), and the HPCC simulator's FCT
//! text format (so results can be compared line by line with HPCC runs, `hpcc`). This module
//! holds what they share: the column lists, the errors, and atomic writes.
//!
//! Column names are the struct field names of [`TelemetrySample`] and [`FlowRecord`], so a
//! file written by pandas or pyarrow with the documented names reads back without a mapping
//! table. Types are strict: a reader reports a column of another type instead of guessing a
//! conversion, because silently casting counters (signed, float) hides conversion bugs upstream.
//!
//! Every writer goes through a temporary file beside the destination (`<path>.<pid>-<n>.tmp`,
//! its own) that is synced and then renamed, so a crash or a full disk never leaves a truncated
//! file under the real name.

use std::fmt::Display;
use std::fs::{self, File};
use std::io::BufWriter;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use polars::prelude::*;

use crate::records::TelemetrySample;
#[cfg(doc)]
use crate::records::{FlowRecord, TELEMETRY_SCHEMA_VERSION};
use crate::signals::HeldSignals;
use crate::telemetry::CounterMode;

/// Parquet key-value metadata key under which [`write_telemetry_parquet`] records
/// [`TELEMETRY_SCHEMA_VERSION`]; the schema version travels inside the file so that a file
/// copied away from its producer still says which contract it follows.
pub const TELEMETRY_SCHEMA_KEY: &str = "ecn_tuner.telemetry_schema";

/// Telemetry column names in file order (= [`TelemetrySample`] field order). Public so that
/// converters and validators can check a foreign file's header against one list.
pub const TELEMETRY_COLUMNS: [&str; 19] = [
    "ts_ns",
    "switch",
    "port",
    "queue",
    "link_bps",
    "queue_bytes",
    "queue_bytes_avg",
    "queue_bytes_max",
    "tx_bytes",
    "tx_pkts",
    "ecn_marked_pkts",
    "pfc_pause_rx",
    "pfc_pause_tx",
    "paused_ns",
    "drops",
    "kmin_bytes",
    "kmax_bytes",
    "pmax",
    "span_ns",
];

/// The columns of [`TELEMETRY_COLUMNS`] that a file may lack (added by a minor version of the
/// schema): each reads as 0 where it is absent.
pub const OPTIONAL_TELEMETRY_COLUMNS: [&str; 1] = ["span_ns"];

/// Flow-record column names in file order (= [`FlowRecord`] field order).
pub const FLOW_COLUMNS: [&str; 10] =
    ["src", "dst", "sport", "dport", "priority", "size_bytes", "start_ns", "fct_ns", "ideal_ns", "slowdown"];

/// Priority that HPCC's FCT file leaves implicit: its RDMA flows all run on priority group 3.
pub const HPCC_PRIORITY: u8 = 3;

/// Why a read or write failed. Every variant names the file, and the row, column or line when
/// known, so that the one-line `Display` is enough for a user to find the problem.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The operating system refused an operation on the file (open, write, sync, rename).
    #[error("{}: cannot {action}: {err}", .path.display())]
    Io {
        /// The file concerned (for writes, the destination, not the `.tmp` file).
        path: PathBuf,
        /// What was attempted, e.g. `open for reading`.
        action: &'static str,
        /// The underlying error.
        err: std::io::Error,
    },
    /// A finished file could not be renamed over its destination (a read-only or bind-mounted
    /// file); what was written is kept under its temporary name.
    #[error("{}: cannot rename the finished file into place: {err}; what was written is kept in {}", .path.display(), .kept.display())]
    NotPlaced {
        /// The destination.
        path: PathBuf,
        /// Where the finished file is.
        kept: PathBuf,
        /// The rename's error.
        err: std::io::Error,
    },
    /// The file is not readable Parquet (truncated, corrupt, not Parquet at all), or polars
    /// could not encode the frame.
    #[error("{}: Parquet error: {message}", .path.display())]
    Parquet {
        /// The file concerned.
        path: PathBuf,
        /// The decoder's message, flattened to one line.
        message: String,
    },
    /// A required column is absent.
    #[error("{}: missing column `{column}`", .path.display())]
    MissingColumn {
        /// The file concerned.
        path: PathBuf,
        /// The missing column.
        column: String,
    },
    /// A column exists but has another type than the schema requires.
    #[error("{}: column `{column}` has type {found}, expected {expected}", .path.display())]
    WrongType {
        /// The file concerned.
        path: PathBuf,
        /// The offending column.
        column: String,
        /// The type the schema requires.
        expected: String,
        /// The type found in the file.
        found: String,
    },
    /// A null in a column that the schema declares non-nullable.
    #[error("{}: column `{column}`, row {row}: null in a non-nullable column", .path.display())]
    Null {
        /// The file concerned.
        path: PathBuf,
        /// The offending column.
        column: String,
        /// 0-based row index.
        row: usize,
    },
    /// A value that the target format cannot represent or that makes no sense.
    #[error("{}: column `{column}`, row {row}: {message}", .path.display())]
    BadValue {
        /// The file concerned.
        path: PathBuf,
        /// The offending column.
        column: String,
        /// 0-based row index.
        row: usize,
        /// What is wrong with the value.
        message: String,
    },
    /// A line of a text file does not parse.
    #[error("{}:{line}: {message}", .path.display())]
    BadLine {
        /// The file concerned.
        path: PathBuf,
        /// 1-based line number, as editors and `grep -n` count.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// The file declares a telemetry schema of another major version.
    #[error("{}: {}", .path.display(), schema_version_said(.found))]
    SchemaVersion {
        /// The file concerned.
        path: PathBuf,
        /// Version recorded in the file.
        found: String,
    },
}

impl IoError {
    fn io(path: &Path, action: &'static str, err: std::io::Error) -> Self {
        IoError::Io { path: path.to_path_buf(), action, err }
    }

    fn parquet(path: &Path, message: impl Display) -> Self {
        IoError::Parquet { path: path.to_path_buf(), message: one_line(&message.to_string()) }
    }
}

/// Polars messages can span lines (hints, schema dumps); the contract is one line per error.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs a polars call and turns both its errors and its panics into [`IoError::Parquet`]:
/// the Parquet decoder reads untrusted bytes and has been known to panic on corrupt input,
/// and the readers promise an error, not a crash.
fn guarded<T>(path: &Path, f: impl FnOnce() -> PolarsResult<T>) -> Result<T, IoError> {
    guarded_message(f).map_err(|message| IoError::Parquet { path: path.to_path_buf(), message })
}

/// As [`guarded`], for a call that decodes `path`: an allocation a corrupt length makes
/// impossible exits 2 naming the file ([`crate::decoding`]) instead of aborting.
fn guarded_read<T>(path: &Path, f: impl FnOnce() -> PolarsResult<T>) -> Result<T, IoError> {
    guarded(path, || crate::decoding::while_decoding(path, f))
}

/// As [`guarded`], with the error as a one-line message for callers with their own error type.
pub(crate) fn guarded_message<T>(f: impl FnOnce() -> PolarsResult<T>) -> Result<T, String> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(one_line(&e.to_string())),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(one_line(&format!("decoder panicked: {what}")))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Atomic writes

/// A name for a file beside `destination` while it is made: its name and `suffix`, or, beside
/// a name near the 255-byte limit of most file systems, `suffix` alone (a legal name was
/// refused as "too long" for want of room for the suffix).
pub fn name_beside(destination: &Path, suffix: &str) -> PathBuf {
    if destination.file_name().is_some_and(|n| n.len() > 200) {
        return destination.with_file_name(suffix);
    }
    let mut name = destination.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A file being written under a temporary name beside its destination (one filesystem, so
/// that the final rename is atomic): `<path>.<pid>-<n>.tmp` ([`name_beside`]), created exclusively, so that two
/// writers of one destination never share it and a file or link already there is never
/// written through. Dropped before [`Temporary::place`], it removes the file.
struct Temporary {
    path: PathBuf,
    destination: PathBuf,
    /// Renamed into place, or kept after a failed rename: not to be removed.
    done: bool,
}

impl Temporary {
    fn create(destination: &Path) -> Result<(Temporary, File), IoError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut tries = 0;
        loop {
            let suffix = format!(".{}-{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
            let path = name_beside(destination, &suffix);
            match fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => return Ok((Temporary { path, destination: destination.to_path_buf(), done: false }, file)),
                // Someone else's file of that name: another number.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
                Err(e) => return Err(IoError::io(destination, "create temporary file", e)),
            }
        }
    }

    /// Syncs `file` (written through this name) and renames it over the destination, the
    /// process's end held off meanwhile ([`HeldSignals`]). The sync comes first because
    /// otherwise a crash can persist the rename but not the data, leaving an empty or partial
    /// file under the real name: what the temporary file is meant to prevent. Where the rename
    /// fails and `keep` is set (a recording that cannot be made again), the file stays under
    /// its temporary name and the error says where.
    fn place(mut self, file: &File, keep: bool) -> Result<(), IoError> {
        let _held = HeldSignals::new();
        // A file replaced keeps its mode: a recording kept 0600 became world-readable.
        if let Ok(old) = fs::metadata(&self.destination) {
            let _ = file.set_permissions(old.permissions());
        }
        file.sync_all().map_err(|e| IoError::io(&self.destination, "sync", e))?;
        match fs::rename(&self.path, &self.destination) {
            Ok(()) => {
                self.done = true;
                // The rename is durable once the folder that holds it is synced.
                let folder = self.destination.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                let _ = File::open(folder).and_then(|f| f.sync_all());
                Ok(())
            }
            Err(err) if keep => {
                self.done = true;
                Err(IoError::NotPlaced { path: self.destination.clone(), kept: self.path.clone(), err })
            }
            Err(e) => Err(IoError::io(&self.destination, "rename temporary file into place", e)),
        }
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.done {
            // Best effort: the error that ended the write matters more than a failed cleanup.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Writes through a [`Temporary`] file, syncs, then renames over `path`, holding off the
/// signals that end the process ([`HeldSignals`]) throughout, so that an interrupted write
/// leaves no temporary file.
fn write_atomically(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<File>) -> Result<(), IoError>,
) -> Result<(), IoError> {
    let _held = HeldSignals::new();
    let (tmp, file) = Temporary::create(path)?;
    let mut w = BufWriter::new(file);
    body(&mut w)?;
    let file = w.into_inner().map_err(|e| IoError::io(path, "write", e.into_error()))?;
    tmp.place(&file, false)
}

/// Rows per Parquet row group in the files we write: the unit the streaming reader holds in
/// memory (64 Ki rows of telemetry decode to about 10 MB), and large enough that per-group
/// overhead does not slow reading.
pub const PARQUET_ROW_GROUP_ROWS: usize = 65_536;

fn write_parquet_frame(path: &Path, df: DataFrame, kv: Option<KeyValueMetadata>) -> Result<(), IoError> {
    write_atomically(path, |w| {
        guarded(path, || {
            let mut writer = ParquetWriter::new(w)
                .with_compression(ParquetCompression::Zstd(None))
                .with_key_value_metadata(kv)
                .batched(df.schema().as_ref())?;
            // One row group per PARQUET_ROW_GROUP_ROWS rows, the last one shorter: polars'
            // own split of a whole frame (`with_row_group_size`) made groups of up to twice that.
            let mut offset = 0;
            loop {
                writer.write_batch(&df.slice(offset as i64, PARQUET_ROW_GROUP_ROWS))?;
                offset += PARQUET_ROW_GROUP_ROWS;
                if offset >= df.height() {
                    break;
                }
            }
            writer.finish()?;
            Ok(())
        })?;
        Ok(())
    })
}

/// A telemetry file's format, from its extension: `.parquet` (or `.pq`) or `.csv`, in any
/// case. The readers and [`write_telemetry`] share this one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TelemetryFormat {
    /// The interchange format, with the schema version in its metadata.
    Parquet,
    /// Plain CSV with a header of [`TELEMETRY_COLUMNS`].
    Csv,
}

impl TelemetryFormat {
    /// The format `path`'s extension names; `None` for any other extension.
    pub fn of(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "parquet" | "pq" => Some(TelemetryFormat::Parquet),
            "csv" => Some(TelemetryFormat::Csv),
            _ => None,
        }
    }
}

/// Writes per-interval telemetry rows in the format `path`'s extension names
/// ([`TelemetryFormat::of`]), atomically as every writer here. A path with another extension is
/// refused before anything is written.
pub fn write_telemetry(path: &Path, rows: &[TelemetrySample]) -> Result<(), IoError> {
    match TelemetryFormat::of(path) {
        Some(TelemetryFormat::Parquet) => write_telemetry_parquet(path, rows),
        Some(TelemetryFormat::Csv) => write_telemetry_csv(path, rows),
        None => Err(unknown_format(path)),
    }
}

/// A telemetry file written as rows come, in the format its name asks for (see
/// [`TelemetryFormat::of`]); memory stays bounded however long the recording. Nothing appears
/// under the name until [`TelemetryWriter::finish`] succeeds.
pub enum TelemetryWriter {
    /// A `.parquet` file (boxed: its encoder is large).
    Parquet(Box<TelemetryParquetWriter>),
    /// A `.csv` file.
    Csv(TelemetryCsvWriter),
}

impl TelemetryWriter {
    /// Starts its temporary file; an error names the path when it ends in neither `.parquet` nor
    /// `.csv`, or cannot be created.
    pub fn create(path: &Path) -> Result<Self, IoError> {
        match TelemetryFormat::of(path) {
            Some(TelemetryFormat::Parquet) => {
                TelemetryParquetWriter::create(path, CounterMode::Delta).map(|w| TelemetryWriter::Parquet(Box::new(w)))
            }
            Some(TelemetryFormat::Csv) => TelemetryCsvWriter::create(path).map(TelemetryWriter::Csv),
            None => Err(unknown_format(path)),
        }
    }

    /// Adds rows.
    pub fn write(&mut self, rows: &[TelemetrySample]) -> Result<(), IoError> {
        match self {
            TelemetryWriter::Parquet(w) => w.write(rows),
            TelemetryWriter::Csv(w) => w.write(rows),
        }
    }

    /// Puts the file in place; returns the number of rows written.
    pub fn finish(self) -> Result<u64, IoError> {
        match self {
            TelemetryWriter::Parquet(w) => w.finish(),
            TelemetryWriter::Csv(w) => w.finish(),
        }
    }
}

fn unknown_format(path: &Path) -> IoError {
    IoError::io(
        path,
        "choose a format for",
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the file must end in .parquet or .csv"),
    )
}

mod csv;
mod hpcc;
mod parquet;

pub use csv::{write_flows_csv, write_telemetry_csv, TelemetryCsvWriter};
pub use hpcc::{hpcc_ip_node, hpcc_node_ip, read_flows_hpcc_fct, write_flows_hpcc_fct};
pub(crate) use parquet::{newer_minor, schema_major, schema_version_said};
pub use parquet::{
    read_flows_parquet, read_telemetry_parquet, telemetry_frame, telemetry_schema_version, write_flows_parquet,
    write_telemetry_parquet, write_telemetry_parquet_with, TelemetryParquetWriter,
};

#[cfg(test)]
mod tests {
    use super::parquet::{flows_frame, ParquetFile};
    use super::*;
    use crate::records::{FlowRecord, QueueSample, TelemetrySample, TELEMETRY_SCHEMA_VERSION};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh directory per test, so that parallel tests never share files; removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("ecn-datasets-{}-{}-{}", std::process::id(), n, name));
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        fn join(&self, file: &str) -> PathBuf {
            self.0.join(file)
        }
    }

    #[test]
    fn telemetry_format_follows_the_extension_and_refuses_others() {
        assert_eq!(TelemetryFormat::of(Path::new("a/b.PARQUET")), Some(TelemetryFormat::Parquet));
        assert_eq!(TelemetryFormat::of(Path::new("b.pq")), Some(TelemetryFormat::Parquet));
        assert_eq!(TelemetryFormat::of(Path::new("b.Csv")), Some(TelemetryFormat::Csv));
        assert_eq!(TelemetryFormat::of(Path::new("b.txt")), None);
        assert_eq!(TelemetryFormat::of(Path::new("parquet")), None);
        let dir = TempDir::new("format");
        let path = dir.join("out.txt");
        let err = write_telemetry(&path, &[]).unwrap_err().to_string();
        assert!(err.contains("out.txt") && err.contains(".csv"), "{err}");
        assert!(!path.exists() && !temporary_left(&path));
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn sample(i: u64) -> TelemetrySample {
        TelemetrySample {
            switch: format!("leaf{i}"),
            port: if i == 1 { "eth,1 \"x\"".to_string() } else { format!("eth{i}") },
            queue: (i % 8) as u8,
            sample: QueueSample {
                ts_ns: 1_000 * i,
                link_bps: 100_000_000_000,
                queue_bytes: 10 * i,
                queue_bytes_avg: 12.5 * i as f64,
                queue_bytes_max: if i == 2 { u64::MAX } else { 20 * i },
                tx_bytes: 1_500 * i,
                tx_pkts: i,
                ecn_marked_pkts: i / 2,
                pfc_pause_rx: 0,
                pfc_pause_tx: i % 3,
                paused_ns: 7 * i,
                drops: 0,
                kmin_bytes: 100_000,
                kmax_bytes: 400_000,
                pmax: 0.2,
                span_ns: 1_000 * (i % 2),
            },
        }
    }

    /// Row groups are the unit the streaming reader holds: none may exceed
    /// PARQUET_ROW_GROUP_ROWS, however many rows the frame has.
    #[test]
    fn row_groups_hold_at_most_the_documented_rows() {
        let dir = TempDir::new("row-groups");
        let path = dir.join("t.parquet");
        let rows: Vec<TelemetrySample> =
            (0..2 * PARQUET_ROW_GROUP_ROWS as u64 + 1).map(|i| sample(i % 7 + 1)).collect();
        write_telemetry_parquet(&path, &rows).unwrap();
        let metadata = ParquetReader::new(File::open(&path).unwrap()).get_metadata().unwrap().clone();
        let groups: Vec<usize> = metadata.row_groups.iter().map(|g| g.num_rows()).collect();
        assert_eq!(groups, [PARQUET_ROW_GROUP_ROWS, PARQUET_ROW_GROUP_ROWS, 1]);
        assert_eq!(read_telemetry_parquet(&path).unwrap().len(), rows.len());
    }

    fn flow(i: u32, completed: bool) -> FlowRecord {
        let ideal = 10_000 + u64::from(i);
        let fct = 9_000 + 3_000 * u64::from(i);
        FlowRecord {
            src: i,
            dst: (i + 5) % 16,
            sport: 10_000 + i as u16,
            dport: 100,
            priority: HPCC_PRIORITY,
            size_bytes: 1_000 * u64::from(i) + 1,
            start_ns: 2_000_000_000 + u64::from(i),
            fct_ns: completed.then_some(fct),
            ideal_ns: ideal,
            slowdown: completed.then(|| (fct as f64 / ideal as f64).max(1.0)),
            sent_ns: completed.then_some(fct / 2),
            delivered_ns: completed.then_some(fct - 1_000),
            base_rtt_ns: i.is_multiple_of(2).then_some(4_000),
        }
    }

    fn write_frame(path: &Path, mut df: DataFrame, kv: Option<KeyValueMetadata>) {
        let mut f = File::create(path).unwrap();
        ParquetWriter::new(&mut f).with_key_value_metadata(kv).finish(&mut df).unwrap();
    }

    #[test]
    fn telemetry_parquet_round_trip() {
        let dir = TempDir::new("telemetry");
        let path = dir.join("t.parquet");
        let rows: Vec<_> = (0..5).map(sample).collect();
        write_telemetry_parquet(&path, &rows).unwrap();
        assert!(!temporary_left(&path), "temporary file left behind");
        assert_eq!(read_telemetry_parquet(&path).unwrap(), rows);
        assert_eq!(telemetry_schema_version(&path).unwrap().as_deref(), Some(TELEMETRY_SCHEMA_VERSION));

        // Types as documented, so that other tools see the same schema.
        let f = ParquetFile::open(&path).unwrap();
        let names: Vec<&str> = f.df.get_column_names().iter().map(|s| s.as_str()).collect();
        assert_eq!(names, TELEMETRY_COLUMNS);
        assert_eq!(f.df.column("queue").unwrap().dtype(), &DataType::UInt8);
        assert_eq!(f.df.column("switch").unwrap().dtype(), &DataType::String);
        assert_eq!(f.df.column("pmax").unwrap().dtype(), &DataType::Float64);
        assert_eq!(f.df.column("drops").unwrap().dtype(), &DataType::UInt64);

        // Overwriting replaces the file.
        write_telemetry_parquet(&path, &rows[..2]).unwrap();
        assert_eq!(read_telemetry_parquet(&path).unwrap(), rows[..2]);
    }

    #[test]
    fn empty_files_round_trip() {
        let dir = TempDir::new("empty");
        let t = dir.join("t.parquet");
        write_telemetry_parquet(&t, &[]).unwrap();
        assert!(read_telemetry_parquet(&t).unwrap().is_empty());
        let f = dir.join("f.parquet");
        write_flows_parquet(&f, &[]).unwrap();
        assert!(read_flows_parquet(&f).unwrap().is_empty());
    }

    #[test]
    fn flows_parquet_round_trip_with_nulls() {
        let dir = TempDir::new("flows");
        let path = dir.join("f.parquet");
        let rows: Vec<_> = (0..6).map(|i| flow(i, i % 3 != 1)).collect();
        write_flows_parquet(&path, &rows).unwrap();
        assert_eq!(read_flows_parquet(&path).unwrap(), rows);
        let f = ParquetFile::open(&path).unwrap();
        assert_eq!(f.df.column("fct_ns").unwrap().null_count(), 2);
        assert_eq!(f.df.column("sport").unwrap().dtype(), &DataType::UInt16);
        assert_eq!(f.df.column("src").unwrap().dtype(), &DataType::UInt32);
        assert_eq!(f.df.column("base_rtt_ns").unwrap().null_count(), 3);
    }

    #[test]
    fn flows_parquet_without_the_phase_columns_reads_them_as_none() {
        let dir = TempDir::new("flows-v1");
        let path = dir.join("f.parquet");
        let rows: Vec<_> = (0..3).map(|i| flow(i, true)).collect();
        let mut df = flows_frame(&rows).unwrap();
        for column in ["sent_ns", "delivered_ns", "base_rtt_ns"] {
            let _ = df.drop_in_place(column).unwrap();
        }
        write_frame(&path, df, None);
        let read = read_flows_parquet(&path).unwrap();
        let expected: Vec<_> = rows
            .into_iter()
            .map(|r| FlowRecord { sent_ns: None, delivered_ns: None, base_rtt_ns: None, ..r })
            .collect();
        assert_eq!(read, expected);
    }

    #[test]
    fn missing_column_is_named() {
        let dir = TempDir::new("missing");
        let path = dir.join("t.parquet");
        let mut df = telemetry_frame(&[sample(1)]).unwrap();
        let _ = df.drop_in_place("tx_pkts").unwrap();
        write_frame(&path, df, None);
        let err = read_telemetry_parquet(&path).unwrap_err();
        assert!(matches!(&err, IoError::MissingColumn { column, .. } if column == "tx_pkts"), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("t.parquet") && msg.contains("tx_pkts"), "{msg}");

        // A flows file is not a telemetry file.
        let flows = dir.join("f.parquet");
        write_flows_parquet(&flows, &[flow(1, true)]).unwrap();
        let err = read_telemetry_parquet(&flows).unwrap_err();
        assert!(matches!(&err, IoError::MissingColumn { column, .. } if column == "ts_ns"), "{err}");
    }

    #[test]
    fn wrong_type_is_named() {
        let dir = TempDir::new("wrongtype");
        let path = dir.join("t.parquet");
        let mut df = telemetry_frame(&[sample(1), sample(2)]).unwrap();
        df.with_column(Column::new("ts_ns".into(), vec![1i64, 2])).unwrap();
        write_frame(&path, df, None);
        let err = read_telemetry_parquet(&path).unwrap_err();
        assert!(matches!(&err, IoError::WrongType { column, .. } if column == "ts_ns"), "{err}");
        assert!(err.to_string().contains("i64"), "{err}");
    }

    #[test]
    fn null_is_reported_with_row() {
        let dir = TempDir::new("null");
        let path = dir.join("t.parquet");
        let mut df = telemetry_frame(&[sample(0), sample(1), sample(2)]).unwrap();
        df.with_column(Column::new("drops".into(), vec![Some(0u64), Some(0), None])).unwrap();
        write_frame(&path, df, None);
        let err = read_telemetry_parquet(&path).unwrap_err();
        assert!(matches!(&err, IoError::Null { column, row: 2, .. } if column == "drops"), "{err}");
        assert!(err.to_string().contains("row 2"), "{err}");

        // Nulls are fine where the schema allows them, and only there.
        let flows = dir.join("f.parquet");
        let mut df = flows_frame(&[flow(1, true), flow(2, true)]).unwrap();
        df.with_column(Column::new("ideal_ns".into(), vec![None, Some(1u64)])).unwrap();
        write_frame(&flows, df, None);
        let err = read_flows_parquet(&flows).unwrap_err();
        assert!(matches!(&err, IoError::Null { column, row: 0, .. } if column == "ideal_ns"), "{err}");
    }

    #[test]
    fn other_major_schema_version_is_refused() {
        let dir = TempDir::new("version");
        let path = dir.join("t.parquet");
        let df = telemetry_frame(&[sample(1)]).unwrap();
        let kv = KeyValueMetadata::from_static(vec![(TELEMETRY_SCHEMA_KEY.into(), "999.0".into())]);
        write_frame(&path, df, Some(kv));
        let err = read_telemetry_parquet(&path).unwrap_err();
        assert!(matches!(err, IoError::SchemaVersion { .. }), "{err}");
        // The message names the key, with its value as written.
        assert!(err.to_string().contains("metadata key ecn_tuner.telemetry_schema is `999.0`"), "{err}");

        // A higher minor version is newer; another major one, or none, is not.
        for (found, newer) in [
            ("1.2", true),
            ("1.10", true),
            ("1.1", false),
            ("1.0", false),
            ("1", false),
            ("1.x", false),
            ("2.5", false),
        ] {
            assert_eq!(newer_minor(found, "1.1"), newer, "{found}");
        }

        // No recorded version: accepted.
        let bare = dir.join("bare.parquet");
        write_frame(&bare, telemetry_frame(&[sample(1)]).unwrap(), None);
        assert_eq!(telemetry_schema_version(&bare).unwrap(), None);
        assert_eq!(read_telemetry_parquet(&bare).unwrap(), vec![sample(1)]);
    }

    #[test]
    fn unreadable_files_are_errors_not_panics() {
        let dir = TempDir::new("broken");
        let missing = dir.join("nope.parquet");
        let err = read_telemetry_parquet(&missing).unwrap_err();
        assert!(matches!(err, IoError::Io { .. }), "{err}");
        assert!(err.to_string().contains("nope.parquet"), "{err}");
        assert!(read_flows_hpcc_fct(&missing).is_err());

        let good = dir.join("good.parquet");
        let rows: Vec<_> = (0..200).map(sample).collect();
        write_telemetry_parquet(&good, &rows).unwrap();
        let bytes = fs::read(&good).unwrap();
        for (name, content) in [
            ("half.parquet", &bytes[..bytes.len() / 2]),
            ("head.parquet", &bytes[..8]),
            ("tail.parquet", &bytes[bytes.len() - 8..]),
            ("empty.parquet", &[][..]),
            ("text.parquet", &b"ts_ns,switch\n1,leaf0\n"[..]),
        ] {
            let p = dir.join(name);
            fs::write(&p, content).unwrap();
            let err = read_telemetry_parquet(&p).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }

        // A footer that survives with damaged data pages in between.
        let mut corrupt = bytes.clone();
        let n = corrupt.len();
        for b in &mut corrupt[8..n / 2] {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        let p = dir.join("corrupt.parquet");
        fs::write(&p, &corrupt).unwrap();
        if let Ok(read) = read_telemetry_parquet(&p) {
            assert_ne!(read, rows, "corruption went unnoticed");
        }
    }

    #[test]
    fn write_into_missing_directory_names_the_file() {
        let dir = TempDir::new("nodir");
        let path = dir.join("no/such/dir/t.parquet");
        let err = write_telemetry_parquet(&path, &[sample(1)]).unwrap_err();
        assert!(err.to_string().contains("t.parquet"), "{err}");
        assert!(!temporary_left(&path));
    }

    #[test]
    fn hpcc_addresses() {
        assert_eq!(format!("{:08x}", hpcc_node_ip(9).unwrap()), "0b000901");
        assert_eq!(format!("{:08x}", hpcc_node_ip(300).unwrap()), "0b012c01");
        assert_eq!(hpcc_node_ip(65_536), None);
        for node in [0, 1, 15, 255, 256, 65_535] {
            assert_eq!(hpcc_ip_node(hpcc_node_ip(node).unwrap()), Some(node));
        }
        assert_eq!(hpcc_ip_node(0x0a00_0001), None);
        assert_eq!(hpcc_ip_node(0x0b00_0002), None);
    }

    #[test]
    fn hpcc_fct_round_trip() {
        let dir = TempDir::new("hpcc");
        let path = dir.join("fct.txt");
        let rows: Vec<_> = (0..10).map(|i| flow(i, i != 4)).collect();
        write_flows_hpcc_fct(&path, &rows).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 9, "incomplete flows are not written");
        assert!(text.lines().next().unwrap().starts_with("0b000001 0b000501 10000 100 1 "), "{text}");
        // The format has no phase times.
        let completed: Vec<_> = rows
            .into_iter()
            .filter(|r| r.fct_ns.is_some())
            .map(|r| FlowRecord { sent_ns: None, delivered_ns: None, base_rtt_ns: None, ..r })
            .collect();
        assert_eq!(read_flows_hpcc_fct(&path).unwrap(), completed);

        let mut too_big = flow(1, true);
        too_big.dst = 70_000;
        let err = write_flows_hpcc_fct(&path, &[flow(0, true), too_big]).unwrap_err();
        assert!(matches!(&err, IoError::BadValue { column, row: 1, .. } if column == "dst"), "{err}");
        // The failed write left the previous file intact.
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn hpcc_fct_bad_lines_are_located() {
        let dir = TempDir::new("hpccbad");
        let path = dir.join("fct.txt");
        let good = "0b000901 0b000401 10000 100 21531 2000008282 9935 10006";
        for (bad, needle) in [
            ("0b000901 0b000401 10000 100 21531 2000008282 9935", "8 fields"),
            ("0b000901 0b000401 10000 100 abc 2000008282 9935 10006", "size"),
            ("zz000901 0b000401 10000 100 21531 2000008282 9935 10006", "sip"),
            ("0a000901 0b000401 10000 100 21531 2000008282 9935 10006", "HPCC host"),
            ("0b000901 0b000401 70000 100 21531 2000008282 9935 10006", "sport"),
            ("0b000901 0b000401 10000 100 21531 2000008282 9935 0", "standalone"),
        ] {
            fs::write(&path, format!("{good}\n\n{bad}\n")).unwrap();
            let err = read_flows_hpcc_fct(&path).unwrap_err();
            assert!(matches!(err, IoError::BadLine { line: 3, .. }), "{err}");
            let msg = err.to_string();
            assert!(msg.contains("fct.txt:3:") && msg.contains(needle), "{msg}");
        }
        // Slowdown is clamped at 1 when the flow beat its standalone estimate.
        fs::write(&path, format!("{good}\n")).unwrap();
        let r = &read_flows_hpcc_fct(&path).unwrap()[0];
        assert_eq!((r.src, r.dst, r.sport, r.dport), (9, 4, 10_000, 100));
        assert_eq!((r.fct_ns, r.ideal_ns, r.slowdown, r.priority), (Some(9_935), 10_006, Some(1.0), 3));
    }

    #[test]
    fn reference_hpcc_fct_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/ls16/fct.txt");
        assert!(
            path.exists(),
            "reference file {} is missing: the tests expect the shared/ directory beside the \
             checkout (CI provides it)",
            path.display()
        );
        let flows = read_flows_hpcc_fct(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(flows.len(), 1137);
        for (i, f) in flows.iter().enumerate() {
            let s = f.slowdown.unwrap();
            assert!(s >= 1.0, "flow {i}: slowdown {s}");
            assert!(f.src < 16 && f.dst < 16, "flow {i}: {f:?}");
        }
    }

    #[test]
    fn a_streamed_telemetry_file_is_the_one_written_at_once_and_appears_only_when_finished() {
        let dir = TempDir::new("streamed");
        let rows: Vec<TelemetrySample> = (0..5).map(sample).collect();
        for name in ["t.csv", "t.parquet"] {
            let (whole, streamed) = (dir.join(&format!("whole-{name}")), dir.join(name));
            write_telemetry(&whole, &rows).unwrap();
            let mut w = TelemetryWriter::create(&streamed).unwrap();
            w.write(&rows[..2]).unwrap();
            w.write(&rows[2..]).unwrap();
            assert!(!streamed.exists(), "{name}: visible before it is finished");
            assert_eq!(w.finish().unwrap(), 5);
            assert_eq!(fs::read(&streamed).unwrap(), fs::read(&whole).unwrap(), "{name}");
            assert!(!temporary_left(&streamed));
            // Dropped unfinished: neither the file nor its temporary one is left.
            let dropped = dir.join(&format!("dropped-{name}"));
            let mut w = TelemetryWriter::create(&dropped).unwrap();
            w.write(&rows).unwrap();
            drop(w);
            assert!(!dropped.exists() && !temporary_left(&dropped), "{name}");
        }
        let err = TelemetryWriter::create(&dir.join("t.txt")).err().expect("refused").to_string();
        assert!(err.contains("t.txt") && err.contains(".csv"), "{err}");
    }

    /// Whether a temporary file of `path` is left beside it.
    fn temporary_left(path: &Path) -> bool {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(entries) = fs::read_dir(path.parent().unwrap()) else { return false };
        entries.flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&name) && n.ends_with(".tmp")
        })
    }

    /// Two writers of one destination each write a temporary file of their own (they used to
    /// share `<path>.tmp` and interleave their rows), a file already under any such name is
    /// left alone, and a finished recording whose rename fails is kept where the error says.
    #[test]
    fn temporary_files_are_each_writers_own() {
        let dir = TempDir::new("own");
        let rows: Vec<TelemetrySample> = (0..5).map(sample).collect();
        for name in ["t.csv", "t.parquet"] {
            let path = dir.join(name);
            let precious = dir.join(&format!("{name}.tmp"));
            fs::write(&precious, "someone else's").unwrap();
            let (mut first, mut second) =
                (TelemetryWriter::create(&path).unwrap(), TelemetryWriter::create(&path).unwrap());
            first.write(&rows[..3]).unwrap();
            second.write(&rows[..1]).unwrap();
            first.write(&rows[3..]).unwrap();
            assert_eq!(first.finish().unwrap(), 5);
            let whole = fs::read(&path).unwrap();
            assert_eq!(second.finish().unwrap(), 1);
            assert_ne!(fs::read(&path).unwrap(), whole, "{name}: the second, whole, replaced the first");
            assert_eq!(fs::read_to_string(&precious).unwrap(), "someone else's", "{name}");
            fs::remove_file(&precious).unwrap();
            assert!(!temporary_left(&path), "{name}");

            // The destination became a folder: the rename fails, and the rows stay.
            let blocked = dir.join(&format!("blocked-{name}"));
            let mut w = TelemetryWriter::create(&blocked).unwrap();
            w.write(&rows).unwrap();
            fs::create_dir_all(blocked.join("inside")).unwrap();
            let err = w.finish().unwrap_err();
            let IoError::NotPlaced { kept, .. } = &err else { panic!("{name}: {err}") };
            assert!(err.to_string().contains(&kept.display().to_string()), "{err}");
            let copy = dir.join(&format!("kept-{name}"));
            fs::rename(kept, &copy).unwrap();
            let back = match TelemetryFormat::of(&copy) {
                Some(TelemetryFormat::Parquet) => read_telemetry_parquet(&copy).unwrap().len(),
                _ => fs::read_to_string(&copy).unwrap().lines().count() - 1,
            };
            assert_eq!(back, 5, "{name}");
        }
    }

    #[test]
    fn csv_writers() {
        let dir = TempDir::new("csv");
        let t = dir.join("t.csv");
        write_telemetry_csv(&t, &[sample(0), sample(1)]).unwrap();
        let text = fs::read_to_string(&t).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], TELEMETRY_COLUMNS.join(","));
        assert_eq!(lines[1], "0,leaf0,eth0,0,100000000000,0,0,0,0,0,0,0,0,0,0,100000,400000,0.2,0");
        assert!(lines[2].ends_with(",0.2,1000"), "{}", lines[2]);
        assert!(lines[2].starts_with("1000,leaf1,\"eth,1 \"\"x\"\"\",1,"), "{}", lines[2]);

        let f = dir.join("f.csv");
        write_flows_csv(&f, &[flow(1, false), flow(2, true)]).unwrap();
        let text = fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], FLOW_COLUMNS.join(","));
        assert_eq!(lines[1], "1,6,10001,100,3,1001,2000000001,,10001,");
        assert_eq!(lines[2].split(',').count(), FLOW_COLUMNS.len());
        assert!(lines[2].starts_with("2,7,10002,100,3,2001,2000000002,15000,10002,1.49"), "{}", lines[2]);
    }
}
