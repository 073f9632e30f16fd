//! # ecn-tests
//!
//! End-to-end tests across crates, over real sockets: they start `ecn-tuner` as a child
//! process (as an operator would) and talk gRPC to it on loopback. This library holds the
//! shared helpers; the tests are in `tests/`. [`sonic`] runs a `redis-server` shaped like a SONiC
//! switch for the SONiC backend's tests.
//!
//! The `ecn-tuner` binary must be built first (`cargo build -p ecn-agent`, or
//! `scripts/test`, which builds the whole workspace before testing): a test cannot depend on
//! another package's binary through Cargo.

use serde_json::Value;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

pub use ecn_proto::v1 as pb;

pub mod faulty_link;
pub mod frozen_relay;
pub mod ports;
pub mod sonic;
pub mod telemetry_fixtures;

/// How long a test waits for a fabric behind an actuator to reach a state. The sim backend
/// falls behind its time scale on a loaded machine, so tests wait for states, not for
/// wall-clock durations; only a hang reaches this.
pub const FABRIC_PATIENCE: Duration = Duration::from_secs(300);

/// A plain-text gRPC client of the actuator.
pub type Client = pb::actuator_client::ActuatorClient<Channel>;

/// How long a child gets to bind its socket (a cold start on a loaded machine is slow).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Path of the `ecn-tuner` binary in the target directory the tests were built into:
/// `<target>/<profile>/deps/<test>-<hash>` → `<target>/<profile>/ecn-tuner`, unless
/// `ECN_TUNER_BIN` names another one (checkouts that share a target directory overwrite each
/// other's binary there).
pub fn ecn_tuner_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("ECN_TUNER_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("path of the test executable");
    let mut dir = exe.parent().expect("test executable directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join(format!("ecn-tuner{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} does not exist: build it first with `cargo build -p ecn-agent` (scripts/test does this)",
        bin.display()
    );
    bin
}

/// A command running [`ecn_tuner_bin`], the shipped models looked up in this checkout: a
/// developer's `ECN_TUNER_MODELS` pointing at another checkout's models made the tests that
/// compare with this checkout's files fail. SIGHUP is back to its default action in the child:
/// a suite started under `nohup` (its SIGHUP ignored, and inherited) had its commands keep
/// ignoring it, as they do, and the tests that stop one with SIGHUP failed.
pub fn ecn_tuner_command() -> Command {
    let mut cmd = Command::new(ecn_tuner_bin());
    cmd.env_remove("ECN_TUNER_MODELS");
    // SAFETY: signal(2) is async-signal-safe, and this closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd
}

/// For benchmarks: `<target>/release/ecn-tuner`, next to the benchmark's executable
/// (`<target>/release/deps/<bench>-<hash>`). Under Cargo (`$CARGO` set) it is built first, a
/// no-op when fresh, so that the figures are those of the current source; a benchmark cannot
/// depend on another package's binary through Cargo.
pub fn release_ecn_tuner_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("path of the benchmark executable: {e}"))?;
    let mut dir = exe.parent().ok_or("benchmark executable directory")?.to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join(format!("ecn-tuner{}", std::env::consts::EXE_SUFFIX));
    let build = "cargo build --release -p ecn-agent --bin ecn-tuner";
    let cargo = std::env::var_os("CARGO");
    let release = dir.file_name().is_some_and(|n| n == "release");
    let (Some(cargo), true, Some(target)) = (cargo, release, dir.parent()) else {
        return if bin.exists() {
            Ok(bin)
        } else {
            Err(format!("{} does not exist: build it first ({build})", bin.display()))
        };
    };
    eprintln!("building ecn-tuner ({build})");
    let ok = std::process::Command::new(cargo)
        .args(["build", "--release", "-p", "ecn-agent", "--bin", "ecn-tuner"])
        .env("CARGO_TARGET_DIR", target)
        .status()
        .is_ok_and(|s| s.success());
    if ok && bin.exists() {
        Ok(bin)
    } else {
        Err(format!("could not build {}: run `{build}` with the same CARGO_TARGET_DIR and rerun", bin.display()))
    }
}

/// The SHA-256 of a file, lowercase hex, computed here, apart from the code under test, to
/// check the digests it records.
pub fn sha256_hex(path: impl AsRef<Path>) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(std::fs::read(path).expect("a file to digest")).iter().map(|b| format!("{b:02x}")).collect()
}

