//! CSV source: RFC 4180 records (quoted fields may hold commas, quotes and newlines), read a
//! chunk of rows at a time so that memory stays bounded. Cells are parsed strictly, each
//! failure a problem naming its row and column.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::problem::{Collector, ProblemKind};
use super::rows::{check_float, queue_index, queue_name, Batch, Interner};
use crate::io::{OPTIONAL_TELEMETRY_COLUMNS, TELEMETRY_COLUMNS};

/// [`CsvSource`]'s field index of a column the header lacks (an optional one).
const ABSENT: usize = usize::MAX;

/// Rows per batch.
const CHUNK_ROWS: usize = 65_536;

/// The longest record read, in bytes. A telemetry row is about 200 bytes; only an unclosed
/// quote makes a record this long, and it would otherwise hold the rest of the file in memory.
const MAX_RECORD_BYTES: usize = 1 << 20;

/// The UTF-8 byte-order mark.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Whether a quoted field is open, read as [`split_record`] reads fields: a quote opens one only
/// at the start of a field (elsewhere it is an ordinary byte), `""` inside is a quote, and a
/// lone quote closes it.
#[derive(Debug, Clone, Copy)]
struct QuoteScan {
    in_quotes: bool,
    at_field_start: bool,
}

impl QuoteScan {
    fn new() -> Self {
        QuoteScan { in_quotes: false, at_field_start: true }
    }

    /// Scans the next bytes of a record: a whole line, so that a `""` never straddles a call.
    fn scan(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            match (self.in_quotes, bytes[i]) {
                (true, b'"') if bytes.get(i + 1) == Some(&b'"') => i += 1,
                (true, b'"') => self.in_quotes = false,
                (false, b',') => {
                    self.at_field_start = true;
                    i += 1;
                    continue;
                }
                (false, b'"') if self.at_field_start => self.in_quotes = true,
                _ => {}
            }
            self.at_field_start = false;
            i += 1;
        }
    }
}

pub(crate) struct CsvSource {
    reader: BufReader<File>,
    /// Position of each telemetry column in a record ([`ABSENT`] for an optional column the
    /// header lacks).
    index: [usize; 19],
    header_fields: usize,
    next_row: u64,
    /// Physical lines read so far, blank ones and those inside quoted fields included.
    lines_read: u64,
    /// The line the record in `line` starts on.
    record_line: u64,
    /// Whether that record ended at the end of the file with a quoted field still open.
    unclosed_quote: bool,
    line: Vec<u8>,
    /// The current record's unquoted field bytes, back to back, and where each field ends.
    scratch: Vec<u8>,
    ends: Vec<usize>,
    done: bool,
}

