//! The bad-telemetry-file suite: one deterministic clean recording and, written from it, every
//! corrupted variant the reader must catch (NaN, negative counter, wrapped counter, counter
//! reset, duplicates, shuffled rows, gap, missing column, wrong type, empty and truncated
//! files), each with what the reader must say about it and what repair must give.
//!
//! Public so that CLI-level tests (`validate`, `recommend`, `train --telemetry`) reuse the same
//! files.

use std::fs;
use std::path::{Path, PathBuf};

use ecn_datasets::io::{telemetry_frame, write_telemetry_csv, write_telemetry_parquet, write_telemetry_parquet_with};
use ecn_datasets::telemetry::{CounterMode, QueueKey, QueueSample, QueueSeries};
use ecn_datasets::TelemetrySample;
use polars::prelude::*;

/// Sample interval of the clean recording.
pub const INTERVAL_NS: u64 = 10_000;
/// Line rate of every port.
pub const LINK_BPS: u64 = 100_000_000_000;
/// Intervals in the clean recording.
pub const INTERVALS: u64 = 120;

/// The queues of the clean recording: 2 switches × 2 ports × 2 priorities.
pub fn queues() -> Vec<QueueKey> {
    let mut out = Vec::new();
    for sw in ["leaf0", "leaf1"] {
        for port in ["eth1", "eth2"] {
            for q in [3u8, 4] {
                out.push(QueueKey::new(sw, port, q));
            }
        }
    }
    out
}

/// A small deterministic generator (xorshift64*), so the fixtures need no RNG crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The clean recording: every queue once per interval, ordered by time and then queue (as the
/// simulator writes), with plausible per-interval deltas and settings inside the default
/// bounds.
pub fn clean_rows() -> Vec<TelemetrySample> {
    let mut rng = Rng(0x5eed_0005);
    let keys = queues();
    let max_bytes = LINK_BPS / 8 * INTERVAL_NS / 1_000_000_000;
    let mut rows = Vec::new();
    for t in 1..=INTERVALS {
        for (k, key) in keys.iter().enumerate() {
            let tx_bytes = rng.below(max_bytes);
            let tx_pkts = tx_bytes / 1_000;
            let queue_bytes = rng.below(400_000);
            rows.push(TelemetrySample {
                switch: key.switch.to_string(),
                port: key.port.to_string(),
                queue: key.queue,
                sample: QueueSample {
                    ts_ns: t * INTERVAL_NS,
                    link_bps: LINK_BPS,
                    queue_bytes,
                    queue_bytes_avg: queue_bytes as f64 * 0.75,
                    queue_bytes_max: queue_bytes + rng.below(10_000),
                    tx_bytes,
                    tx_pkts,
                    ecn_marked_pkts: rng.below(tx_pkts + 1),
                    pfc_pause_rx: rng.below(3),
                    pfc_pause_tx: rng.below(2),
                    paused_ns: rng.below(INTERVAL_NS / 2),
                    drops: 0,
                    kmin_bytes: 20_000 * (1 + (t / 40) + k as u64 % 2),
                    kmax_bytes: 200_000,
                    pmax: 0.2,
                    span_ns: 0,
                },
            });
        }
    }
    rows
}

/// What the reader must report without repair.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedProblem {
    /// [`ecn_datasets::telemetry::ProblemKind::tag`] of the (first) problem.
    pub tag: &'static str,
    /// 1-based data row it names, where one applies.
    pub row: Option<u64>,
    /// Column it names, where one applies.
    pub column: Option<&'static str>,
}

/// One fixture file.
#[derive(Debug, Clone)]
pub struct TelemetryFixture {
    /// Short name (also the file stem).
    pub name: &'static str,
    /// The file.
    pub path: PathBuf,
    /// Width of its counters, bits (the wrapped cumulative file has 32-bit counters).
    pub counter_bits: u32,
    /// Without repair: `None` if it must load as the clean recording, else the problem.
    pub problem: Option<ExpectedProblem>,
    /// With repair: `None` if it must still fail; else the `(queue, ts_ns)` samples of the
    /// clean recording that are missing from the result, each followed by a continuity break.
    pub repaired: Option<Vec<(QueueKey, u64)>>,
}