/// An `ecn-tuner actuator` child process, killed when dropped.
pub struct Actuator {
    /// The bound address, read from the first stdout line.
    pub addr: SocketAddr,
    /// The journal file (`--journal`), inside [`Actuator::dir`].
    pub journal: PathBuf,
    /// The child's stderr (its logs).
    pub log: PathBuf,
    /// A scratch directory for this actuator, removed on drop.
    pub dir: TempDir,
    child: Child,
    args: Vec<String>,
}

impl Actuator {
    /// Start `ecn-tuner actuator ARGS`, on `127.0.0.1:0` and with a journal in a scratch
    /// directory unless `args` say otherwise. Panics with the child's log if it does not start.
    pub async fn start(args: &[&str]) -> Actuator {
        let dir = tempfile::Builder::new().prefix("ecn-actuator-").tempdir().expect("scratch directory");
        Self::start_in(dir, args).await
    }

    /// As [`Actuator::start`], in a given scratch directory (to put files there first).
    pub async fn start_in(dir: TempDir, args: &[&str]) -> Actuator {
        let journal = dir.path().join("journal.jsonl");
        let log = dir.path().join("actuator.log");
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (child, addr) = Self::spawn(&args, "127.0.0.1:0", &journal, &log).await.unwrap_or_else(|e| panic!("{e}"));
        Actuator { addr, journal, log, dir, child, args }
    }

    /// Stop the child with SIGTERM, as an operator restarting the service would, and start it
    /// again after `gap` with the same arguments, address and journal (its log goes on in the
    /// same file).
    pub async fn restart(&mut self, gap: Duration) {
        let args = self.args.clone();
        self.restart_with(gap, &args).await
    }

