//! A faulty network path between a controller and a real actuator: a gRPC server on loopback
//! that forwards every call to the actuator and, on request, loses replies after the actuator
//! acted on them, holds calls back, breaks or delays telemetry streams, or rewrites what the
//! actuator reports. The actuator and the controller stay the real ones; only the path between
//! them misbehaves, as a flaky network or a buggy actuator would.

use crate::{connect, pb, Client};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// What the link does wrong. Counters count down as faults are injected.
#[derive(Debug, Default)]
pub struct Faults {
    /// The replies of this many successful Apply calls that open a confirm window are lost:
    /// the actuator applies the change, the controller hears UNAVAILABLE.
    pub lost_apply_replies: AtomicU32,
    /// The replies of this many Confirm calls are lost, whatever the actuator answered.
    pub lost_confirm_replies: AtomicU32,
    /// This many Confirm calls are held back for `confirm_delay_ms` before they are forwarded.
    pub late_confirms: AtomicU32,
    /// How long a late Confirm is held back.
    pub confirm_delay_ms: AtomicU64,
    /// This many telemetry streams end with an error after `stream_break_after` batches.
    pub broken_streams: AtomicU32,
    /// This many telemetry streams go silent after `stream_break_after` batches, without
    /// failing or ending: a hung actuator.
    pub stalled_streams: AtomicU32,
    /// Batches a broken or stalled stream forwards before it fails or goes silent.
    pub stream_break_after: AtomicU32,
    /// How long every StreamTelemetry call is held back before it is forwarded: a controller
    /// that has connected but not yet opened its stream.
    pub stream_open_delay_ms: AtomicU64,
    /// Every telemetry stream holds each batch back until this many newer ones have arrived: a
    /// controller that reads its stream this far behind the fabric (a backlog, a slow path).
    /// Lowered while a stream is open, the batches held beyond it go at once.
    pub telemetry_lag: AtomicU32,
    /// Telemetry streams opened through the link so far.
    pub streams_opened: AtomicU32,
    /// Bounds reported instead of the actuator's.
    pub bounds: Mutex<Option<pb::Bounds>>,
    /// This many Rollback calls fail with UNAVAILABLE without reaching the actuator: its device
    /// away (a switch's Redis restarting), as the actuator itself would answer.
    pub failed_rollbacks: AtomicU32,
    /// This many Rollback calls are held for `rollback_hold_ms`, then fail as a failed
    /// rollback does: a device that answers too late.
    pub held_rollbacks: AtomicU32,
    /// How long a held Rollback is held.
    pub rollback_hold_ms: AtomicU64,
    /// This many Apply calls that open no confirm window (a controller's telemetry fallbacks)
    /// are refused without reaching the actuator: a device that refuses the write.
    pub refused_fallbacks: AtomicU32,
    /// Apply calls that opened no confirm window so far, refused or not.
    pub fallbacks_seen: AtomicU32,
    /// This many Apply calls that change something (fallbacks or not) are refused without
    /// reaching the actuator: a device that refuses every write.
    pub refused_applies: AtomicU32,
    /// After each lost Confirm reply, this many GetConfig calls fail with UNAVAILABLE without
    /// reaching the actuator: the path stays down for the read-back that follows.
    pub failed_reads_after_lost_confirm: AtomicU32,
    /// After each lost Apply reply, this many GetConfig calls fail as after a lost Confirm.
    pub failed_reads_after_lost_apply: AtomicU32,
    /// How long each of those failing GetConfig calls is held before it fails: a path that
    /// stays down for a while.
    pub failing_read_delay_ms: AtomicU64,
    /// GetConfig calls still to fail (armed by a lost Confirm or Apply reply).
    pub failing_reads: AtomicU32,
    /// This many AcquireWriter calls (lease renewals) are held for `renewal_hold_ms`, then
    /// fail without reaching the actuator (unless the client gave up first): a hung actuator,
    /// as a controller sees it.
    pub held_renewals: AtomicU32,
    /// How long a held AcquireWriter is held.
    pub renewal_hold_ms: AtomicU64,
    /// AcquireWriter calls being held now.
    pub renewals_holding: AtomicU32,
    /// AcquireWriter and Apply calls that reached the link, in order: `"AcquireWriter"` or
    /// `"Apply"`.
    pub calls: std::sync::Mutex<Vec<&'static str>>,
    /// The `grpc-timeout` each AcquireWriter call carried, in order.
    pub renewal_timeouts: std::sync::Mutex<Vec<Option<String>>>,
}

