//! Parquet source: one row group at a time, reading only that row group's column chunks from
//! the file (no memory map of the whole file, so an address-space limit below the file size
//! still works), decoded by polars.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use polars::io::parquet::read::_internal::to_deserializer;
use polars::io::parquet::read::{infer_schema, FileMetadata};
use polars::prelude::*;

use super::problem::{Collector, ProblemKind};
use super::rows::{check_float, queue_index, queue_name, Batch, Interner};
use super::COUNTERS_KEY;
use crate::decoding::while_decoding;
use crate::io::{guarded_message, OPTIONAL_TELEMETRY_COLUMNS, TELEMETRY_COLUMNS, TELEMETRY_SCHEMA_KEY};

/// What the file's footer says, before any row is read.
pub(crate) struct ParquetSource {
    path: PathBuf,
    file: File,
    file_len: u64,
    metadata: Arc<FileMetadata>,
    /// Arrow field per telemetry column the file has, in [`TELEMETRY_COLUMNS`] order (the
    /// optional columns come last, so the others keep their index).
    fields: Vec<ArrowField>,
    next_group: usize,
    next_row: u64,
    /// The file's `ecn_tuner.counters` value.
    pub(crate) counters_key: Option<String>,
}

fn unreadable(message: String) -> ProblemKind {
    ProblemKind::Unreadable(format!("not a readable Parquet file: {message}"))
}

/// The key under which Arrow writers embed their schema in a Parquet footer.
const ARROW_SCHEMA_KEY: &str = "ARROW:schema";

/// The file's columns as Arrow fields. The embedded Arrow schema comes first (it keeps
/// dictionary and large string types), but converting it converts every column, and polars
/// panics on some Arrow types an extra column may have (pyarrow's `list_view`): the Parquet
/// types alone then serve, as for a file written without an Arrow schema.
fn schema_of(path: &Path, metadata: &FileMetadata) -> PolarsResult<ArrowSchema> {
    match guarded_message(|| while_decoding(path, || infer_schema(metadata))) {
        Ok(schema) => Ok(schema),
        Err(arrow) => {
            let mut plain = metadata.clone();
            if let Some(kv) = plain.key_value_metadata.as_mut() {
                kv.retain(|kv| kv.key != ARROW_SCHEMA_KEY);
            }
            let schema = infer_schema(&plain).map_err(|_| polars_err!(ComputeError: "{arrow}"))?;
            // What only the Arrow schema said is lost with it: a column pyarrow wrote as a
            // duration or a timestamp reads as the plain integers stored.
            tracing::warn!(
                file = %path.display(),
                "its Arrow schema cannot be read ({arrow}; a column of a type this build does not know): the \
                 columns are read by their Parquet types alone, so a telemetry column stored as an Arrow \
                 duration or timestamp would read as its raw integers"
            );
            Ok(schema)
        }
    }
}

/// What a column may hold.
#[derive(Clone, Copy)]
enum Expect {
    Int,
    Float,
    Str,
}

fn expect(column: &str) -> Expect {
    match column {
        "switch" | "port" => Expect::Str,
        "queue_bytes_avg" | "pmax" => Expect::Float,
        _ => Expect::Int,
    }
}

fn allowed(e: Expect, dt: &DataType) -> bool {
    match e {
        Expect::Int => dt.is_integer(),
        Expect::Float => dt.is_float() || dt.is_integer(),
        Expect::Str => matches!(dt, DataType::String),
    }
}

/// Arrow types that polars converts without panicking and that some column may hold.
fn plain_arrow_type(dt: &ArrowDataType) -> bool {
    use ArrowDataType as A;
    matches!(
        dt,
        A::Int8
            | A::Int16
            | A::Int32
            | A::Int64
            | A::UInt8
            | A::UInt16
            | A::UInt32
            | A::UInt64
            | A::Float32
            | A::Float64
            | A::Utf8
            | A::LargeUtf8
            | A::Utf8View
            | A::Boolean
    )
}

