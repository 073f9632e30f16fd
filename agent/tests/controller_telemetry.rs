//! The controller facing bad telemetry: NaN, negative values and a frozen stream lead to the
//! baseline fallback, never to a crash or a wild setting.
//!
//! The actuator here is a scripted gRPC server on a loopback socket: no real backend can be made
//! to emit NaN, so this is the one place a stand-in is needed. The controller is the real
//! `ecn-tuner run` binary talking real gRPC to it.

use ecn_proto::v1 as pb;
use pb::actuator_server::{Actuator, ActuatorServer};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

const BASELINE: (u64, u64, f64) = (400_000, 1_600_000, 0.2); // hpcc-alibaba at 100G

struct Scripted {
    applies: Arc<AtomicU64>,
    /// The telemetry stream's batch `k`.
    batches: fn(u64) -> pb::TelemetryBatch,
    /// How long the first Confirm takes to answer; `confirming` is set as it starts.
    confirm_stall: Duration,
    confirming: Arc<AtomicBool>,
}

impl Default for Scripted {
    fn default() -> Self {
        Scripted { applies: Arc::default(), batches: batch, confirm_stall: Duration::ZERO, confirming: Arc::default() }
    }
}

fn qid(port: &str) -> pb::QueueId {
    pb::QueueId { switch: "leaf0".into(), port: port.into(), queue: 3 }
}

fn ecn(s: (u64, u64, f64)) -> pb::EcnSetting {
    pb::EcnSetting { kmin_bytes: s.0, kmax_bytes: s.1, pmax: s.2 }
}

/// Batch `k`: eth1 turns NaN from batch 10, eth2 negative from batch 10, and from batch 20 the
/// stream freezes (the same timestamp over and over).
fn batch(k: u64) -> pb::TelemetryBatch {
    let ts = 100_000 * k.min(20);
    let mk = |port: &str, avg: f64| pb::TelemetrySample {
        ts_ns: ts,
        id: Some(qid(port)),
        link_bps: 100_000_000_000,
        queue_bytes: 1000,
        queue_bytes_avg: avg,
        queue_bytes_max: 5000,
        tx_bytes: 500_000,
        tx_pkts: 480,
        ecn: Some(ecn((50_000, 100_000, 0.5))),
        ..Default::default()
    };
    let bad = k >= 10;
    pb::TelemetryBatch {
        ts_ns: ts,
        samples: vec![mk("eth1", if bad { f64::NAN } else { 2000.0 }), mk("eth2", if bad { -7.0 } else { 2000.0 })],
    }
}

#[tonic::async_trait]
impl Actuator for Scripted {
    async fn get_capabilities(
        &self,
        _: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        let queues = ["eth1", "eth2"]
            .iter()
            .map(|p| pb::QueueCapability { id: Some(qid(p)), link_bps: 100_000_000_000, pfc_xoff_bytes: 4_000_000 })
            .collect();
        Ok(Response::new(pb::Capabilities {
            backend: "scripted".into(),
            queues,
            buffer_bytes: 32 << 20,
            bounds: Some(pb::Bounds {
                kmin_min_bytes: 1000,
                kmax_max_bytes: 32 << 20,
                pmax_min: 0.0,
                pmax_max: 1.0,
                granularity_bytes: 1,
            }),
            min_telemetry_interval_ns: 100_000,
            telemetry_time_scale: 1.0,
            // As an actuator from before the id: nothing to compare.
            instance_id: String::new(),
        }))
    }
    async fn get_config(&self, _: Request<pb::GetConfigRequest>) -> Result<Response<pb::Config>, Status> {
        let queues = ["eth1", "eth2"]
            .iter()
            .map(|p| pb::QueueSetting { id: Some(qid(p)), setting: Some(ecn((50_000, 100_000, 0.5))) })
            .collect();
        // No telemetry clock (as from an actuator older than the field): staleness by arrival.
        let telemetry_now_ts_ns = 0;
        Ok(Response::new(pb::Config {
            generation: 1,
            confirmed_generation: 1,
            queues,
            confirm_deadline_unix_ms: 0,
            telemetry_now_ts_ns,
        }))
    }
    async fn acquire_writer(&self, r: Request<pb::AcquireWriterRequest>) -> Result<Response<pb::WriterLease>, Status> {
        Ok(Response::new(pb::WriterLease {
            lease_id: format!("lease-{}", r.get_ref().controller_id),
            expires_unix_ms: u64::MAX,
        }))
    }
    async fn release_writer(
        &self,
        _: Request<pb::ReleaseWriterRequest>,
    ) -> Result<Response<pb::ReleaseWriterResponse>, Status> {
        Ok(Response::new(pb::ReleaseWriterResponse {}))
    }
    async fn apply(&self, r: Request<pb::ApplyRequest>) -> Result<Response<pb::ApplyResponse>, Status> {
        for c in &r.get_ref().changes {
            let s = c.setting.as_ref().ok_or_else(|| Status::invalid_argument("missing setting"))?;
            if !(s.pmax.is_finite() && s.kmin_bytes < s.kmax_bytes && s.kmax_bytes < 4_000_000) {
                return Err(Status::invalid_argument(format!("wild setting {s:?}")));
            }
        }
        let g = 2 + self.applies.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(pb::ApplyResponse { generation: g, ..Default::default() }))
    }
    async fn confirm(&self, r: Request<pb::ConfirmRequest>) -> Result<Response<pb::ConfirmResponse>, Status> {
        if !self.confirming.swap(true, Ordering::SeqCst) {
            tokio::time::sleep(self.confirm_stall).await;
        }
        Ok(Response::new(pb::ConfirmResponse { confirmed_generation: r.get_ref().generation }))
    }
    async fn rollback(&self, _: Request<pb::RollbackRequest>) -> Result<Response<pb::RollbackResponse>, Status> {
        Ok(Response::new(pb::RollbackResponse { generation: 1, ..Default::default() }))
    }
    type StreamTelemetryStream = Pin<Box<dyn Stream<Item = Result<pb::TelemetryBatch, Status>> + Send>>;
    async fn stream_telemetry(
        &self,
        _: Request<pb::StreamTelemetryRequest>,
    ) -> Result<Response<Self::StreamTelemetryStream>, Status> {
        let s = async_stream(self.batches);
        Ok(Response::new(Box::pin(s)))
    }
}