/// Take one from a fault counter; whether there was one.
fn take(counter: &AtomicU32) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

fn lost(what: &str) -> Status {
    Status::unavailable(format!("faulty link: the {what} reply was lost"))
}

/// A running faulty link; it serves until the test process ends.
pub struct FaultyLink {
    /// Where the controller connects.
    pub addr: SocketAddr,
    /// The faults, shared with the serving task.
    pub faults: Arc<Faults>,
}

impl FaultyLink {
    /// Serve on `127.0.0.1:0`, forwarding to the actuator at `upstream` (`http://...`).
    pub async fn start(upstream: &str, faults: Faults) -> FaultyLink {
        let faults = Arc::new(faults);
        let client = connect(upstream).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the faulty link");
        let addr = listener.local_addr().expect("faulty link address");
        let service = Forward { client, faults: faults.clone() };
        tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let server = tonic::transport::Server::builder()
                .add_service(pb::actuator_server::ActuatorServer::new(service))
                .serve_with_incoming(incoming);
            if let Err(e) = server.await {
                eprintln!("faulty link stopped: {e}");
            }
        });
        FaultyLink { addr, faults }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

struct Forward {
    client: Client,
    faults: Arc<Faults>,
}

#[tonic::async_trait]
impl pb::actuator_server::Actuator for Forward {
    async fn get_capabilities(
        &self,
        req: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        let mut caps = self.client.clone().get_capabilities(req.into_inner()).await?.into_inner();
        let bounds = *self.faults.bounds.lock().unwrap();
        if bounds.is_some() {
            caps.bounds = bounds;
        }
        Ok(Response::new(caps))
    }

    async fn get_config(&self, req: Request<pb::GetConfigRequest>) -> Result<Response<pb::Config>, Status> {
        if take(&self.faults.failing_reads) {
            let hold = self.faults.failing_read_delay_ms.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            return Err(Status::unavailable("faulty link: the path is down"));
        }
        self.client.clone().get_config(req.into_inner()).await
    }

