//! # controller_scale
//!
//! Issue 4's benchmark: ONE `ecn-tuner run` process serves N actuators (default 200) of 64
//! queues each, at a 100 ms interval, in shadow mode. The actuators are `ecn-tuner actuator
//! --backend dry-run` child processes on loopback that replay a 64-queue telemetry recording
//! made here with `ecn-tuner sim`. It prints the controller's CPU use (of one core and of two),
//! the actuators' CPU and memory, decisions per second against the expected N × 64 × 10, and
//! the time from a telemetry batch's arrival to its decision (p50/p90/p99, read from the
//! controller's Prometheus histogram over the steady-state window).
//!
//! ```text
//! cargo bench -p ecn-tests --bench controller_scale [-- --actuators N --seconds S --cpus LIST]
//! ```
//!
//! Under Cargo it first runs `cargo build --release -p ecn-agent --bin ecn-tuner` (a no-op when
//! fresh) and uses `<target>/release/ecn-tuner`; run directly, it needs that binary built.
//! Mind `ulimit -n` (it checks: about 4 descriptors per actuator) and memory (it checks each
//! actuator's private memory, `RssAnon`: its file pages, libtorch's code above all, are shared
//! by every process of the binary).
//!
//! It prints figures; it asserts nothing about speed. Linux only (it reads /proc).

use ecn_tests::{pb, release_ecn_tuner_bin, Actuator};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// The controller's decision interval, and the wall-clock spacing of replayed batches.
const INTERVAL: Duration = Duration::from_millis(100);
/// Queues per actuator the benchmark is specified for.
const QUEUES: usize = 64;
/// Actuators started at once (each loads the recording; a 2-core machine is easily swamped).
const PARALLEL_STARTS: usize = 8;

/// 2 leaves × (28 host ports + 2 uplinks) + 2 spines × 2 downlinks = 64 switch data queues.
/// Sampled every 1 ms of simulated time and replayed at time-scale 0.01, one batch arrives
/// every 100 ms of wall time. No drain: the run ends exactly at 20 ms, so that every recorded
/// interval is a whole 1 ms (a final partial interval would shrink the replay's native interval).
const SCENARIO: &str = r#"name = "controller-scale-bench"
seed = 1
duration = "20ms"
drain = "0ms"
sample_interval = "1ms"