    /// As [`Actuator::restart`], with other arguments (the same address and journal).
    pub async fn restart_with<S: AsRef<str>>(&mut self, gap: Duration, args: &[S]) {
        self.args = args.iter().map(|a| a.as_ref().to_string()).collect();
        send_signal(self.child.id(), "TERM");
        let stopped = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        assert!(matches!(stopped, Ok(Ok(s)) if s.success()), "the actuator did not stop cleanly: {stopped:?}");
        tokio::time::sleep(gap).await;
        // The port was the system's pick: another process may hold it a moment (a client's
        // connection from it, another test's listener). Tried again for a while.
        let mut tries = 0;
        let (child, addr) = loop {
            match Self::spawn(&self.args, &self.addr.to_string(), &self.journal, &self.log).await {
                Ok(started) => break started,
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(addr, self.addr);
        self.child = child;
    }

    async fn spawn(args: &[String], listen: &str, journal: &Path, log: &Path) -> Result<(Child, SocketAddr), String> {
        let mut cmd = ecn_tuner_command();
        cmd.arg("actuator").args(args);
        if !args.iter().any(|a| a == "--listen") {
            cmd.args(["--listen", listen]);
        }
        if !args.iter().any(|a| a == "--journal") {
            cmd.arg("--journal").arg(journal);
        }
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(log_file)).kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn ecn-tuner");
        let stdout = child.stdout.take().expect("child stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
        let line = match first {
            Ok(Ok(Some(l))) => l,
            other => {
                return Err(format!(
                    "ecn-tuner actuator {args:?} did not start ({other:?}); its log:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                ))
            }
        };
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first stdout line: {line:?}"));
        // Keep the pipe drained so the child never blocks on stdout.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((child, addr))
    }

    /// The child's process id (`None` once it has been reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The arguments it runs with (after `actuator`).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A new plain-text client.
    pub async fn client(&self) -> Client {
        connect(&self.url()).await
    }

    /// The journal lines so far, parsed.
    pub fn journal(&self) -> Vec<Value> {
        read_json_lines(&self.journal)
    }

    /// Whether the journal's last event is a confirm: a change was made and none is pending.
    pub fn last_change_confirmed(&self) -> bool {
        self.journal().last().is_some_and(|e| e["event"] == "confirm")
    }

    /// Wait until the journal holds an event of `kind` (`apply`, `revert`, ...); the journal
    /// then. Panics after `timeout`.
    pub async fn wait_for_event(&self, kind: &str, timeout: Duration) -> Vec<Value> {
        eventually(&format!("a {kind} in the journal"), timeout, || {
            let journal = self.journal();
            async move { (!events(&journal, kind).is_empty()).then_some(journal) }
        })
        .await
    }

    /// Wait until the actuator's telemetry clock (simulated time, for the sim backend) reaches
    /// `ts_ns`, reading its telemetry stream. Panics after `timeout` or if the stream ends.
    pub async fn wait_for_telemetry_time(&self, ts_ns: u64, timeout: Duration) {
        let mut client = self.client().await;
        let watch = async {
            let mut stream = telemetry(&mut client).await;
            while let Some(batch) = stream.message().await.expect("a telemetry batch") {
                if batch.ts_ns >= ts_ns {
                    return;
                }
            }
            panic!("the telemetry stream ended before {ts_ns} ns");
        };
        let reached = tokio::time::timeout(timeout, watch).await;
        assert!(reached.is_ok(), "timed out after {timeout:?} waiting for telemetry time {ts_ns} ns");
    }

    /// The child's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Start `ecn-tuner run` against this actuator as controller `name`, with `args` after the
    /// target. Its decision log (returned) and its stderr (`NAME.log`) go into [`Actuator::dir`];
    /// stdout is piped.
    pub fn controller(&self, name: &str, args: &[&str]) -> (Child, PathBuf) {
        self.controller_at(name, &self.url(), args)
    }

    /// As [`Actuator::controller`], with the controller pointed at `target` instead (a
    /// [`faulty_link::FaultyLink`] in front of this actuator).
    pub fn controller_at(&self, name: &str, target: &str, args: &[&str]) -> (Child, PathBuf) {
        let log = self.decision_log(name);
        let stderr = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let child = ecn_tuner_command()
            .args(["run", "--target", target, "--controller-id", name, "--decision-log"])
            .arg(&log)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        (child, log)
    }

    /// Run a controller as [`Actuator::controller`] does, wait for it to end and expect success
    /// (its log in the panic message otherwise); returns its decision log's path.
    pub async fn controller_to_end(&self, name: &str, args: &[&str]) -> PathBuf {
        let (child, log) = self.controller(name, args);
        let out = child.wait_with_output().await.unwrap();
        assert!(out.status.success(), "controller {name} failed: {}", self.controller_log(name));
        log
    }

    /// Run a controller as [`Actuator::controller`] does until `done` (polled every 100 ms)
    /// returns `Some`, then stop it with SIGTERM and expect a clean exit; returns its decision
    /// log's path and what `done` returned.
    ///
    /// Waiting for the simulated fabric to reach a state, not for a wall-clock `--duration`, keeps
    /// a test right on a machine of any speed: the sim backend falls behind its time scale on a
    /// loaded machine, and a slow one only takes longer. Panics, with the controller's log, if it
    /// exits first or `done` does not hold within `timeout`.
    pub async fn controller_until<T, F, Fut>(
        &self,
        name: &str,
        args: &[&str],
        what: &str,
        timeout: Duration,
        done: F,
    ) -> (PathBuf, T)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        self.controller_until_at(name, &self.url(), args, what, timeout, done).await
    }

    /// As [`Actuator::controller_until`], with the controller pointed at `target` instead (a
    /// [`faulty_link::FaultyLink`] in front of this actuator).
    pub async fn controller_until_at<T, F, Fut>(
        &self,
        name: &str,
        target: &str,
        args: &[&str],
        what: &str,
        timeout: Duration,
        mut done: F,
    ) -> (PathBuf, T)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let (mut child, log) = self.controller_at(name, target, args);
        let deadline = Instant::now() + timeout;
        let value = loop {
            if let Some(v) = done().await {
                break v;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("controller {name} ended ({status}) before {what}: {}", self.controller_log(name));
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; controller {name}: {}",
                self.controller_log(name)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        self.stop_controller(name, child).await;
        (log, value)
    }

    /// Stop the controller started as `name` with SIGTERM, as an operator would, and expect a
    /// clean exit (its log in the panic message otherwise).
    pub async fn stop_controller(&self, name: &str, mut child: Child) {
        let pid = child.id();
        terminate(pid);
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        let ok = matches!(status, Ok(Ok(s)) if s.success());
        // A controller that hangs on its way out says where each of its threads waits.
        let threads = if status.is_err() { pid.map(thread_states).unwrap_or_default() } else { String::new() };
        assert!(ok, "controller {name} did not stop cleanly ({status:?}){threads}: {}", self.controller_log(name));
    }

    /// The decision log of the controller started as `name` by [`Actuator::controller`].
    pub fn decision_log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}-decisions.jsonl"))
    }

    /// The stderr so far of the controller started as `name` by [`Actuator::controller`].
    pub fn controller_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Ask the child to stop (SIGTERM) and wait for it: its exit code and final journal.
    pub async fn stop(self) -> (Option<i32>, Vec<Value>) {
        self.stop_with("TERM").await
    }

    /// As [`Actuator::stop`], with the signal `name` (as [`send_signal`] takes it).
    pub async fn stop_with(mut self, name: &str) -> (Option<i32>, Vec<Value>) {
        send_signal(self.child.id(), name);
        let code = match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => None,
        };
        (code, self.journal())
    }
}

/// Each thread of process `pid`: its name, state and the kernel function it waits in
/// (`/proc/PID/task/*/{comm,stat,wchan}`), one per line; empty where /proc cannot tell.
fn thread_states(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return String::new() };
    let mut out = String::from("\nthreads (name, state, wait channel):");
    for task in tasks.flatten() {
        let read = |f: &str| std::fs::read_to_string(task.path().join(f)).unwrap_or_default().trim().to_string();
        let state = stat_state(&read("stat")).unwrap_or('?');
        out.push_str(&format!("\n  {} {state} {}", read("comm"), read("wchan")));
    }
    out
}

