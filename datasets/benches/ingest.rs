//! Telemetry ingest benchmark: `cargo bench -p ecn-datasets --bench ingest [-- --rows N]`.
//!
//! Prints, for a generated Parquet file of N rows (default 8 Mi, 64 queues):
//! - ingest with validation on one core, rows per second, through the streaming reader and
//!   through the in-memory loader (target: at least 5 million rows/s);
//! - the peak memory (VmHWM) of a child process that streams the file under an address-space
//!   limit (`ulimit -v`) four times smaller than the file's decoded size, next to the peak of
//!   a child that loads it whole.
//!
//! One core: `POLARS_MAX_THREADS=1` is set before polars is first used (polars reads it once,
//! when its thread pool starts), and the readers decode on the calling thread; the CPU time
//! the process used is printed next to the wall time to show it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ecn_datasets::io::TelemetryParquetWriter;
use ecn_datasets::telemetry::{load_telemetry, stream_telemetry, CounterMode, QueueSample, ReadOptions};
use ecn_datasets::TelemetrySample;

const QUEUES: u64 = 64;
const INTERVAL_NS: u64 = 10_000;

/// (user + system) CPU seconds of this process, from /proc/self/stat (clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, s)| s).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// A `/proc/self/status` field in MiB (e.g. `VmHWM`, the peak resident set).
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn generate(path: &Path, rows: u64) {
    let mut w = TelemetryParquetWriter::create(path, CounterMode::Delta).expect("create");
    let names: Vec<(String, String, u8)> = (0..QUEUES)
        .map(|q| (format!("leaf{}", q / 16), format!("eth{}", (q / 2) % 8 + 1), 3 + (q % 2) as u8))
        .collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut batch = Vec::with_capacity(65_536);
    for i in 0..rows {
        let (sw, port, queue) = &names[(i % QUEUES) as usize];
        let r = next();
        let tx_bytes = r % 125_000;
        batch.push(TelemetrySample {
            switch: sw.clone(),
            port: port.clone(),
            queue: *queue,
            sample: QueueSample {
                ts_ns: (i / QUEUES + 1) * INTERVAL_NS,
                link_bps: 100_000_000_000,
                queue_bytes: (r >> 20) % 500_000,
                queue_bytes_avg: ((r >> 24) % 400_000) as f64,
                queue_bytes_max: (r >> 20) % 500_000 + 1_000,
                tx_bytes,
                tx_pkts: tx_bytes / 1_000,
                ecn_marked_pkts: (r >> 40) % 16,
                pfc_pause_rx: (r >> 50) % 2,
                pfc_pause_tx: 0,
                paused_ns: (r >> 30) % 1_000,
                drops: 0,
                kmin_bytes: 100_000,
                kmax_bytes: 400_000,
                pmax: 0.2,
                span_ns: 0,
            },
        });
        if batch.len() == batch.capacity() {
            w.write(&batch).expect("write");
            batch.clear();
        }
    }
    w.write(&batch).expect("write");
    w.finish().expect("finish");
}

/// Child mode: read the file one way and print `rows peak_rss_mib peak_vm_mib`.
fn child(mode: &str, path: &Path) {
    let opts = ReadOptions::default();
    let rows = match mode {
        "stream" => {
            let mut sum = 0u64;
            let s = stream_telemetry(path, &opts, |_, _, s: &QueueSample, _| sum = sum.wrapping_add(s.tx_bytes))
                .unwrap_or_else(|e| panic!("{e}"));
            std::hint::black_box(sum);
            s.rows
        }
        _ => load_telemetry(path, &opts).unwrap_or_else(|e| panic!("{e}")).rows,
    };
    println!("{rows} {:.1} {:.1}", status_mib("VmHWM"), status_mib("VmPeak"));
}

fn run_child(mode: &str, path: &Path, limit_mib: Option<u64>) -> Result<String, String> {
    let exe = std::env::current_exe().expect("own path");
    let ulimit = limit_mib.map_or(String::new(), |m| format!("ulimit -v {} && ", m * 1024));
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{ulimit}exec \"$0\" --child {mode} \"$1\""))
        .arg(&exe)
        .arg(path)
        .env("POLARS_MAX_THREADS", "1")
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!("{}: {}", out.status, err.lines().last().unwrap_or("")))
    }
}

fn main() {
    // Before anything touches polars: its thread pool reads this once, at start.
    std::env::set_var("POLARS_MAX_THREADS", "1");
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], Path::new(&args[i + 2]));
        return;
    }
    let rows: u64 =
        args.iter().position(|a| a == "--rows").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(8 * 1024 * 1024);

    let dir = std::env::temp_dir().join(format!("ecn-ingest-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path: PathBuf = dir.join("telemetry.parquet");
    let t = Instant::now();
    generate(&path, rows);
    let file_mib = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / (1024.0 * 1024.0);
    let decoded_mib = (rows as usize * std::mem::size_of::<QueueSample>()) as f64 / (1024.0 * 1024.0);
    println!(
        "file: {rows} rows, {QUEUES} queues, {file_mib:.0} MiB Parquet (zstd), {decoded_mib:.0} MiB decoded; generated in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let opts = ReadOptions::default();
    for round in 0..2 {
        let (t, cpu) = (Instant::now(), cpu_seconds());
        let mut sum = 0u64;
        let s = stream_telemetry(&path, &opts, |_, _, s, _| sum = sum.wrapping_add(s.tx_bytes)).expect("stream");
        std::hint::black_box(sum);
        let wall = t.elapsed().as_secs_f64();
        println!(
            "stream_telemetry (validate, deliver), run {}: {:.2} s wall, {:.2} s CPU: {:.2} M rows/s [target >= 5]",
            round + 1,
            wall,
            cpu_seconds() - cpu,
            s.rows as f64 / wall / 1e6
        );
    }
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let data = load_telemetry(&path, &opts).expect("load");
    let wall = t.elapsed().as_secs_f64();
    println!(
        "load_telemetry (validate, per-queue series): {:.2} s wall, {:.2} s CPU: {:.2} M rows/s",
        wall,
        cpu_seconds() - cpu,
        data.rows as f64 / wall / 1e6
    );
    drop(data);

    match run_child("load", &path, None) {
        Ok(line) => println!("load_telemetry child, no limit: rows, peak RSS MiB, peak VM MiB = {line}"),
        Err(e) => println!("load_telemetry child failed: {e}"),
    }
    let limit = (decoded_mib / 4.0) as u64;
    match run_child("stream", &path, Some(limit)) {
        Ok(line) => println!(
            "stream_telemetry child under ulimit -v {limit} MiB (decoded file is {:.1}x that): rows, peak RSS MiB, peak VM MiB = {line}",
            decoded_mib / limit as f64
        ),
        Err(e) => println!("stream_telemetry child under ulimit -v {limit} MiB FAILED: {e}"),
    }
    match run_child("load", &path, Some(limit)) {
        Ok(line) => println!("load_telemetry child under the same limit (expected to fail): {line}"),
        Err(e) => println!("load_telemetry child under the same limit fails, as it must: {e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
