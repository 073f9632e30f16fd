//! `cargo bench -p ecn-tests --bench recommend [-- --rows N --big-rows N --data-limit-mib M --model M]`
//!
//! Two figures for `ecn-tuner recommend`, the whole command as a user runs it (process start,
//! libtorch, model load, validated read, decisions, JSON out):
//! 1. wall time on a file of `--rows` rows (default 1 000 000; target: under 1 s);
//! 2. a Parquet file at least 4× a data-segment limit on disk (`prlimit --data`, which
//!    caps the heap and every private anonymous mapping, unlike `ulimit -v`, which libtorch's
//!    large shared libraries would exhaust by address space alone): recommend must finish
//!    under that limit, because it streams. Defaults: 40M rows (519 MiB) under 128 MiB.
//!
//! Run it in the dev profile (optimized), which `scripts/test` has built already:
//! `cargo bench --profile dev -p ecn-tests --bench recommend`.
//!
//! The telemetry is synthetic but valid: 64 queues of one leaf, 100 µs samples at 100 Gb/s,
//! plausible counters, settings inside the default bounds.

use ecn_datasets::io::TelemetryParquetWriter;
use ecn_datasets::telemetry::CounterMode;
use ecn_datasets::{QueueSample, TelemetrySample};
use ecn_tests::ecn_tuner_bin;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const QUEUES: u64 = 64;
const INTERVAL_NS: u64 = 100_000;
const LINK_BPS: u64 = 100_000_000_000;

/// The options this benchmark takes; `--bench` is cargo's.
const OPTIONS: [&str; 4] = ["--rows", "--big-rows", "--data-limit-mib", "--model"];

/// Exit 2 on an option this benchmark does not know, or one without its value: a misspelt flag
/// must not run the default benchmark as if it were the one asked for.
fn check_args() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if OPTIONS.contains(&a) && i + 1 < args.len() {
            i += 2;
        } else if a == "--bench" {
            i += 1;
        } else {
            eprintln!("error: '{a}': options are {} (each with a value)", OPTIONS.join(", "));
            std::process::exit(2);
        }
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let v = arg_str(name, &default.to_string());
    v.parse().unwrap_or_else(|_| {
        eprintln!("error: {name} '{v}': expected a whole number");
        std::process::exit(2)
    })
}

fn arg_str(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| default.into())
}

/// Write `rows` rows (rounded up to whole intervals); returns the file size in bytes.
fn write_file(path: &Path, rows: u64) -> u64 {
    let mut w = TelemetryParquetWriter::create(path, CounterMode::Delta).expect("create");
    let intervals = rows.div_ceil(QUEUES);
    let mut chunk = Vec::with_capacity(65_536);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for t in 1..=intervals {
        for q in 0..QUEUES {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let util = (x % 1000) as f64 / 1000.0;
            let tx_bytes = (LINK_BPS as f64 / 8.0 * INTERVAL_NS as f64 * 1e-9 * util) as u64;
            let depth = (x >> 20) % 200_000;
            chunk.push(TelemetrySample {
                switch: "leaf0".into(),
                port: format!("eth{}", q / 2 + 1),
                queue: 3 + (q % 2) as u8,
                sample: QueueSample {
                    ts_ns: t * INTERVAL_NS,
                    link_bps: LINK_BPS,
                    queue_bytes: depth,
                    queue_bytes_avg: depth as f64 * 0.8,
                    queue_bytes_max: depth + 4_000,
                    tx_bytes,
                    tx_pkts: tx_bytes / 1_000,
                    ecn_marked_pkts: tx_bytes / 1_000 * (depth / 4_000).min(100) / 100,
                    pfc_pause_rx: 0,
                    pfc_pause_tx: 0,
                    paused_ns: 0,
                    drops: 0,
                    kmin_bytes: 5_000,
                    kmax_bytes: 200_000,
                    pmax: 0.2,
                    span_ns: 0,
                },
            });
            if chunk.len() == chunk.capacity() {
                w.write(&chunk).expect("write");
                chunk.clear();
            }
        }
    }
    w.write(&chunk).expect("write");
    w.finish().expect("finish");
    std::fs::metadata(path).expect("stat").len()
}

/// Run recommend, optionally under a data-segment limit; (wall seconds, exit ok, stderr tail).
fn recommend(file: &Path, model: &str, data_limit_bytes: Option<u64>) -> (f64, bool, String) {
    let bin = ecn_tuner_bin();
    let mut cmd = match data_limit_bytes {
        Some(limit) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--data={limit}")).arg("--").arg(&bin);
            c
        }
        None => Command::new(&bin),
    };
    cmd.args(["recommend", "--telemetry"]).arg(file).args(["--model", model, "--json"]);
    let started = Instant::now();
    let out = cmd.output().expect("run ecn-tuner recommend");
    let wall = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
    (wall, out.status.success(), tail)
}

fn main() {
    check_args();
    let rows = arg("--rows", 1_000_000);
    let big_rows = arg("--big-rows", 40_000_000);
    let limit_mib = arg("--data-limit-mib", 128);
    let model = arg_str("--model", "default");
    let dir = tempfile::Builder::new().prefix("ecn-bench-recommend-").tempdir().expect("scratch directory");

    let small = dir.path().join("small.parquet");
    let size = write_file(&small, rows);
    // One untimed run warms the page cache and the dynamic loader, as a user's second run would.
    recommend(&small, &model, None);
    let mut walls: Vec<f64> = (0..5)
        .map(|_| recommend(&small, &model, None))
        .map(|(w, ok, e)| {
            assert!(ok, "recommend failed: {e}");
            w
        })
        .collect();
    walls.sort_by(f64::total_cmp);
    println!(
        "recommend on {rows} rows ({:.1} MiB Parquet, {QUEUES} queues): median {:.3} s, max {:.3} s over 5 runs (target < 1 s)",
        size as f64 / 1048576.0,
        walls[2],
        walls[4]
    );

    let big = dir.path().join("big.parquet");
    let size = write_file(&big, big_rows);
    // Decoded, a row is at least its 18 fixed-width fields (8 bytes each) plus its queue's names.
    let decoded_mib = big_rows as f64 * 18.0 * 8.0 / 1048576.0;
    let limit = limit_mib * 1024 * 1024;
    let (wall, ok, err) = recommend(&big, &model, Some(limit));
    println!(
        "recommend on {big_rows} rows ({:.0} MiB Parquet = {:.1}× the limit; ≥{decoded_mib:.0} MiB decoded) under a {limit_mib} MiB data limit: {} in {wall:.2} s",
        size as f64 / 1048576.0,
        size as f64 / limit as f64,
        if ok { "completed" } else { "FAILED" }
    );
    if !ok {
        println!("  stderr: {err}");
    }
}