/// The state of a thread from its `/proc/PID/task/TID/stat` line, `tid (comm) S ...`: the
/// field after the last parenthesis (a thread's name may hold any); `None` for no such line.
fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// Ask the process `pid` (if it still runs) to stop, with SIGTERM.
fn terminate(pid: Option<u32>) {
    send_signal(pid, "TERM");
}

/// Send the process `pid` (if it still runs) the signal `name` (`TERM`, `USR1`, `INT`, `STOP`,
/// `CONT`): the
/// standard library can only SIGKILL. `kill(2)` itself, not the `kill` utility, whose fork a
/// loaded machine can refuse, leaving a test to wait for a stop it never asked for.
pub fn send_signal(pid: Option<u32>, name: &str) {
    let Some(pid) = pid else { return };
    let signal = match name {
        "TERM" => libc::SIGTERM,
        "USR1" => libc::SIGUSR1,
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        other => panic!("send_signal: no signal {other}"),
    };
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } != 0 {
        let e = std::io::Error::last_os_error();
        // ESRCH: the process is gone already, which is what the signal asked for.
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "kill -{name} {pid}: {e}");
    }
}

/// SIGSTOP `pid` and wait until every one of its threads has stopped: a hung process. The
/// kernel wakes one thread to take the signal, and the others go on until it has run; on a
/// loaded machine an actuator still answered a call sent after `kill -STOP` had returned.
pub fn stop_process(pid: Option<u32>) {
    send_signal(pid, "STOP");
    let Some(pid) = pid else { return };
    let running = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
        tasks
            .flatten()
            .filter(|t| {
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                !matches!(stat_state(&stat), None | Some('T' | 't' | 'Z' | 'X'))
            })
            .count()
    };
    let since = std::time::Instant::now();
    while running() > 0 {
        assert!(since.elapsed() < Duration::from_secs(30), "process {pid}: threads still running 30 s after SIGSTOP");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The actuator's telemetry stream, at the interval it samples.
pub async fn telemetry(c: &mut Client) -> tonic::Streaming<pb::TelemetryBatch> {
    c.stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 0 }).await.expect("StreamTelemetry").into_inner()
}

/// Connect a plain-text client, retrying briefly (the server is up once its address is
/// printed, but a loaded machine may be slow to accept).
pub async fn connect(url: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Client::connect(url.to_string()).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("cannot connect to {url}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Every line of a JSON-lines file (an actuator journal, a controller decision log), parsed; an
/// absent file has none. A last line without its newline is one being written while the file
/// is read (a write to a file is not atomic against a read, as one to a pipe is): left out.
pub fn read_json_lines(path: &Path) -> Vec<Value> {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("journal line is not JSON ({e}): {l}")))
        .collect()
}

/// Every setting a decision log says was applied (`after_guardrails` of the lines with
/// `applied: true`) has 1 KB <= Kmin < Kmax <= `kmax_max_bytes`.
pub fn assert_applied_within_bounds(log: &Path, kmax_max_bytes: u64) {
    for x in read_json_lines(log).iter().filter(|x| x["applied"] == true) {
        let a = &x["after_guardrails"];
        let (kmin, kmax) = (a["kmin_bytes"].as_u64().unwrap(), a["kmax_bytes"].as_u64().unwrap());
        assert!(kmin >= 1000 && kmin < kmax && kmax <= kmax_max_bytes, "{x}");
    }
}