    async fn acquire_writer(
        &self,
        req: Request<pb::AcquireWriterRequest>,
    ) -> Result<Response<pb::WriterLease>, Status> {
        self.faults.calls.lock().unwrap().push("AcquireWriter");
        let timeout = req.metadata().get("grpc-timeout").and_then(|v| v.to_str().ok()).map(str::to_string);
        self.faults.renewal_timeouts.lock().unwrap().push(timeout);
        if take(&self.faults.held_renewals) {
            // Counted down however the hold ends: a client that gives up on the call drops it.
            struct Holding<'a>(&'a AtomicU32);
            impl Drop for Holding<'_> {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::SeqCst);
                }
            }
            self.faults.renewals_holding.fetch_add(1, Ordering::SeqCst);
            let _holding = Holding(&self.faults.renewals_holding);
            tokio::time::sleep(Duration::from_millis(self.faults.renewal_hold_ms.load(Ordering::SeqCst))).await;
            return Err(Status::unavailable("faulty link: the renewal was held, and dropped"));
        }
        self.client.clone().acquire_writer(req.into_inner()).await
    }

    async fn release_writer(
        &self,
        req: Request<pb::ReleaseWriterRequest>,
    ) -> Result<Response<pb::ReleaseWriterResponse>, Status> {
        self.client.clone().release_writer(req.into_inner()).await
    }

    async fn apply(&self, req: Request<pb::ApplyRequest>) -> Result<Response<pb::ApplyResponse>, Status> {
        self.faults.calls.lock().unwrap().push("Apply");
        let req = req.into_inner();
        let opens_window = !req.validate_only && req.confirm_within_ms > 0;
        if !req.validate_only && take(&self.faults.refused_applies) {
            return Err(Status::internal("faulty link: the device refused the write"));
        }
        if !req.validate_only && req.confirm_within_ms == 0 {
            self.faults.fallbacks_seen.fetch_add(1, Ordering::SeqCst);
            if take(&self.faults.refused_fallbacks) {
                return Err(Status::failed_precondition("faulty link: the device refused the write"));
            }
        }
        let reply = self.client.clone().apply(req).await?;
        if opens_window && take(&self.faults.lost_apply_replies) {
            let reads = self.faults.failed_reads_after_lost_apply.load(Ordering::SeqCst);
            self.faults.failing_reads.store(reads, Ordering::SeqCst);
            return Err(lost("Apply"));
        }
        Ok(reply)
    }

    async fn confirm(&self, req: Request<pb::ConfirmRequest>) -> Result<Response<pb::ConfirmResponse>, Status> {
        if take(&self.faults.late_confirms) {
            tokio::time::sleep(Duration::from_millis(self.faults.confirm_delay_ms.load(Ordering::SeqCst))).await;
        }
        let reply = self.client.clone().confirm(req.into_inner()).await;
        if take(&self.faults.lost_confirm_replies) {
            let reads = self.faults.failed_reads_after_lost_confirm.load(Ordering::SeqCst);
            self.faults.failing_reads.store(reads, Ordering::SeqCst);
            return Err(lost("Confirm"));
        }
        reply
    }

    async fn rollback(&self, req: Request<pb::RollbackRequest>) -> Result<Response<pb::RollbackResponse>, Status> {
        let held = take(&self.faults.held_rollbacks);
        if held {
            tokio::time::sleep(Duration::from_millis(self.faults.rollback_hold_ms.load(Ordering::SeqCst))).await;
        }
        if held || take(&self.faults.failed_rollbacks) {
            return Err(Status::unavailable("faulty link: the device is away, nothing rolled back"));
        }
        self.client.clone().rollback(req.into_inner()).await
    }

    type StreamTelemetryStream = ReceiverStream<Result<pb::TelemetryBatch, Status>>;

    async fn stream_telemetry(
        &self,
        req: Request<pb::StreamTelemetryRequest>,
    ) -> Result<Response<Self::StreamTelemetryStream>, Status> {
        let delay = self.faults.stream_open_delay_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let mut upstream = self.client.clone().stream_telemetry(req.into_inner()).await?.into_inner();
        self.faults.streams_opened.fetch_add(1, Ordering::SeqCst);
        let after = || self.faults.stream_break_after.load(Ordering::SeqCst);
        let break_after = take(&self.faults.broken_streams).then(after);
        let stall_after = take(&self.faults.stalled_streams).then(after);
        let faults = self.faults.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut forwarded = 0u32;
            let mut held = std::collections::VecDeque::new();
            loop {
                if break_after.is_some_and(|n| forwarded >= n) {
                    let _ = tx.send(Err(Status::unavailable("faulty link: the telemetry stream was reset"))).await;
                    return;
                }
                if stall_after.is_some_and(|n| forwarded >= n) {
                    // Hold the stream open, silent, until the controller lets it go.
                    tx.closed().await;
                    return;
                }
                match upstream.message().await {
                    Ok(Some(batch)) => held.push_back(batch),
                    Ok(None) => return,
                    Err(s) => {
                        let _ = tx.send(Err(s)).await;
                        return;
                    }
                }
                // Read afresh for every batch, so that a test can end the lag: what was held
                // back then goes at once, as a backlog drains.
                let lag = faults.telemetry_lag.load(Ordering::SeqCst) as usize;
                while held.len() > lag {
                    if tx.send(Ok(held.pop_front().expect("a held batch"))).await.is_err() {
                        return;
                    }
                    forwarded += 1;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