[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 28

[[workload]]
kind = "poisson"
cdf = "websearch"
load = 0.05
"#;

const USAGE: &str = "\
usage: cargo bench -p ecn-tests --bench controller_scale -- [OPTIONS]

  --actuators N      dry-run actuators, one process each (default 200)
  --seconds S        controller run time (default 30); figures cover the steady state within it
  --cpus LIST        pin the controller with `taskset -c LIST` (e.g. 0,1); default: unpinned
  --telemetry FILE   replay this recording instead of recording a 64-queue one
  --keep             keep the scratch directory (logs) and print its path";

struct Opts {
    actuators: usize,
    seconds: u64,
    cpus: Option<String>,
    telemetry: Option<PathBuf>,
    keep: bool,
}

fn parse_args() -> Result<Option<Opts>, String> {
    let mut o = Opts { actuators: 200, seconds: 30, cpus: None, telemetry: None, keep: false };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            // Cargo passes `--bench` to every harness-less bench target.
            "--bench" => {}
            "--actuators" => {
                o.actuators = value("--actuators")?.parse().map_err(|e| format!("--actuators: {e}"))?;
            }
            "--seconds" => o.seconds = value("--seconds")?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--cpus" => o.cpus = Some(value("--cpus")?),
            "--telemetry" => o.telemetry = Some(PathBuf::from(value("--telemetry")?)),
            "--keep" => o.keep = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.actuators == 0 {
        return Err("--actuators must be at least 1".into());
    }
    if o.seconds < 10 {
        return Err("--seconds must be at least 10 (start-up and warm-up take a few seconds)".into());
    }
    Ok(Some(o))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(Some(o)) => o,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("controller_scale: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Children are killed and scratch directories removed when their handles drop; an
    // interrupt skips the drops, so do both here.
    let children = Arc::new(Mutex::new(Cleanup::default()));
    let on_signal = children.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        let cleanup = on_signal.lock().unwrap_or_else(|e| e.into_inner());
        let pids: Vec<String> = cleanup.pids.iter().map(u32::to_string).collect();
        if !pids.is_empty() {
            let _ = std::process::Command::new("kill").arg("-KILL").args(&pids).status();
        }
        for d in &cleanup.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        eprintln!("controller_scale: interrupted; killed {} child processes", pids.len());
        std::process::exit(130);
    });
    match bench(opts, children).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("controller_scale: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What an interrupt must undo: child processes and scratch directories.
#[derive(Default)]
struct Cleanup {
    pids: Vec<u32>,
    dirs: Vec<PathBuf>,
}

impl Cleanup {
    fn actuator(&mut self, a: &Actuator) {
        self.pids.extend(a.pid());
        self.dirs.push(a.dir.path().to_path_buf());
    }
}

// ---- /proc -----------------------------------------------------------------------------------

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at field 3, the state.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// A `Key:   value ...` line of /proc/PID/status, its first number.
fn status_field(pid: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(|v| v.trim().to_string()))
}

fn status_number(pid: u32, key: &str) -> Option<u64> {
    status_field(&pid.to_string(), key)?.split_whitespace().next()?.parse().ok()
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The 1-minute load average: other work on the machine shows here before the benchmark starts.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The soft and hard `Max open files` of this process.
fn open_files_limit() -> Option<(u64, String)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let v: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
    Some((v.first()?.parse().unwrap_or(u64::MAX), v.get(1)?.to_string()))
}

fn mem_available_kib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| l.strip_prefix("MemAvailable:")?.split_whitespace().next()?.parse().ok())
}

/// CPU time of the controller, of every actuator, and of this process.
struct Snapshot {
    at: Instant,
    controller: u64,
    actuators: u64,
    bench: u64,
}

fn snapshot(controller: u32, actuators: &[u32]) -> Snapshot {
    Snapshot {
        at: Instant::now(),
        controller: cpu_ticks(controller).unwrap_or(0),
        actuators: actuators.iter().filter_map(|&p| cpu_ticks(p)).sum(),
        bench: cpu_ticks(std::process::id()).unwrap_or(0),
    }
}

// ---- Prometheus ------------------------------------------------------------------------------

/// What the benchmark reads from the controller's `/metrics`.
#[derive(Debug, Clone, Default)]
struct Scrape {
    decisions: f64,
    /// Decision latency histogram: (upper bound in seconds, cumulative count).
    buckets: Vec<(f64, f64)>,
    latency_sum: f64,
    telemetry_age: f64,
}

async fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).await.ok()?;
    let (head, body) = body.split_once("\r\n\r\n")?;
    head.lines().next()?.contains(" 200 ").then(|| body.to_string())
}

async fn scrape(addr: &str) -> Option<Scrape> {
    let text = tokio::time::timeout(Duration::from_secs(20), http_get(addr, "/metrics")).await.ok()??;
    parse_metrics(&text)
}

fn parse_metrics(text: &str) -> Option<Scrape> {
    let mut s = Scrape::default();
    let mut have_decisions = false;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        // One series per target: the sum.
        if name.split('{').next() == Some("ecn_tuner_decisions_total") {
            s.decisions += value;
            have_decisions = true;
        } else if name.split('{').next() == Some("ecn_tuner_decision_latency_seconds_sum") {
            s.latency_sum += value;
        } else if name.starts_with("ecn_tuner_telemetry_age_seconds{") {
            // The stalest of the targets.
            s.telemetry_age = s.telemetry_age.max(value);
        } else if let Some((_, le)) = name
            .strip_prefix("ecn_tuner_decision_latency_seconds_bucket{")
            .and_then(|labels| labels.split_once("le=\""))
        {
            let le = le.split('"').next()?;
            let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            match s.buckets.iter_mut().find(|b| b.0 == bound) {
                Some(b) => b.1 += value,
                None => s.buckets.push((bound, value)),
            }
        }
    }
    s.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    have_decisions.then_some(s)
}