/// One batch every 50 ms.
fn async_stream(
    f: impl Fn(u64) -> pb::TelemetryBatch + Send + 'static,
) -> impl Stream<Item = Result<pb::TelemetryBatch, Status>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for k in 1.. {
            if tx.send(Ok(f(k))).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// `ecn-tuner run --target TARGET` in shadow mode on a static policy, then `more` flags, as
/// [`ecn_tuner`] runs it.
fn shadow_run(target: &str, more: &[&str], level: &str) -> tokio::process::Command {
    let shadow = ["run", "--target", target, "--mode", "shadow", "--policy", "static:60KB,120KB,0.5"];
    ecn_tuner(&[&shadow[..], more].concat(), level)
}

/// `ecn-tuner ARGS`, logging at `level`, stdin closed, stdout and stderr piped, killed if the
/// test drops it.
fn ecn_tuner(args: &[&str], level: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ecn-tuner"));
    cmd.args(args)
        .env("ECN_TUNER_LOG", level)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

fn decisions(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Serve `actuator` on a loopback port; its address.
async fn serve(actuator: Scripted) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ActuatorServer::new(actuator))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

async fn run_controller(mode: &str) -> (std::process::Output, Vec<serde_json::Value>, u64) {
    let actuator = Scripted::default();
    let applies = actuator.applies.clone();
    let addr = serve(actuator).await;
    let tmp = tempfile::Builder::new().prefix(&format!("ecn-tuner-ctl-{mode}-")).tempdir().unwrap();
    let dir = tmp.path();
    let log = dir.join("decisions.jsonl");
    let mut args = vec![
        "run".to_string(),
        "--target".into(),
        format!("http://{addr}"),
        "--mode".into(),
        mode.into(),
        "--policy".into(),
        "static:60KB,120KB,0.5".into(),
        "--interval".into(),
        "100ms".into(),
        "--min-dwell".into(),
        "0s".into(),
        "--stale-after".into(),
        "400ms".into(),
        "--duration".into(),
        "2500ms".into(),
        "--decision-log".into(),
        log.display().to_string(),
    ];
    if mode == "enforce" {
        args.push("--allow-writes".into());
    }
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ecn-tuner"))
        .args(&args)
        .env("ECN_TUNER_LOG", "warn")
        .output()
        .await
        .unwrap();
    let d = decisions(&log);
    (out, d, applies.load(Ordering::SeqCst))
}

fn setting_of(v: &serde_json::Value) -> (u64, u64, f64) {
    (v["kmin_bytes"].as_u64().unwrap(), v["kmax_bytes"].as_u64().unwrap(), v["pmax"].as_f64().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_telemetry_falls_back_to_baseline_in_shadow_without_writing() {
    let (out, d, applies) = run_controller("shadow").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(applies, 0, "shadow mode never writes");
    assert!(!d.is_empty());
    let reasons: Vec<&str> = d.iter().map(|x| x["reason"].as_str().unwrap()).collect();
    assert!(reasons.iter().any(|r| r.contains("invalid_telemetry")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("stale_telemetry")), "a frozen stream is stale: {reasons:?}");
    for x in &d {
        assert_eq!(x["mode"], "shadow");
        assert_eq!(x["applied"], false);
        let r = x["reason"].as_str().unwrap();
        if r.contains("invalid_telemetry") || r.contains("stale_telemetry") {
            assert_eq!(setting_of(&x["after_guardrails"]), BASELINE, "{x}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_telemetry_in_enforce_applies_only_bounded_settings() {
    let (out, d, applies) = run_controller("enforce").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(applies >= 2, "the controller applied its policy, then the fallback: {applies}\n{stderr}");
    // The scripted actuator refuses wild settings; no write was refused.
    assert!(!stderr.contains("refused the apply"), "{stderr}");
    // Every applied decision is a valid setting below XOFF.
    for x in d.iter().filter(|x| x["applied"] == true) {
        let (kmin, kmax, pmax) = setting_of(&x["after_guardrails"]);
        assert!(kmin < kmax && kmax < 4_000_000 && (0.0..=1.0).contains(&pmax), "{x}");
    }
    // Each queue's invalid telemetry (NaN on eth1, negative on eth2) was written as the
    // baseline, not only logged.
    for port in ["eth1", "eth2"] {
        let fell_back = d.iter().any(|x| {
            x["queue"] == format!("leaf0/{port}/3")
                && x["applied"] == true
                && x["reason"].as_str().unwrap().contains("invalid_telemetry")
                && setting_of(&x["after_guardrails"]) == BASELINE
        });
        assert!(fell_back, "{port}: no applied fallback to the baseline: {d:?}");
    }
}

/// `--decision-log /dev/stdout | reader`, and the reader goes away: the log was opened to read
/// as well, so the controller held its own pipe's read end, never saw the broken pipe, and
/// once the pipe was full waited in the middle of a round for ever, deaf to SIGTERM and the
/// kill switch. Now the write fails, and the controller stops as for any decision log it
/// cannot write (exit 1, saying so).
#[tokio::test(flavor = "multi_thread")]
async fn a_decision_log_whose_reader_goes_away_stops_the_controller() {
    use tokio::io::AsyncBufReadExt;
    let addr = serve(Scripted::default()).await;
    let target = format!("http://{addr}");
    let more = ["--interval", "100ms", "--duration", "120s", "--decision-log", "/dev/stdout"];
    let mut child = shadow_run(&target, &more, "warn").spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.unwrap().unwrap().unwrap();
    assert!(first.contains("\"reason\""), "{first}");
    drop(lines);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the controller stops once its decision log's reader has gone")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("decision log"), "{stderr}");
}

/// Good telemetry on both queues, but eth2's only from batch 11: the first round changes eth1
/// alone, and eth2's change waits for a round after eth1's is confirmed. Ten batches (500 ms)
/// apart, so that a controller slow to start does not find both ready in one round (two were).
fn eth2_late(k: u64) -> pb::TelemetryBatch {
    let mut b = batch(k.min(9));
    b.ts_ns = 100_000 * k;
    for s in &mut b.samples {
        s.ts_ns = b.ts_ns;
    }
    if k < 11 {
        b.samples.truncate(1);
    }
    b
}

/// SIGTERM while a round is under way (here, held up confirming the change before it): the
/// round's changes are not applied. The stop waited for its Apply, then for the Apply's
/// read-back and its rollback, a call timeout each where the actuator had gone slow.
#[tokio::test(flavor = "multi_thread")]
async fn a_round_under_way_at_a_stop_applies_nothing() {
    let actuator = Scripted { batches: eth2_late, confirm_stall: Duration::from_secs(2), ..Default::default() };
    let (applies, confirming) = (actuator.applies.clone(), actuator.confirming.clone());
    let addr = serve(actuator).await;
    let target = format!("http://{addr}");
    let args = ["run", "--target", &target, "--mode", "enforce", "--allow-writes", "--policy", "static:60KB,120KB,0.5"];
    let dir = tempfile::Builder::new().prefix("ecn-tuner-round-at-stop-").tempdir().unwrap();
    let log = dir.path().join("decisions.jsonl");
    let more = ["--interval", "100ms", "--min-dwell", "0s", "--health-window", "20", "--duration", "60s"];
    let log_arg = ["--decision-log", log.to_str().unwrap()];
    let child = ecn_tuner(&[&args[..], &more, &log_arg].concat(), "info").spawn().unwrap();
    let started = std::time::Instant::now();
    while !confirming.load(Ordering::SeqCst) {
        assert!(started.elapsed() < Duration::from_secs(30), "no change was confirmed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = applies.load(Ordering::SeqCst);
    // SAFETY: kill(2) on the child this test started and has not yet waited for.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(before, 1, "eth1's change alone before the stop: {stderr}");
    assert_eq!(applies.load(Ordering::SeqCst), before, "an Apply after SIGTERM: {stderr}");
    // The change the stop held back is in the decision log, as not applied.
    let held = decisions(&log).into_iter().filter(|d| d["queue"] == "leaf0/eth2/3" && d["applied"] == false);
    let reasons: Vec<String> = held.map(|d| d["reason"].as_str().unwrap().to_string()).collect();
    assert!(reasons.iter().any(|r| r.contains("not applied: the controller is stopping")), "{reasons:?}");
}

/// `--decision-log /dev/stdout > FILE`: the decisions, then the report, each line whole. The
/// log, opened by its path to append, wrote at the end while the report went from fd 1's own
/// offset, over the first decisions. And `>> FILE` after a script's own line: the file is the
/// user's, written as it is (it was refused, exit 2, its first line being no decision).
#[tokio::test(flavor = "multi_thread")]
async fn decisions_and_the_report_share_a_stdout_file() {
    let addr = serve(Scripted::default()).await;
    let target = format!("http://{addr}");
    let dir = tempfile::Builder::new().prefix("ecn-tuner-stdout-file-").tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let more = ["--interval", "100ms", "--duration", "2s", "--decision-log", "/dev/stdout"];
    for script in [None, Some("{\"started\":true}\n")] {
        let file = match script {
            None => std::fs::File::create(&path).unwrap(),
            Some(line) => {
                std::fs::write(&path, line).unwrap();
                std::fs::OpenOptions::new().append(true).open(&path).unwrap()
            }
        };
        let out = shadow_run(&target, &more, "warn").stdout(file).spawn().unwrap().wait_with_output().await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
        let (report, mut logged) = lines.split_last().unwrap();
        if script.is_some() {
            assert_eq!(logged[0]["started"], true, "{text}");
            logged = &logged[1..];
        }
        assert!(report["rounds"].as_u64().unwrap() > 0, "{text}");
        assert!(!logged.is_empty() && logged.iter().all(|d| d["reason"].is_string()), "{text}");
    }
}

/// `--decision-log /dev/stdout` into a pipe its reader made non-blocking: a reader that pauses
/// is waited for (the write's EAGAIN stopped the controller, exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_non_blocking_stdout_is_waited_on() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let addr = serve(Scripted::default()).await;
    let target = format!("http://{addr}");
    let (mut reader, writer) = std::io::pipe().unwrap();
    // SAFETY: fcntl on a pipe descriptor this test holds: non-blocking, and a page long.
    unsafe {
        let flags = libc::fcntl(writer.as_raw_fd(), libc::F_GETFL);
        assert!(libc::fcntl(writer.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0);
        assert!(libc::fcntl(writer.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) > 0);
    }
    let more = ["--interval", "100ms", "--duration", "4s", "--decision-log", "/dev/stdout"];
    let child = shadow_run(&target, &more, "warn").stdout(writer).spawn().unwrap();
    // The pipe fills meanwhile: the report alone is near a page.
    let read = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        let mut text = String::new();
        reader.read_to_string(&mut text).unwrap();
        text
    });
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    let text = read.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()), "{text}");
    assert!(text.lines().last().unwrap().contains("\"rounds\""), "{text}");
}

/// A decision log into a FIFO whose reader stays but reads nothing (a hung log shipper, `cat
/// fifo | less` left unread): once the pipe was full, the control loop waited in the middle of
/// a round, deaf to SIGTERM and the kill switch. Lines now wait in memory; SIGTERM stops the
/// controller, which says what it could not write (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_decision_log_nobody_reads_holds_no_stop() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::Builder::new().prefix("ecn-tuner-unread-log-").tempdir().unwrap();
    let fifo = dir.path().join("decisions.fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
    // The smallest pipe, a page: full after a few decisions.
    // SAFETY: F_SETPIPE_SZ on a pipe descriptor this test holds.
    assert!(unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) } > 0);
    // The embedded fabric's 24 queues: a would-be change each at the first round, 13 KB.
    let more = ["--interval", "100ms", "--duration", "120s", "--decision-log", fifo.to_str().unwrap()];
    let child = shadow_run("sim", &more, "info").spawn().unwrap();
    // Wait for the first lines; the rest of the round's (13 KB) cannot fit.
    let started = std::time::Instant::now();
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes the byte count into `queued`.
        assert_eq!(unsafe { libc::ioctl(reader.as_raw_fd(), libc::FIONREAD, &mut queued) }, 0);
        if queued > 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no decision came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // SAFETY: kill(2) on the child this test started and has not yet waited for.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("SIGTERM stops a controller whose decision log is not read")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("decisions not written"), "{stderr}");
    drop(reader);
}