/// A string column as a plain one. pandas' `category`, polars' `Categorical` and `Enum` and
/// pyarrow's `dictionary` columns are stored as ordinary strings whose embedded Arrow schema
/// says "dictionary": read them as the strings they are.
fn plain_strings(e: Expect, field: &ArrowField) -> ArrowField {
    match (e, field.dtype()) {
        (Expect::Str, ArrowDataType::Dictionary(_, values, _))
            if matches!(**values, ArrowDataType::Utf8 | ArrowDataType::LargeUtf8 | ArrowDataType::Utf8View) =>
        {
            ArrowField::new(field.name.clone(), ArrowDataType::Utf8View, field.is_nullable)
        }
        _ => field.clone(),
    }
}

fn expected_name(e: Expect) -> &'static str {
    match e {
        Expect::Int => "an integer type",
        Expect::Float => "a float type",
        Expect::Str => "a string",
    }
}

impl ParquetSource {
    /// Opens the file and checks its footer: readable, schema version, every column present
    /// with an allowed type. All column problems are reported together.
    pub(crate) fn open(path: &Path, problems: &mut Collector) -> Option<Self> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) => {
                problems.push(None, None, ProblemKind::Unreadable(format!("cannot open: {e}")), false);
                return None;
            }
        };
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if file_len == 0 {
            problems.push(None, None, ProblemKind::Empty, false);
            return None;
        }
        let read = guarded_message(|| {
            while_decoding(path, || {
                let metadata = polars::io::parquet::read::ParquetReader::new(&mut file).get_metadata()?.clone();
                let schema = schema_of(path, &metadata)?;
                Ok((metadata, schema))
            })
        });
        let (metadata, schema) = match read {
            Ok(v) => v,
            Err(m) => {
                problems.push(None, None, unreadable(m), false);
                return None;
            }
        };
        let kv = |key: &str| {
            metadata.key_value_metadata.iter().flatten().find(|kv| kv.key == key).and_then(|kv| kv.value.clone())
        };
        if let Some(found) = kv(TELEMETRY_SCHEMA_KEY) {
            if crate::io::schema_major(&found) != crate::io::schema_major(crate::TELEMETRY_SCHEMA_VERSION) {
                problems.push(None, None, ProblemKind::SchemaVersion { found }, false);
                return None;
            }
            if crate::io::newer_minor(&found, crate::TELEMETRY_SCHEMA_VERSION) {
                // Compatible by the versioning rule, but what the newer minor version added is
                // not read, and a file rewritten from it (`validate --repair --out`) loses it.
                tracing::warn!(
                    file = %path.display(),
                    version = %found,
                    reads = crate::TELEMETRY_SCHEMA_VERSION,
                    "telemetry written in a newer minor schema version: columns this build does not know are \
                     ignored, and a repaired copy leaves them out"
                );
            }
        }
        // Before the types: pandas writes the columns of an empty frame as Arrow `null`.
        if metadata.num_rows == 0 {
            problems.push(None, None, ProblemKind::Empty, false);
            return None;
        }
        let mut fields = Vec::with_capacity(TELEMETRY_COLUMNS.len());
        for column in TELEMETRY_COLUMNS {
            let Some(field) = schema.get(column) else {
                if !OPTIONAL_TELEMETRY_COLUMNS.contains(&column) {
                    problems.push(None, Some(column), ProblemKind::MissingColumn, false);
                }
                continue;
            };
            let e = expect(column);
            let field = &plain_strings(e, field);
            // polars panics converting Arrow types it lacks (float16, decimal, ...), and the
            // file is untrusted: only plain integers, floats and strings go on to polars.
            if !plain_arrow_type(field.dtype()) {
                let found = format!("{:?}", field.dtype()).to_lowercase();
                problems.push(None, Some(column), ProblemKind::WrongType { found, expected: expected_name(e) }, false);
                continue;
            }
            let dt = DataType::from_arrow_field(field);
            if !allowed(e, &dt) {
                let mut found = dt.to_string();
                if dt.is_float() {
                    // Two writers' habits, whichever applies: the footer cannot tell.
                    found.push_str(
                        " (pandas writes an integer column with missing values as float, DuckDB a SUM of integers \
                         as double)",
                    );
                }
                problems.push(None, Some(column), ProblemKind::WrongType { found, expected: expected_name(e) }, false);
                continue;
            }
            fields.push(field.clone());
        }
        if problems.failed() {
            return None;
        }
        let counters_key = kv(COUNTERS_KEY);
        let path = path.to_path_buf();
        Some(ParquetSource { path, file, file_len, metadata, fields, next_group: 0, next_row: 1, counters_key })
    }

    /// Decodes the next row group into `batch`; `false` at the end of the file or after a
    /// problem that stops reading (recorded in `problems`).
    pub(crate) fn next_batch(&mut self, batch: &mut Batch, interner: &mut Interner, problems: &mut Collector) -> bool {
        let Some(group) = self.metadata.row_groups.get(self.next_group) else {
            return false;
        };
        let rows = group.num_rows();
        let first_row = self.next_row;
        let where_ = format!("row group {} (rows {}-{})", self.next_group, first_row, first_row + rows as u64 - 1);
        self.next_group += 1;
        self.next_row += rows as u64;
        let columns = match self.read_group(self.next_group - 1) {
            Ok(c) => c,
            Err(m) => {
                problems.push(None, None, unreadable(format!("{where_}: {m}")), false);
                return false;
            }
        };
        if let Some(c) = columns.iter().find(|c| c.len() != rows) {
            let m = format!("{where_}: column `{}` has {} values", c.name(), c.len());
            problems.push(None, None, unreadable(m), false);
            return false;
        }
        batch.reset(first_row, rows);
        if let Err(m) = guarded_message(|| fill(&columns, batch, interner, problems)) {
            problems.push(None, None, unreadable(format!("{where_}: {m}")), false);
            return false;
        }
        true
    }

    fn read_group(&mut self, index: usize) -> Result<Vec<Series>, String> {
        let group = &self.metadata.row_groups[index];
        let mut out = Vec::with_capacity(self.fields.len());
        for field in &self.fields {
            let chunks: Vec<_> = group
                .columns_under_root_iter(field.name.as_str())
                .ok_or_else(|| format!("column `{}` is missing from the row group", field.name))?
                .collect();
            let mut parts = Vec::with_capacity(chunks.len());
            for meta in chunks {
                let range = meta.byte_range();
                // A corrupt footer can claim any range: check it before allocating for it.
                if range.start > range.end || range.end > self.file_len {
                    return Err(format!("column `{}` points outside the file", field.name));
                }
                let mut bytes = vec![0u8; (range.end - range.start) as usize];
                self.file
                    .seek(SeekFrom::Start(range.start))
                    .and_then(|_| self.file.read_exact(&mut bytes))
                    .map_err(|e| format!("cannot read column `{}`: {e}", field.name))?;
                parts.push((meta, bytes.into()));
            }
            let field = field.clone();
            let series = guarded_message(|| {
                while_decoding(&self.path, || {
                    let (arrays, _) = to_deserializer(parts, field.clone(), None)?;
                    Series::try_from((&field, arrays))
                })
            })?;
            out.push(series);
        }
        Ok(out)
    }
}