/// Splits one record (without its line terminator) into fields, undoing quoting.
fn split_record(line: &[u8], scratch: &mut Vec<u8>, ends: &mut Vec<usize>) {
    scratch.clear();
    ends.clear();
    let mut i = 0;
    loop {
        if line.get(i) == Some(&b'"') {
            i += 1;
            while i < line.len() {
                if line[i] == b'"' {
                    if line.get(i + 1) == Some(&b'"') {
                        scratch.push(b'"');
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                scratch.push(line[i]);
                i += 1;
            }
        }
        while i < line.len() && line[i] != b',' {
            scratch.push(line[i]);
            i += 1;
        }
        ends.push(scratch.len());
        if i >= line.len() {
            break;
        }
        i += 1;
    }
}

impl CsvSource {
    /// Opens the file and reads its header; missing columns are all reported.
    pub(crate) fn open(path: &Path, problems: &mut Collector) -> Option<Self> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) => {
                problems.push(None, None, ProblemKind::Unreadable(format!("cannot open: {e}")), false);
                return None;
            }
        };
        let mut src = CsvSource {
            reader: BufReader::with_capacity(1 << 20, file),
            index: [ABSENT; 19],
            header_fields: 0,
            next_row: 1,
            lines_read: 0,
            record_line: 0,
            unclosed_quote: false,
            line: Vec::new(),
            scratch: Vec::new(),
            ends: Vec::new(),
            done: false,
        };
        // Blank lines before the header (a writer of an empty frame may leave one, or only a
        // byte-order mark) are skipped: a file of nothing else is empty, not one missing every
        // column.
        let header = loop {
            match src.read_record() {
                Ok(true) if src.line_is_blank() => continue,
                other => break other,
            }
        };
        match header {
            Ok(true) => {}
            Ok(false) => {
                problems.push(None, None, ProblemKind::Empty, false);
                return None;
            }
            Err(e) => {
                problems.push(None, None, ProblemKind::Unreadable(format!("cannot read: {e}")), false);
                return None;
            }
        }
        let names: Vec<String> =
            (0..src.ends.len()).map(|f| String::from_utf8_lossy(src.field(f)).into_owned()).collect();
        src.header_fields = names.len();
        for (c, column) in TELEMETRY_COLUMNS.iter().enumerate() {
            let mut at = names.iter().enumerate().filter(|(_, n)| n.trim() == *column);
            match (at.next(), at.next()) {
                (Some((p, _)), None) => src.index[c] = p,
                (None, _) if OPTIONAL_TELEMETRY_COLUMNS.contains(column) => {}
                (None, _) => problems.push(None, Some(column), ProblemKind::MissingColumn, false),
                // Which copy holds the data is unknowable, so neither is used.
                (Some((p, _)), Some((q, _))) => {
                    let m = format!("named twice in the header, as fields {} and {}", p + 1, q + 1);
                    problems.push(None, Some(column), ProblemKind::Unreadable(m), false)
                }
            }
        }
        // No telemetry header has these, and the list of missing columns alone would not say.
        if let Some(why) = foreign_layout(&src.line) {
            problems.push_first(ProblemKind::Unreadable(why));
        }
        if problems.failed() {
            return None;
        }
        Some(src)
    }

    fn field(&self, f: usize) -> &[u8] {
        let start = if f == 0 { 0 } else { self.ends[f - 1] };
        &self.scratch[start..self.ends[f]]
    }

    /// Reads the next record into `scratch`/`ends`; `false` at the end of the file. A quoted
    /// field may span lines, so lines are joined while a quote is open, up to
    /// [`MAX_RECORD_BYTES`] (an `InvalidData` error beyond).
    fn read_record(&mut self) -> std::io::Result<bool> {
        self.line.clear();
        self.record_line = self.lines_read + 1;
        let mut quotes = QuoteScan::new();
        loop {
            let start = self.line.len();
            let room = (MAX_RECORD_BYTES + 1 - start) as u64;
            let n = (&mut self.reader).take(room).read_until(b'\n', &mut self.line)?;
            if n == 0 && self.line.is_empty() {
                return Ok(false);
            }
            // A spreadsheet may save a byte-order mark before the header: it is no part of the
            // first field, which may be quoted.
            if self.lines_read == 0 && start == 0 && self.line.starts_with(UTF8_BOM) {
                self.line.drain(..UTF8_BOM.len());
            }
            if self.line.len() > MAX_RECORD_BYTES {
                // Lines that end in a carriage return alone read as one long line.
                if let Some(why) = foreign_layout(&self.line).filter(|_| self.line.contains(&b'\r')) {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
                }
                let why = format!(
                    "the record starting on line {} is longer than {} MiB: an unclosed quote?",
                    self.record_line,
                    MAX_RECORD_BYTES >> 20
                );
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
            }
            if n > 0 {
                self.lines_read += 1;
            }
            quotes.scan(&self.line[start..]);
            if !quotes.in_quotes || n == 0 {
                self.unclosed_quote = quotes.in_quotes;
                break;
            }
        }
        while matches!(self.line.last(), Some(b'\n' | b'\r')) {
            self.line.pop();
        }
        split_record(&self.line, &mut self.scratch, &mut self.ends);
        Ok(true)
    }

    /// Whether the record just read is blank: often the last line, sometimes of spaces, and a
    /// writer of an empty frame may leave one before the header. A blank line is not a row.
    fn line_is_blank(&self) -> bool {
        self.line.iter().all(u8::is_ascii_whitespace)
    }

    /// Reads up to [`CHUNK_ROWS`] rows into `batch`; `false` when there was nothing left.
    pub(crate) fn next_batch(&mut self, batch: &mut Batch, interner: &mut Interner, problems: &mut Collector) -> bool {
        if self.done {
            return false;
        }
        batch.reset(self.next_row, 0);
        while batch.len() < CHUNK_ROWS {
            match self.read_record() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    problems.push(Some(self.record_line - 1), None, ProblemKind::Unreadable(e.to_string()), false);
                    self.done = true;
                    return false;
                }
                Err(e) => {
                    let m = format!("cannot read after line {}: {e}", self.lines_read);
                    problems.push(None, None, ProblemKind::Unreadable(m), false);
                    self.done = true;
                    return false;
                }
            }
            if self.line_is_blank() {
                continue;
            }
            // Data row N is line N + 1, as documented, even after blank lines or records that
            // span lines.
            let i = batch.push_row(self.record_line - 1);
            self.next_row += 1;
            self.parse_row(batch, i, interner, problems);
        }
        batch.len() > 0
    }

    fn parse_row(&self, batch: &mut Batch, i: usize, interner: &mut Interner, problems: &mut Collector) {
        if self.ends.len() != self.header_fields {
            let mut m = format!("{} fields, but the header has {}", self.ends.len(), self.header_fields);
            if self.unclosed_quote {
                m.push_str(&format!(
                    ": a quote opened in the record starting on line {} is never closed, so it runs to the end of \
                     the file",
                    self.record_line
                ));
            }
            batch.ok[i] = false;
            problems.push(Some(batch.row(i)), None, ProblemKind::Unreadable(m), false);
            return;
        }
        let cell = |c: usize| self.field(self.index[c]);
        let mut ints = [0u64; 19];
        let mut floats = [0f64; 19];
        for (c, column) in TELEMETRY_COLUMNS.iter().enumerate() {
            if self.index[c] == ABSENT {
                continue;
            }
            let parsed = match *column {
                "switch" | "port" => Ok(()),
                "queue_bytes_avg" | "pmax" => parse_float(cell(c)).map(|v| floats[c] = v),
                _ => parse_int(cell(c)).map(|v| ints[c] = v),
            };
            if let Err(kind) = parsed {
                batch.reject(i, column, kind, problems);
            }
        }
        let queue = match queue_index(ints[3]) {
            Ok(q) => q,
            Err(kind) => {
                batch.reject(i, "queue", kind, problems);
                0
            }
        };
        let mut names = ["", ""];
        for (n, c) in [1usize, 2].into_iter().enumerate() {
            match std::str::from_utf8(cell(c)).map(|s| queue_name(Some(s))) {
                Ok(None) => batch.reject(i, TELEMETRY_COLUMNS[c], ProblemKind::Null, problems),
                Ok(Some(s)) => names[n] = s,
                Err(_) => {
                    let kind = ProblemKind::WrongType { found: "invalid UTF-8".into(), expected: "a string" };
                    batch.reject(i, TELEMETRY_COLUMNS[c], kind, problems);
                }
            }
        }
        if !batch.ok[i] {
            return;
        }
        let s = &mut batch.samples[i];
        s.ts_ns = ints[0];
        s.link_bps = ints[4];
        s.queue_bytes = ints[5];
        s.queue_bytes_avg = floats[6];
        s.queue_bytes_max = ints[7];
        s.tx_bytes = ints[8];
        s.tx_pkts = ints[9];
        s.ecn_marked_pkts = ints[10];
        s.pfc_pause_rx = ints[11];
        s.pfc_pause_tx = ints[12];
        s.paused_ns = ints[13];
        s.drops = ints[14];
        s.kmin_bytes = ints[15];
        s.kmax_bytes = ints[16];
        s.pmax = floats[17];
        s.span_ns = ints[18];
        batch.queues[i] = queue;
        batch.ids[i] = interner.id(names[0], names[1], queue).0;
    }
}