fn problem(tag: &'static str, row: Option<u64>, column: Option<&'static str>) -> Option<ExpectedProblem> {
    Some(ExpectedProblem { tag, row, column })
}

fn key_of(r: &TelemetrySample) -> QueueKey {
    QueueKey::new(&r.switch, &r.port, r.queue)
}

/// Writes `rows` with the key `ecn_tuner.counters` set to `counters` as given, `delta`
/// included (which ecn-tuner's own writer leaves out, as the schema's default).
pub fn write_with_counters_key(path: &Path, rows: &[TelemetrySample], counters: &str) {
    let df = telemetry_frame(rows).expect("frame");
    let kv = vec![(ecn_datasets::telemetry::COUNTERS_KEY.to_string(), counters.to_string())];
    write_frame(path, df, Some(kv));
}

fn write_frame(path: &Path, mut df: DataFrame, kv: Option<Vec<(String, String)>>) {
    let mut f = fs::File::create(path).expect("create fixture");
    ParquetWriter::new(&mut f)
        .with_key_value_metadata(kv.map(KeyValueMetadata::from_static))
        .finish(&mut df)
        .expect("write fixture");
}

/// Counter columns as cumulative values: each queue starts at `start` and a baseline row one
/// interval before the first sample carries that start, so the converted deltas equal
/// `rows`' deltas exactly.
fn cumulative(rows: &[TelemetrySample], start: u64, modulo: Option<u64>) -> Vec<TelemetrySample> {
    let keys = queues();
    let mut totals = vec![[start; 7]; keys.len()];
    let mut out = Vec::with_capacity(rows.len() + keys.len());
    for (k, key) in keys.iter().enumerate() {
        let mut base = rows[k].clone();
        assert_eq!(key_of(&base), *key);
        base.sample.ts_ns -= INTERVAL_NS;
        set_counters(&mut base, [start; 7]);
        out.push(base);
    }
    for r in rows {
        let k = keys.iter().position(|q| *q == key_of(r)).expect("known queue");
        let d = counters(r);
        for i in 0..7 {
            totals[k][i] = match modulo {
                Some(m) => (totals[k][i] + d[i]) % m,
                None => totals[k][i] + d[i],
            };
        }
        let mut c = r.clone();
        set_counters(&mut c, totals[k]);
        out.push(c);
    }
    out
}

fn counters(r: &TelemetrySample) -> [u64; 7] {
    let s = &r.sample;
    [s.tx_bytes, s.tx_pkts, s.ecn_marked_pkts, s.pfc_pause_rx, s.pfc_pause_tx, s.paused_ns, s.drops]
}

fn set_counters(r: &mut TelemetrySample, c: [u64; 7]) {
    let s = &mut r.sample;
    [s.tx_bytes, s.tx_pkts, s.ecn_marked_pkts, s.pfc_pause_rx, s.pfc_pause_tx, s.paused_ns, s.drops] = c;
}