impl Scrape {
    /// Observations between `earlier` and `self`.
    fn minus(&self, earlier: &Scrape) -> Scrape {
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, c)| {
                let before = earlier.buckets.iter().find(|b| b.0 == le).map_or(0.0, |b| b.1);
                (le, c - before)
            })
            .collect();
        Scrape {
            decisions: self.decisions - earlier.decisions,
            buckets,
            latency_sum: self.latency_sum - earlier.latency_sum,
            telemetry_age: self.telemetry_age,
        }
    }

    fn count(&self) -> f64 {
        self.buckets.last().map_or(0.0, |b| b.1)
    }

    /// The upper bound of the bucket where the cumulative count reaches `q` of the total.
    fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        (total > 0.0).then(|| self.buckets.iter().find(|b| b.1 >= q * total).map_or(f64::INFINITY, |b| b.0))
    }

    /// The largest finite bucket bound.
    fn top_bound(&self) -> f64 {
        self.buckets.iter().map(|b| b.0).filter(|b| b.is_finite()).fold(0.0, f64::max)
    }

    fn fmt_quantile(&self, q: f64) -> String {
        match self.quantile(q) {
            None => "n/a (no observations)".into(),
            Some(b) if b.is_infinite() => format!("> {} (above the top bucket)", fmt_secs(self.top_bound())),
            Some(b) => format!("<= {}", fmt_secs(b)),
        }
    }
}