/// Why the header shows a text file of another layout than comma-separated UTF-8 lines.
fn foreign_layout(header: &[u8]) -> Option<String> {
    if header.contains(&0) {
        Some("the file is not UTF-8 text (it has NUL bytes: UTF-16?); save it as UTF-8".into())
    } else if header.contains(&b'\r') {
        Some("lines end in a carriage return alone (old Mac line endings); save it with \\n or \\r\\n".into())
    } else if !header.contains(&b',') && (header.contains(&b';') || header.contains(&b'\t')) {
        Some("the header has no comma but has `;` or tabs: fields must be separated by commas".into())
    } else {
        None
    }
}

/// A number as the cell wrote it, for a message (through an f64 it would round), cut at 40
/// characters.
fn as_written(t: &str) -> String {
    if t.chars().count() > 40 {
        format!("{}...", t.chars().take(40).collect::<String>())
    } else {
        t.to_string()
    }
}

fn text(b: &[u8]) -> String {
    format!("text `{}`", as_written(&String::from_utf8_lossy(b)))
}

/// An unsigned integer cell. A float-looking cell is a wrong type (NaN and infinities are
/// reported as such), a negative integer is a negative value.
fn parse_int(b: &[u8]) -> Result<u64, ProblemKind> {
    let t = std::str::from_utf8(b).map(str::trim).unwrap_or("\u{fffd}");
    if t.is_empty() {
        return Err(ProblemKind::Null);
    }
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    // `-0` is 0, not "negative value 0".
    match t.parse::<i64>() {
        Ok(0) => return Ok(0),
        Ok(v) => return Err(ProblemKind::Negative(v.to_string())),
        Err(_) => {}
    }
    if t.bytes().all(|c| c.is_ascii_digit()) {
        return Err(ProblemKind::OutOfRange(format!("{t} does not fit in 64 bits")));
    }
    match t.parse::<f64>() {
        Ok(v) if !v.is_finite() => Err(ProblemKind::NotFinite(v)),
        Ok(v) if v < 0.0 => Err(ProblemKind::Negative(as_written(t))),
        // pandas writes every value of an integer column with a missing value as `N.0`.
        Ok(v) if v.fract() == 0.0 && t.contains('.') => Err(ProblemKind::WrongType {
            found: format!("{} (an integer column with missing values becomes float)", text(b)),
            expected: "an integer",
        }),
        _ => Err(ProblemKind::WrongType { found: text(b), expected: "an integer" }),
    }
}