/// Calls `f(row, value)` for every value of an integer column, after reporting nulls and
/// negative values (which leave the row not ok).
fn each_int(
    s: &Series,
    column: &'static str,
    batch: &mut Batch,
    problems: &mut Collector,
    mut f: impl FnMut(&mut Batch, &mut Collector, usize, u64),
) -> PolarsResult<()> {
    macro_rules! unsigned {
        ($ca:expr) => {{
            let mut i = 0usize;
            for arr in $ca.downcast_iter() {
                if arr.validity().is_none_or(|v| v.unset_bits() == 0) {
                    for &v in arr.values().iter() {
                        f(batch, problems, i, v as u64);
                        i += 1;
                    }
                } else {
                    for v in arr.iter() {
                        match v {
                            Some(&v) => f(batch, problems, i, v as u64),
                            None => batch.reject(i, column, ProblemKind::Null, problems),
                        }
                        i += 1;
                    }
                }
            }
        }};
    }
    macro_rules! signed {
        ($ca:expr) => {{
            let mut i = 0usize;
            for arr in $ca.downcast_iter() {
                for v in arr.iter() {
                    match v {
                        Some(&v) if v >= 0 => f(batch, problems, i, v as u64),
                        Some(&v) => batch.reject(i, column, ProblemKind::Negative(v.to_string()), problems),
                        None => batch.reject(i, column, ProblemKind::Null, problems),
                    }
                    i += 1;
                }
            }
        }};
    }
    match s.dtype() {
        DataType::UInt64 => unsigned!(s.u64()?),
        DataType::UInt32 => unsigned!(s.u32()?),
        DataType::UInt16 => unsigned!(s.u16()?),
        DataType::UInt8 => unsigned!(s.u8()?),
        DataType::Int64 => signed!(s.i64()?),
        DataType::Int32 => signed!(s.i32()?),
        DataType::Int16 => signed!(s.i16()?),
        DataType::Int8 => signed!(s.i8()?),
        other => polars_bail!(SchemaMismatch: "column `{column}` has type {other}"),
    }
    Ok(())
}