/// `run` flags for a controller in enforce mode that writes `policy`, deciding every 200 ms,
/// followed by `extra` (lease, dwell, health window, duration).
pub fn enforce_flags<'a>(policy: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec!["--mode", "enforce", "--allow-writes", "--policy", policy, "--interval", "200ms"];
    flags.extend_from_slice(extra);
    flags
}

/// The `reason` of every decision in a controller's decision log.
pub fn decision_reasons(log: &Path) -> Vec<String> {
    let reason =
        |d: &Value| d["reason"].as_str().unwrap_or_else(|| panic!("a decision without a reason: {d}")).to_string();
    read_json_lines(log).iter().map(reason).collect()
}

/// Journal lines of one event kind.
pub fn events<'a>(journal: &'a [Value], kind: &str) -> Vec<&'a Value> {
    journal.iter().filter(|e| e["event"] == kind).collect()
}

/// Poll `f` until it returns `Some`, or panic after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run `ecn-tuner ARGS` to completion; (exit code, stdout, stderr).
pub async fn run_cli(args: &[&str]) -> (Option<i32>, String, String) {
    run_cli_within(args, START_TIMEOUT).await
}

/// [`run_cli`] for long jobs: `hang_guard` only stops a run that would never end, so it must
/// leave room for a loaded machine, not measure speed.
pub async fn run_cli_within(args: &[&str], hang_guard: Duration) -> (Option<i32>, String, String) {
    run_cli_with_env(args, &[], hang_guard).await
}

/// [`run_cli_within`] with these environment variables set for the process.
pub async fn run_cli_with_env(
    args: &[&str],
    env: &[(&str, &str)],
    hang_guard: Duration,
) -> (Option<i32>, String, String) {
    let mut cmd = ecn_tuner_command();
    cmd.args(args).envs(env.iter().copied()).stdin(Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(hang_guard, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("ecn-tuner {args:?} did not finish within {hang_guard:?}"))
        .expect("run ecn-tuner");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// A queue-setting change for a request.
pub fn change(id: &pb::QueueId, kmin: u64, kmax: u64, pmax: f64) -> pb::QueueSetting {
    pb::QueueSetting {
        id: Some(id.clone()),
        setting: Some(pb::EcnSetting { kmin_bytes: kmin, kmax_bytes: kmax, pmax }),
    }
}

/// Send `changes` under `lease_id` and check that the actuator refuses the whole set as
/// `InvalidArgument`, with a message that names the offending `queue` and `field`.
pub async fn assert_apply_refused(
    c: &mut Client,
    lease_id: &str,
    changes: Vec<pb::QueueSetting>,
    queue: &str,
    field: &str,
) {
    let e = c
        .apply(pb::ApplyRequest { lease_id: lease_id.into(), changes, ..Default::default() })
        .await
        .expect_err("a bad set must be refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains(queue), "message names the queue {queue}: {}", e.message());
    assert!(e.message().contains(field), "message names the field {field}: {}", e.message());
}

/// The colours `eval` and `train` draw series in, in order (matplotlib's "tab10"), as
/// `agent/src/plot.rs` lists them.
pub const SERIES_COLOURS: [[u8; 3]; 3] = [[31, 119, 180], [255, 127, 14], [44, 160, 44]];

/// A chart's size in pixels and how many of its pixels are each of [`SERIES_COLOURS`]: a
/// chart whose series were not drawn has none of their colours, whatever its axes show.
pub fn chart_pixels(path: &Path) -> ((u32, u32), [usize; 3]) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap_or_else(|e| panic!("{}: not a PNG: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(frame.bit_depth, png::BitDepth::Eight, "{}", path.display());
    let channels = frame.color_type.samples();
    assert!(channels >= 3, "{}: {:?}", path.display(), frame.color_type);
    let mut counts = [0; 3];
    for px in buf[..frame.buffer_size()].chunks_exact(channels) {
        if let Some(i) = SERIES_COLOURS.iter().position(|c| px[..3] == c[..]) {
            counts[i] += 1;
        }
    }
    ((frame.width, frame.height), counts)
}