/// A float cell: finite, not negative.
fn parse_float(b: &[u8]) -> Result<f64, ProblemKind> {
    let t = std::str::from_utf8(b).map(str::trim).unwrap_or("\u{fffd}");
    if t.is_empty() {
        return Err(ProblemKind::Null);
    }
    let v = t.parse::<f64>().map_err(|_| ProblemKind::WrongType { found: text(b), expected: "a number" })?;
    match check_float(v) {
        None => Ok(v),
        Some(ProblemKind::Negative(_)) => Err(ProblemKind::Negative(as_written(t))),
        Some(kind) => Err(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(line: &str) -> Vec<String> {
        let (mut scratch, mut ends) = (Vec::new(), Vec::new());
        split_record(line.as_bytes(), &mut scratch, &mut ends);
        let mut start = 0;
        ends.iter()
            .map(|&e| {
                let f = String::from_utf8(scratch[start..e].to_vec()).unwrap();
                start = e;
                f
            })
            .collect()
    }

    #[test]
    fn records_split_with_quotes() {
        assert_eq!(fields("a,b,,c"), ["a", "b", "", "c"]);
        assert_eq!(fields("\"eth,1 \"\"x\"\"\",2"), ["eth,1 \"x\"", "2"]);
        assert_eq!(fields(""), [""]);
    }

    /// A byte-order mark before a quoted header (a spreadsheet's CSV export) used to keep the
    /// quotes on the first name, which then read as a missing column.
    #[test]
    fn a_byte_order_mark_before_a_quoted_header_is_no_part_of_it() {
        let dir = std::env::temp_dir().join(format!("ecn-csv-bom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let header: Vec<String> = TELEMETRY_COLUMNS.iter().map(|c| format!("\"{c}\"")).collect();
        let row = |ts: u64| format!("{ts},leaf0,eth1,3,100000000000,0,0.0,0,1000,1,0,0,0,0,0,1000,2000,0.1,0");
        for (name, bom) in [("bom.csv", UTF8_BOM), ("plain.csv", &b""[..])] {
            let mut text = bom.to_vec();
            text.extend(format!("{}\n{}\n{}\n", header.join(","), row(100_000), row(200_000)).into_bytes());
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            let data =
                crate::telemetry::load_telemetry(&p, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(data.samples(), 2, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file of nothing but a byte-order mark, blank lines or spaces is empty; it used to read
    /// as a header missing all 18 columns. Blank lines before a header are skipped.
    #[test]
    fn a_file_of_blank_lines_is_empty() {
        let dir = std::env::temp_dir().join(format!("ecn-csv-blank-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [("bom.csv", &b"\xef\xbb\xbf"[..]), ("nl.csv", b"\n"), ("spaces.csv", b"   \r\n\n")] {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            let e = crate::telemetry::load_telemetry(&p, &Default::default()).unwrap_err();
            let tags: Vec<_> = e.problems.iter().map(|p| p.kind.tag()).collect();
            assert_eq!(tags, ["empty"], "{name}: {e}");
        }
        let row = "100000,leaf0,eth1,3,100000000000,0,0.0,0,1000,1,0,0,0,0,0,1000,2000,0.1,0";
        let p = dir.join("late-header.csv");
        std::fs::write(&p, format!("\n  \n{}\n{row}\n", TELEMETRY_COLUMNS.join(","))).unwrap();
        let data = crate::telemetry::load_telemetry(&p, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(data.samples(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A quote opened and never closed swallows the rest of a small file into one record: the
    /// field-count error says so, with the line the quote opened on.
    #[test]
    fn an_unclosed_quote_is_named_in_a_small_file() {
        let dir = std::env::temp_dir().join(format!("ecn-csv-quote-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let row =
            |ts: u64, port: &str| format!("{ts},leaf0,{port},3,100000000000,0,0.0,0,1000,1,0,0,0,0,0,1000,2000,0.1,0");
        let text = format!(
            "{}\n{}\n{}\n{}\n",
            TELEMETRY_COLUMNS.join(","),
            row(100_000, "eth1"),
            row(200_000, "\"eth1"),
            row(300_000, "eth1")
        );
        let p = dir.join("quote.csv");
        std::fs::write(&p, text).unwrap();
        let e = crate::telemetry::load_telemetry(&p, &Default::default()).unwrap_err().to_string();
        assert!(
            e.contains("row 2") && e.contains("a quote opened in the record starting on line 3 is never closed"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file of another text layout says which, rather than listing every column as missing
    /// or reading as having no rows; a last line of spaces is blank, not a short row.
    #[test]
    fn other_text_layouts_are_named() {
        let dir = tempfile_dir("layouts");
        let row = "100000,leaf0,eth1,3,100000000000,0,0.0,0,1000,1,0,0,0,0,0,1000,2000,0.1,0";
        let header = TELEMETRY_COLUMNS.join(",");
        let utf16: Vec<u8> = format!("{header}\n{row}\n").encode_utf16().flat_map(u16::to_le_bytes).collect();
        let cases: [(&str, Vec<u8>, &str); 5] = [
            ("cr.csv", format!("{header}\r{row}\r").into_bytes(), "carriage return alone"),
            // Longer than a record may be: read as one line, it must not pass for an unclosed quote.
            (
                "cr-big.csv",
                format!("{header}\r{}", format!("{row}\r").repeat(20_000)).into_bytes(),
                "carriage return alone",
            ),
            ("semicolons.csv", format!("{}\n", header.replace(',', ";")).into_bytes(), "separated by commas"),
            ("tabs.csv", format!("{}\n", header.replace(',', "\t")).into_bytes(), "separated by commas"),
            ("utf16.csv", utf16, "not UTF-8"),
        ];
        for (name, bytes, want) in cases {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            let e = crate::telemetry::load_telemetry(&p, &Default::default()).unwrap_err().to_string();
            assert!(e.lines().next().unwrap().contains(want), "{name}: {e}");
        }
        let p = dir.join("spaces-last.csv");
        std::fs::write(&p, format!("{header}\n{row}\n  \t\n")).unwrap();
        assert_eq!(crate::telemetry::load_telemetry(&p, &Default::default()).unwrap().rows, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ecn-csv-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn cells_parse_strictly() {
        assert!(
            matches!(parse_int(b"551124.0"), Err(ProblemKind::WrongType { found, .. }) if found.contains("missing values"))
        );
        assert_eq!(parse_int(b"-3.0"), Err(ProblemKind::Negative("-3.0".into())));
        // Past an i64, as written too (through an f64 it read -9223372036854776000).
        assert_eq!(parse_int(b"-9223372036854775809"), Err(ProblemKind::Negative("-9223372036854775809".into())));
        assert_eq!(parse_float(b" -1e3 "), Err(ProblemKind::Negative("-1e3".into())));
        assert_eq!(parse_int(b"42"), Ok(42));
        assert_eq!(parse_int(b"-3"), Err(ProblemKind::Negative("-3".into())));
        let min = i64::MIN.to_string();
        assert_eq!(parse_int(min.as_bytes()), Err(ProblemKind::Negative(min.clone())), "not rounded");
        assert_eq!(parse_int(b"-0"), Ok(0));
        assert_eq!(parse_int(b""), Err(ProblemKind::Null));
        assert!(matches!(parse_int(b"1.5"), Err(ProblemKind::WrongType { .. })));
        assert!(matches!(parse_int(b"abc"), Err(ProblemKind::WrongType { .. })));
        assert!(matches!(parse_int(b"nan"), Err(ProblemKind::NotFinite(_))));
        assert!(matches!(parse_int(b"99999999999999999999999"), Err(ProblemKind::OutOfRange(_))));
        assert_eq!(parse_float(b"0.25"), Ok(0.25));
        assert!(matches!(parse_float(b"NaN"), Err(ProblemKind::NotFinite(_))));
        assert!(matches!(parse_float(b"-1"), Err(ProblemKind::Negative(_))));
        assert!(matches!(parse_float(b"x"), Err(ProblemKind::WrongType { .. })));
    }
}