/// Writes the clean recording and every variant into `dir` and describes them.
pub fn write_fixtures(dir: &Path) -> Vec<TelemetryFixture> {
    let clean = clean_rows();
    let n_queues = queues().len();
    let mut out = Vec::new();
    let mut add = |name: &'static str,
                   ext: &str,
                   counter_bits: u32,
                   problem: Option<ExpectedProblem>,
                   repaired: Option<Vec<(QueueKey, u64)>>| {
        let path = dir.join(format!("{name}.{ext}"));
        out.push(TelemetryFixture { name, path: path.clone(), counter_bits, problem, repaired });
        path
    };

    let p = add("clean", "parquet", 64, None, Some(vec![]));
    write_telemetry_parquet(&p, &clean).expect("clean");
    let p = add("clean_csv", "csv", 64, None, Some(vec![]));
    write_telemetry_csv(&p, &clean).expect("clean csv");

    // NaN in a float column: not repairable (the true value is unknown).
    let row = 37;
    let p = add("nan", "parquet", 64, problem("not_finite", Some(row + 1), Some("queue_bytes_avg")), None);
    let mut rows = clean.clone();
    rows[row as usize].sample.queue_bytes_avg = f64::NAN;
    write_telemetry_parquet(&p, &rows).expect("nan");

    // pandas writes int64: a negative counter is a value problem, not a type error.
    let row = 50;
    let p = add("negative", "parquet", 64, problem("negative", Some(row + 1), Some("tx_bytes")), None);
    let mut df = telemetry_frame(&clean).expect("frame");
    for name in ecn_datasets::io::TELEMETRY_COLUMNS {
        if df.column(name).expect("column").dtype().is_unsigned_integer() {
            let c = df.column(name).expect("column").cast(&DataType::Int64).expect("cast");
            df.with_column(c).expect("replace");
        }
    }
    let mut tx: Vec<i64> = clean.iter().map(|r| r.sample.tx_bytes as i64).collect();
    tx[row as usize] = -1_500;
    df.with_column(Column::new("tx_bytes".into(), tx)).expect("tx");
    write_frame(&p, df, None);

    // A 32-bit counter that wrapped before a naive conversion to deltas: the delta is about
    // 2^32, far beyond line rate. Repair drops the sample.
    let row = 8 * 20 + 5;
    let r = &clean[row];
    let p = add(
        "wrap",
        "parquet",
        64,
        problem("implausible_delta", Some(row as u64 + 1), Some("tx_bytes")),
        Some(vec![(key_of(r), r.sample.ts_ns)]),
    );
    let mut rows = clean.clone();
    rows[row].sample.tx_bytes = (1u64 << 32) - 3_000 + rows[row].sample.tx_bytes % 1_000;
    write_telemetry_parquet(&p, &rows).expect("wrap");

    // More packets marked than sent, and a mean depth above the maximum: columns of one
    // interval that contradict each other. Repair drops the sample.
    let row = 8 * 30 + 3;
    let r = &clean[row];
    let p = add(
        "marks_above_sent",
        "parquet",
        64,
        problem("inconsistent", Some(row as u64 + 1), Some("ecn_marked_pkts")),
        Some(vec![(key_of(r), r.sample.ts_ns)]),
    );
    let mut rows = clean.clone();
    rows[row].sample.ecn_marked_pkts = rows[row].sample.tx_pkts + 1;
    write_telemetry_parquet(&p, &rows).expect("marks");
    let row = 8 * 40 + 6;
    let r = &clean[row];
    let p = add(
        "mean_above_max",
        "csv",
        64,
        problem("inconsistent", Some(row as u64 + 1), Some("queue_bytes_avg")),
        Some(vec![(key_of(r), r.sample.ts_ns)]),
    );
    let mut rows = clean.clone();
    rows[row].sample.queue_bytes_avg = rows[row].sample.queue_bytes_max as f64 * 1.5 + 10.0;
    write_telemetry_csv(&p, &rows).expect("mean");

    // Cumulative 32-bit counters that wrap mid-recording: handled, no problem at all.
    let p = add("cumulative_wrap", "parquet", 32, None, Some(vec![]));
    let start = (1u64 << 32) - 500_000;
    write_telemetry_parquet_with(&p, &cumulative(&clean, start, Some(1 << 32)), CounterMode::Cumulative)
        .expect("cumulative wrap");

    // The same cumulative counters in a file that lost its `ecn_tuner.counters` key (pandas
    // and polars drop it when they rewrite a Parquet file), so read as deltas: nearly every
    // delta is beyond line rate. Repair would drop every row and call the empty file
    // repaired; the read fails, saying the counters look cumulative.
    let p = add("cumulative_without_key", "parquet", 64, problem("looks_cumulative", None, None), None);
    write_telemetry_parquet(&p, &cumulative(&clean, 1_000_000, None)).expect("cumulative without key");

    // Cumulative counters reset (a reboot) at one sample: the delta there is unknown, so
    // repair drops that sample and breaks continuity; the next delta counts from the reset.
    let reset_row = n_queues * 60 + 2; // index into `clean`
    let r = &clean[reset_row];
    let mut cum = cumulative(&clean, 1_000_000, None);
    let file_row = reset_row + n_queues; // the baseline rows come first
    let k = reset_row % n_queues;
    let reset_to = [0u64; 7];
    let shift: Vec<u64> = (0..7).map(|i| counters(&cum[file_row])[i] - reset_to[i]).collect();
    for j in (file_row..cum.len()).step_by(n_queues) {
        assert_eq!(j % n_queues, k);
        let mut c = counters(&cum[j]);
        for i in 0..7 {
            c[i] -= shift[i];
        }
        set_counters(&mut cum[j], c);
    }
    let p = add(
        "reset",
        "parquet",
        64,
        problem("counter_reset", Some(file_row as u64 + 1), Some("tx_bytes")),
        Some(vec![(key_of(r), r.sample.ts_ns)]),
    );
    write_telemetry_parquet_with(&p, &cum, CounterMode::Cumulative).expect("reset");

    // Exact duplicates right after their originals: repair drops them.
    let mut rows = clean.clone();
    for &i in &[100usize, 30, 10] {
        let copy = rows[i].clone();
        rows.insert(i + 1, copy);
    }
    let p = add("duplicates", "parquet", 64, problem("duplicate", Some(12), None), Some(vec![]));
    write_telemetry_parquet(&p, &rows).expect("duplicates");

    // A duplicate whose values differ: not repairable.
    let mut rows = clean.clone();
    let mut copy = rows[10].clone();
    copy.sample.tx_bytes += 1;
    rows.insert(11, copy);
    let p =
        add("conflicting_duplicate", "parquet", 64, problem("conflicting_duplicate", Some(12), Some("tx_bytes")), None);
    write_telemetry_parquet(&p, &rows).expect("conflicting");

    // Rows shuffled (seeded Fisher-Yates): repair sorts them back.
    let mut rows = clean.clone();
    let mut rng = Rng(0xd0_5e_ed);
    for i in (1..rows.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        rows.swap(i, j);
    }
    let p = add("shuffled", "parquet", 64, problem("out_of_order", None, Some("ts_ns")), Some(vec![]));
    write_telemetry_parquet(&p, &rows).expect("shuffled");

    // Five missing intervals of one queue: a gap, marked by repair.
    let gap_queue = queues()[5].clone();
    let missing: Vec<(QueueKey, u64)> = (70..75).map(|t| (gap_queue.clone(), t * INTERVAL_NS)).collect();
    let rows: Vec<TelemetrySample> =
        clean.iter().filter(|r| !missing.contains(&(key_of(r), r.sample.ts_ns))).cloned().collect();
    let gap_row = rows.iter().position(|r| key_of(r) == gap_queue && r.sample.ts_ns == 75 * INTERVAL_NS).expect("row");
    let p = add("gap", "parquet", 64, problem("gap", Some(gap_row as u64 + 1), Some("ts_ns")), Some(missing));
    write_telemetry_parquet(&p, &rows).expect("gap");

    let p = add("missing_column", "parquet", 64, problem("missing_column", None, Some("tx_pkts")), None);
    let mut df = telemetry_frame(&clean).expect("frame");
    df.drop_in_place("tx_pkts").expect("drop");
    write_frame(&p, df, None);

    let p = add("wrong_type", "parquet", 64, problem("wrong_type", None, Some("tx_bytes")), None);
    let mut df = telemetry_frame(&clean).expect("frame");
    let text: Vec<String> = clean.iter().map(|r| r.sample.tx_bytes.to_string()).collect();
    df.with_column(Column::new("tx_bytes".into(), text)).expect("text");
    write_frame(&p, df, None);

    // In CSV a type is per cell, so the problem has a row.
    let row = 77;
    let p = add("wrong_type_csv", "csv", 64, problem("wrong_type", Some(row + 1), Some("tx_bytes")), None);
    write_telemetry_csv(&p, &clean).expect("csv");
    let text = fs::read_to_string(&p).expect("read csv");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut cells: Vec<String> = lines[row as usize + 1].split(',').map(str::to_string).collect();
    cells[8] = "12kB".to_string();
    lines[row as usize + 1] = cells.join(",");
    fs::write(&p, lines.join("\n") + "\n").expect("write csv");

    // A column named twice: which copy is true is unknowable, so the file is refused.
    let p = add("duplicate_header_csv", "csv", 64, problem("unreadable", None, Some("tx_bytes")), None);
    let text = fs::read_to_string(dir.join("clean_csv.csv")).expect("read clean csv");
    let mut lines = text.lines();
    let header = format!("{},tx_bytes", lines.next().expect("header"));
    let body: Vec<String> = std::iter::once(header).chain(lines.map(|l| format!("{l},5"))).collect();
    fs::write(&p, body.join("\n") + "\n").expect("write csv");

    // A CSV written with ", " between fields (by hand, or a padded export): the spaces are
    // not part of the names, so the queues are the clean recording's.
    let p = add("spaced_csv", "csv", 64, None, Some(vec![]));
    let text = fs::read_to_string(dir.join("clean_csv.csv")).expect("read clean csv");
    fs::write(&p, text.replace(',', ", ").replace('\n', " \n")).expect("write csv");

    // A switch name of spaces only is an empty value, in Parquet as in CSV (a queue named ""
    // would be one no switch has).
    let row = 44;
    let p = add("blank_switch", "parquet", 64, problem("null", Some(row + 1), Some("switch")), None);
    let mut rows = clean.clone();
    rows[row as usize].switch = "  ".into();
    write_telemetry_parquet(&p, &rows).expect("blank switch");

    let p = add("empty", "parquet", 64, problem("empty", None, None), None);
    fs::write(&p, b"").expect("empty");
    let p = add("no_rows", "parquet", 64, problem("empty", None, None), None);
    write_telemetry_parquet(&p, &[]).expect("no rows");

    // A line rate no port has (2^64 − 1 b/s, a garbage value): it would scale every rate to 0.
    let row = 20;
    let p = add("absurd_link_rate", "csv", 64, problem("out_of_range", Some(row + 1), Some("link_bps")), None);
    let mut rows = clean.clone();
    rows[row as usize].sample.link_bps = u64::MAX;
    write_telemetry_csv(&p, &rows).expect("link rate");

    // A line rate in Gb/s (100 for 100 Gb/s): bytes beyond it would be dropped as implausible,
    // and an idle queue's rates would all read as saturated.
    let row = 21;
    let p = add("link_rate_in_gbps", "parquet", 64, problem("out_of_range", Some(row + 1), Some("link_bps")), None);
    let mut rows = clean.clone();
    rows[row as usize].sample.link_bps = 100;
    write_telemetry_parquet(&p, &rows).expect("link rate in Gb/s");

    let p = add("truncated", "parquet", 64, problem("unreadable", None, None), None);
    let bytes = fs::read(dir.join("clean.parquet")).expect("clean bytes");
    fs::write(&p, &bytes[..bytes.len() * 2 / 3]).expect("truncated");

    out
}

/// The clean recording as per-queue series, without the `dropped` samples and with a
/// continuity break after each: what a repaired read must return.
pub fn expected_series(dropped: &[(QueueKey, u64)]) -> Vec<QueueSeries> {
    let clean = clean_rows();
    let mut keys = queues();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let mut samples = Vec::new();
            let mut segment_starts = vec![0];
            let mut broken = false;
            for r in clean.iter().filter(|r| key_of(r) == key) {
                if dropped.contains(&(key.clone(), r.sample.ts_ns)) {
                    broken = true;
                    continue;
                }
                if broken && !samples.is_empty() {
                    segment_starts.push(samples.len());
                }
                broken = false;
                samples.push(r.sample);
            }
            QueueSeries { key, interval_ns: Some(INTERVAL_NS), samples, segment_starts }
        })
        .collect()
}