fn fmt_secs(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

// ---- the benchmark ---------------------------------------------------------------------------

async fn bench(opts: Opts, children: Arc<Mutex<Cleanup>>) -> Result<(), String> {
    let n = opts.actuators;
    let bin = release_ecn_tuner_bin()?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let tck = clock_ticks_per_second();
    let load_before = load_average();
    let scratch = tempfile::Builder::new().prefix("ecn-controller-scale-").tempdir().map_err(|e| e.to_string())?;
    children.lock().unwrap().dirs.push(scratch.path().to_path_buf());

    // File descriptors: each actuator costs this process a pipe (and tokio a pidfd), and the
    // controller a socket or two; both inherit this soft limit.
    let need_fds = (n as u64) * 4 + 256;
    match open_files_limit() {
        Some((soft, hard)) if soft < need_fds => {
            return Err(format!(
                "`ulimit -n` is {soft} (hard {hard}); {n} actuators need about {need_fds}: raise it \
                 (`ulimit -n {need_fds}`) and rerun"
            ));
        }
        _ => {}
    }

    eprintln!("binary: {}", bin.display());
    let telemetry = match &opts.telemetry {
        Some(f) => f.clone(),
        None => record(&bin, scratch.path()).await?,
    };

    // Probe the recording's native interval and queues, to replay one batch per 100 ms.
    let probe = start_actuator(&telemetry, 1.0).await?;
    let caps = ecn_tests::connect(&probe.url())
        .await
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .map_err(|s| format!("GetCapabilities: {s}"))?
        .into_inner();
    drop(probe);
    let queues = caps.queues.len();
    let native_ns = caps.min_telemetry_interval_ns;
    if native_ns == 0 {
        return Err("the recording reports no native interval".into());
    }
    let time_scale = native_ns as f64 / INTERVAL.as_nanos() as f64;
    if queues != QUEUES {
        eprintln!("warning: the recording has {queues} queues per actuator, not {QUEUES}");
    }
    eprintln!(
        "recording: {queues} queues, native interval {}, replayed at --time-scale {time_scale} (one batch per {})",
        fmt_secs(native_ns as f64 * 1e-9),
        fmt_secs(INTERVAL.as_secs_f64())
    );

    // Actuators: the first alone, to size memory, then the rest a few at a time.
    let started_at = Instant::now();
    let mut actuators: Vec<Actuator> = Vec::with_capacity(n);
    actuators.push(start_actuator(&telemetry, time_scale).await?);
    children.lock().unwrap().actuator(&actuators[0]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let one_rss = actuators[0].pid().and_then(|p| status_number(p, "RssAnon")).unwrap_or(0);
    if let Some(avail) = mem_available_kib() {
        let need = one_rss * n as u64;
        if need > avail * 9 / 10 {
            return Err(format!(
                "{n} actuators of about {} MiB of private memory each need {} MiB; only {} MiB is available",
                one_rss / 1024,
                need / 1024,
                avail / 1024
            ));
        }
    }
    let sem = Arc::new(tokio::sync::Semaphore::new(PARALLEL_STARTS));
    let mut starting = tokio::task::JoinSet::new();
    for i in 1..n {
        let (sem, telemetry, children) = (sem.clone(), telemetry.clone(), children.clone());
        starting.spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore");
            let a = start_actuator(&telemetry, time_scale).await?;
            children.lock().unwrap().actuator(&a);
            Ok::<_, String>((i, a))
        });
    }
    let mut rest = Vec::new();
    while let Some(r) = starting.join_next().await {
        rest.push(r.map_err(|e| format!("starting an actuator: {e}"))??);
    }
    rest.sort_by_key(|(i, _)| *i);
    actuators.extend(rest.into_iter().map(|(_, a)| a));
    let actuator_pids: Vec<u32> = actuators.iter().filter_map(Actuator::pid).collect();
    eprintln!("{n} actuators up in {:.1} s", started_at.elapsed().as_secs_f64());

    // The controller.
    let metrics = format!("127.0.0.1:{}", ecn_tests::ports::free_port());
    let mut cmd = match &opts.cpus {
        Some(list) => {
            let mut c = Command::new("taskset");
            c.args(["-c", list]).arg(&bin);
            c
        }
        None => Command::new(&bin),
    };
    cmd.args(["run", "--mode", "shadow", "--interval", "100ms", "--metrics", &metrics]);
    cmd.args(["--duration", &format!("{}s", opts.seconds)]);
    for a in &actuators {
        cmd.args(["--target", &a.url()]);
    }
    let log_path = scratch.path().join("controller.log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(log)).kill_on_drop(true);
    let mut controller = cmd.spawn().map_err(|e| format!("spawn the controller: {e}"))?;
    let ctl_start = Instant::now();
    let ctl_pid = controller.id().ok_or("controller pid")?;
    children.lock().unwrap().pids.push(ctl_pid);
    let log_tail = || {
        let t = std::fs::read_to_string(&log_path).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };

    // Warm-up: until every target has had (about) one round, then a little more.
    let end = ctl_start + Duration::from_secs(opts.seconds) - Duration::from_millis(1500);
    let warm_deadline = ctl_start + Duration::from_secs(opts.seconds / 2);
    let mut warm = false;
    while Instant::now() < warm_deadline {
        if let Ok(Some(status)) = controller.try_wait() {
            return Err(format!("the controller exited early ({status}); its log:\n{}", log_tail()));
        }
        if scrape(&metrics).await.is_some_and(|s| s.decisions >= (n * queues) as f64) {
            warm = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let warm_up = ctl_start.elapsed();
    if !warm {
        eprintln!("warning: not every target had decided after {:.1} s; measuring anyway", warm_up.as_secs_f64());
    }
    tokio::time::sleep(Duration::from_secs(2).min(end.saturating_duration_since(Instant::now()) / 4)).await;

    // The window: scrape before the first CPU reading and after the last, so that rendering
    // /metrics (some 40 000 series at 200 actuators) stays out of the controller's CPU figure.
    // Counts from the metrics are divided by the time between the two scrapes (each taken at
    // its midpoint), not by the CPU window inside it: that overstated the rates.
    let asked = Instant::now();
    let m0 = scrape(&metrics).await.ok_or("cannot scrape the controller's /metrics")?;
    let m0_at = asked + asked.elapsed() / 2;
    let s0 = snapshot(ctl_pid, &actuator_pids);
    if end <= s0.at + Duration::from_secs(3) {
        return Err(format!(
            "warm-up took {:.1} s of the {} s run: no steady-state window left; use a larger --seconds",
            warm_up.as_secs_f64(),
            opts.seconds
        ));
    }
    tokio::time::sleep_until(end.into()).await;
    let s1 = snapshot(ctl_pid, &actuator_pids);
    let load_end = load_average();
    let ctl_rss = status_number(ctl_pid, "VmRSS").unwrap_or(0);
    let ctl_threads = status_number(ctl_pid, "Threads").unwrap_or(0);
    let ctl_cpus = status_field(&ctl_pid.to_string(), "Cpus_allowed_list").unwrap_or_default();
    let act_rss: Vec<u64> = actuator_pids.iter().filter_map(|&p| status_number(p, "VmRSS")).collect();
    let act_private: Vec<u64> = actuator_pids.iter().filter_map(|&p| status_number(p, "RssAnon")).collect();
    let act_threads: u64 = actuator_pids.iter().filter_map(|&p| status_number(p, "Threads")).sum();
    let asked = Instant::now();
    let m1 = scrape(&metrics).await.ok_or("cannot scrape the controller's /metrics at the end")?;
    let m1_at = asked + asked.elapsed() / 2;
    let alive = actuator_pids.iter().filter(|&&p| cpu_ticks(p).is_some()).count();

    // The controller stops by itself after --duration.
    let out = tokio::time::timeout(Duration::from_secs(120), async {
        let mut stdout = String::new();
        if let Some(mut o) = controller.stdout.take() {
            let _ = o.read_to_string(&mut stdout).await;
        }
        (controller.wait().await, stdout)
    })
    .await;
    // Reaped (or about to be killed on drop): an interrupt must not signal a reused pid.
    children.lock().unwrap().pids.retain(|&p| p != ctl_pid);
    let (exit, report) = match out {
        Ok((Ok(status), stdout)) => (status.to_string(), stdout.trim().to_string()),
        Ok((Err(e), _)) => (format!("wait failed: {e}"), String::new()),
        Err(_) => ("did not stop within 120 s of --duration; killed".into(), String::new()),
    };

    // Figures.
    let w = s1.at.duration_since(s0.at).as_secs_f64();
    let pct = |ticks: u64| ticks as f64 / tck / w * 100.0;
    let ctl_pct = pct(s1.controller - s0.controller);
    let act_pct = pct(s1.actuators - s0.actuators);
    let bench_pct = pct(s1.bench - s0.bench);
    let d = m1.minus(&m0);
    let per_sec = 1.0 / INTERVAL.as_secs_f64();
    let expected_decisions = (n * queues) as f64 * per_sec;
    let expected_rounds = n as f64 * per_sec;
    let scraped = m1_at.duration_since(m0_at).as_secs_f64();
    let decisions = d.decisions / scraped;
    let triggered = d.count() / scraped;
    let mean = if d.count() > 0.0 { d.latency_sum / d.count() } else { f64::NAN };

    let mut t = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(t, "  {k:<42} {v}");
    };
    println!();
    println!("controller_scale: 1 controller, {n} dry-run actuators x {queues} queues, shadow, interval 100 ms");
    row("machine", format!("{cores} cores, CLK_TCK {tck}"));
    row("controller cores (affinity)", format!("{ctl_cpus} ({ctl_threads} threads)"));
    row("run / warm-up / measured window", format!("{} s / {:.1} s / {w:.1} s", opts.seconds, warm_up.as_secs_f64()));
    row("controller CPU", format!("{ctl_pct:.1} % of one core = {:.1} % of 2 cores", ctl_pct / 2.0));
    row(
        "actuators CPU (all)",
        format!("{act_pct:.1} % of one core ({:.2} % each)", act_pct / actuator_pids.len().max(1) as f64),
    );
    row("benchmark process CPU", format!("{bench_pct:.1} % of one core"));
    row("load average (1 min): before / at the end", format!("{load_before} / {load_end}"));
    row(
        "decisions / s",
        format!("{decisions:.0} (expected {expected_decisions:.0}: {:.1} %)", {
            decisions / expected_decisions * 100.0
        }),
    );
    row(
        "telemetry-triggered rounds / s",
        format!("{triggered:.1} (expected {expected_rounds:.0}: {:.1} %)", triggered / expected_rounds * 100.0),
    );
    row("decision latency p50 (arrival -> decision)", d.fmt_quantile(0.50));
    row("decision latency p90", d.fmt_quantile(0.90));
    row("decision latency p99", d.fmt_quantile(0.99));
    row("decision latency mean", if mean.is_finite() { fmt_secs(mean) } else { "n/a".into() });
    row("decision latency p99, whole run", m1.fmt_quantile(0.99));
    row("telemetry age at the end", fmt_secs(m1.telemetry_age));
    row("controller RSS", format!("{:.1} MiB", ctl_rss as f64 / 1024.0));
    let total_rss: u64 = act_rss.iter().sum();
    row(
        "actuators RSS",
        format!(
            "{:.1} MiB total, {:.1} MiB mean, {:.1} MiB max ({act_threads} threads)",
            total_rss as f64 / 1024.0,
            total_rss as f64 / 1024.0 / act_rss.len().max(1) as f64,
            act_rss.iter().max().copied().unwrap_or(0) as f64 / 1024.0
        ),
    );
    let total_private: u64 = act_private.iter().sum();
    row(
        "actuators private memory (RssAnon)",
        format!(
            "{:.1} MiB total, {:.1} MiB mean",
            total_private as f64 / 1024.0,
            total_private as f64 / 1024.0 / act_private.len().max(1) as f64
        ),
    );
    row("actuators alive at the end", format!("{alive} of {n}"));
    row("controller exit", exit);
    if !report.is_empty() {
        row("controller report", report);
    }
    print!("{t}");
    println!(
        "  (latency quantiles are histogram bucket upper bounds: buckets 10 us x 2^k; CPU from /proc utime+stime)"
    );
    if opts.keep {
        let kept = scratch.keep();
        println!("  scratch directory kept: {}", kept.display());
    }
    drop(actuators);
    Ok(())
}

/// Record the 64-queue telemetry file with the simulator; returns its path.
async fn record(bin: &Path, dir: &Path) -> Result<PathBuf, String> {
    let scenario = dir.join("controller-scale.toml");
    std::fs::write(&scenario, SCENARIO).map_err(|e| e.to_string())?;
    let out = dir.join("recording");
    let res = Command::new(bin)
        .arg("sim")
        .arg("--scenario")
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("run ecn-tuner sim: {e}"))?;
    let file = out.join("telemetry.parquet");
    if !res.status.success() || !file.exists() {
        return Err(format!("ecn-tuner sim failed ({}):\n{}", res.status, String::from_utf8_lossy(&res.stderr)));
    }
    Ok(file)
}

/// A dry-run actuator replaying `telemetry`; its errors (it panics in the helper) become messages.
async fn start_actuator(telemetry: &Path, time_scale: f64) -> Result<Actuator, String> {
    let (file, scale) = (telemetry.display().to_string(), time_scale.to_string());
    let args = ["--backend", "dry-run", "--telemetry", file.as_str(), "--time-scale", scale.as_str()];
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::spawn(async move {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        Actuator::start(&refs).await
    })
    .await
    .map_err(|e| format!("an actuator did not start: {e}"))
}