/// As [`each_int`] for a float column (integers accepted), reporting NaN, infinities and
/// negative values.
fn each_float(
    s: &Series,
    column: &'static str,
    batch: &mut Batch,
    problems: &mut Collector,
    mut f: impl FnMut(&mut Batch, &mut Collector, usize, f64),
) -> PolarsResult<()> {
    let cast;
    let s = if s.dtype() == &DataType::Float64 {
        s
    } else {
        cast = s.cast(&DataType::Float64)?;
        &cast
    };
    let mut i = 0usize;
    for arr in s.f64()?.downcast_iter() {
        for v in arr.iter() {
            match v {
                Some(&v) => match check_float(v) {
                    None => f(batch, problems, i, v),
                    Some(kind) => batch.reject(i, column, kind, problems),
                },
                None => batch.reject(i, column, ProblemKind::Null, problems),
            }
            i += 1;
        }
    }
    Ok(())
}

/// Fills the batch from one row group's columns (in [`TELEMETRY_COLUMNS`] order, the optional
/// `span_ns` present or not).
fn fill(columns: &[Series], batch: &mut Batch, interner: &mut Interner, problems: &mut Collector) -> PolarsResult<()> {
    macro_rules! int_field {
        ($idx:expr, $field:ident) => {
            each_int(&columns[$idx], TELEMETRY_COLUMNS[$idx], batch, problems, |b, _, i, v| b.samples[i].$field = v)?
        };
    }
    int_field!(0, ts_ns);
    each_int(&columns[3], "queue", batch, problems, |b, p, i, v| match queue_index(v) {
        Ok(q) => b.queues[i] = q,
        Err(kind) => b.reject(i, "queue", kind, p),
    })?;
    int_field!(4, link_bps);
    int_field!(5, queue_bytes);
    each_float(&columns[6], "queue_bytes_avg", batch, problems, |b, _, i, v| b.samples[i].queue_bytes_avg = v)?;
    int_field!(7, queue_bytes_max);
    int_field!(8, tx_bytes);
    int_field!(9, tx_pkts);
    int_field!(10, ecn_marked_pkts);
    int_field!(11, pfc_pause_rx);
    int_field!(12, pfc_pause_tx);
    int_field!(13, paused_ns);
    int_field!(14, drops);
    int_field!(15, kmin_bytes);
    int_field!(16, kmax_bytes);
    each_float(&columns[17], "pmax", batch, problems, |b, _, i, v| b.samples[i].pmax = v)?;
    if columns.len() > 18 {
        int_field!(18, span_ns);
    }

    let switches = columns[1].str()?;
    let ports = columns[2].str()?;
    for (i, (switch, port)) in switches.iter().zip(ports.iter()).enumerate() {
        let switch = queue_name(switch);
        let port = queue_name(port);
        match (switch, port) {
            (Some(switch), Some(port)) => {
                if batch.ok[i] {
                    batch.ids[i] = interner.id(switch, port, batch.queues[i]).0;
                }
            }
            (None, _) => batch.reject(i, "switch", ProblemKind::Null, problems),
            (_, None) => batch.reject(i, "port", ProblemKind::Null, problems),
        }
    }
    Ok(())
}
