//! The actuator: the gRPC server (`ecn_tuner.v1.Actuator`) that owns a fabric's ECN settings
//! and enforces safety on the switch side, whatever the controller sends.
//!
//! - [`backend`]: what the server needs from a device, and its implementations: [`sim`] (a
//!   simulated fabric in scaled wall-clock time), [`dry_run`] (settings in memory, telemetry
//!   only from a recording, see [`replay`]) and [`sonic`] (a SONiC switch through its Redis
//!   databases);
//! - [`service`]: the gRPC service, generic over the backend: lease, validation,
//!   generations and commit-confirm, journal;
//! - [`validate`], [`ledger`], [`lease`], [`journal`]: the rules, each unit-tested alone;
//! - [`security`]: loopback by default, TLS and a bearer token otherwise;
//! - [`telemetry`], [`pacer`]: telemetry conversion and coarsening, scaled-time pacing.
//!
//! Start one with [`serve`] (any backend), [`serve_sim`], [`serve_dry_run`] or [`serve_sonic`];
//! each returns an [`ActuatorHandle`] once the socket is bound.

pub mod admission;
pub mod backend;
pub mod dry_run;
pub mod incoming;
pub mod journal;
pub mod lease;
pub mod ledger;
pub mod pacer;
pub mod replay;
pub mod security;
pub mod service;
pub mod sim;
pub mod sonic;
pub mod telemetry;
pub mod validate;

pub use backend::Backend;
pub use dry_run::{DryRunBackend, DryRunOptions};
pub use security::TlsFiles;
pub use service::ActuatorService;
pub use sim::{BadWrite, SimBackend, SimControl, SimOptions, StormSpec};
pub use sonic::{SonicBackend, SonicOptions};

use crate::error::CliError;
use ecn_proto::v1::actuator_server::ActuatorServer;
use journal::Journal;
use security::BearerAuth;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// Default `--listen`: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";

/// How long a stopping server waits for open calls before it drops them.
const GRACE: Duration = Duration::from_secs(5);

/// Why an actuator could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ActuatorError {
    /// A flag, file or option is wrong (exit code 2).
    #[error("{0}")]
    BadInput(String),
    /// Anything else (exit code 1).
    #[error("{0}")]
    Failed(String),
}

impl From<ActuatorError> for CliError {
    fn from(e: ActuatorError) -> CliError {
        match e {
            ActuatorError::BadInput(m) => CliError::BadInput(m),
            ActuatorError::Failed(m) => CliError::Failed(m),
        }
    }
}

/// Where and how to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// Address to bind; port 0 picks a free port (see [`ActuatorHandle::local_addr`]).
    pub listen: SocketAddr,
    /// Append journal lines here.
    pub journal: Option<PathBuf>,
    /// Serve over TLS with this certificate and key.
    pub tls: Option<TlsFiles>,
    /// Require `authorization: Bearer <token>` on every call.
    pub token: Option<String>,
}

impl ServeOptions {
    /// Plain gRPC on `listen`, no journal, no TLS, no token (loopback only).
    pub fn new(listen: SocketAddr) -> ServeOptions {
        ServeOptions { listen, journal: None, tls: None, token: None }
    }

    /// Loopback on a free port: what an in-process actuator for `--target sim` wants.
    pub fn loopback() -> ServeOptions {
        ServeOptions::new(SocketAddr::from(([127, 0, 0, 1], 0)))
    }
}

/// A running actuator. Dropping it stops the server (pending changes revert).
pub struct ActuatorHandle {
    addr: SocketAddr,
    tls: bool,
    stop: watch::Sender<bool>,
    /// Ends the grace for open calls early (a second signal).
    hurry: Arc<Notify>,
    task: Option<JoinHandle<Result<(), ActuatorError>>>,
    sim: Option<SimControl>,
}

impl ActuatorHandle {
    /// The bound address (the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A URL a client can connect to: `http://ADDR`, or `https://ADDR` with TLS.
    pub fn url(&self) -> String {
        format!("{}://{}", if self.tls { "https" } else { "http" }, self.addr)
    }

    /// In-process controls of the simulated fabric, for a `sim` backend.
    pub fn sim(&self) -> Option<&SimControl> {
        self.sim.as_ref()
    }

    /// Wait until the server stops by itself (an error), without asking it to.
    pub async fn finished(&mut self) -> Result<(), ActuatorError> {
        match self.task.as_mut() {
            Some(t) => {
                let r = t.await.map_err(|e| ActuatorError::Failed(format!("actuator task: {e}")))?;
                self.task = None;
                r
            }
            None => std::future::pending().await,
        }
    }

    /// What ends a stop's grace for open calls at once, when notified: the revert of an
    /// unconfirmed change and the backend's stop still run.
    pub fn hurry(&self) -> Arc<Notify> {
        self.hurry.clone()
    }

    /// Stop serving: open calls get a grace period, an unconfirmed change reverts (and is
    /// journaled), the backend stops.
    pub async fn shutdown(mut self) -> Result<(), ActuatorError> {
        let _ = self.stop.send(true);
        match self.task.take() {
            Some(t) => t.await.map_err(|e| ActuatorError::Failed(format!("actuator task: {e}")))?,
            None => Ok(()),
        }
    }
}

impl Drop for ActuatorHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Without a journal, an actuator restarted after a crash takes the change it finds on a
/// device that keeps changes for confirmed settings, whether or not anyone ever checked them.
fn journal_required(backend: &str) -> ActuatorError {
    ActuatorError::BadInput(format!(
        "--journal: required with the {backend} backend; the device keeps a change across an actuator restart, \
         and only the journal tells the next actuator that one was left unconfirmed"
    ))
}

/// Serve `backend` until the handle is shut down or dropped.
///
/// Refuses (as bad input) a non-loopback address without both TLS and a token, unreadable TLS
/// files, an unwritable journal, and, for a device that keeps changes across restarts
/// ([`Backend::keeps_changes_across_restarts`]), no journal or one ending on an unconfirmed
/// change or on a device write in doubt. Returns once the socket is bound.
pub async fn serve<B: Backend>(backend: B, opts: ServeOptions) -> Result<ActuatorHandle, ActuatorError> {
    security::check_exposure(opts.listen, opts.tls.is_some(), opts.token.is_some())?;
    let tls = opts.tls.as_ref().map(TlsFiles::load).transpose()?;
    let journal = match &opts.journal {
        Some(p) => Journal::open(p).map_err(|e| {
            let said = format!("--journal {}: {e}", p.display());
            if crate::line_files::out_of_space(&e) {
                ActuatorError::Failed(said)
            } else {
                ActuatorError::BadInput(said)
            }
        })?,
        None if backend.keeps_changes_across_restarts() => {
            return Err(journal_required(&backend.capabilities().backend))
        }
        None => Journal::none(),
    };
    // A journal is one device's history: generations, and what a restart may find unconfirmed,
    // mean nothing for another (a path reused by mistake).
    let ours: std::collections::BTreeSet<&str> =
        backend.capabilities().queues.iter().map(|q| q.key.switch.as_str()).collect();
    if !journal.switches().is_empty() && !journal.switches().iter().any(|s| ours.contains(s.as_str())) {
        return Err(ActuatorError::BadInput(format!(
            "--journal {}: its events are for {:?}, and this actuator's device is {:?}; a journal belongs to one \
             device: give this one a journal of its own",
            opts.journal.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            journal.switches(),
            ours
        )));
    }
    // A journal that ends with the device possibly holding a change nobody confirmed: an apply
    // whose confirm or revert never came, or a failed write that might still have landed.
    let left_behind = match (journal.unconfirmed_at_end(), journal.in_doubt_at_end()) {
        (Some((generation, confirmed)), _) => Some(format!(
            "generation {generation} was applied and never confirmed or reverted (confirmed: {confirmed}); the \
             previous actuator stopped in between"
        )),
        (None, Some(generation)) => Some(format!(
            "the device write of generation {generation} failed without an answer, and the previous actuator \
             stopped before it could tell whether that write landed or put the settings before it back"
        )),
        (None, None) => None,
    };
    if let (Some(what), true) = (left_behind, backend.keeps_changes_across_restarts()) {
        let p = opts.journal.as_ref().expect("only a file has a past").display();
        return Err(ActuatorError::BadInput(format!(
            "--journal {p}: {what}, so the {} device may still hold that change. Undo everything with `ecn-tuner \
             sonic restore`, or keep the switch as it is; then start with a new journal",
            backend.capabilities().backend
        )));
    }
    let listener = TcpListener::bind(opts.listen)
        .await
        // An address in use or not this host's: the flag's to fix, as `run --metrics`'s is.
        .map_err(|e| ActuatorError::BadInput(format!("--listen {}: cannot bind: {e}", opts.listen)))?;
    let addr = listener.local_addr().map_err(|e| ActuatorError::Failed(format!("--listen {}: {e}", opts.listen)))?;

    // Everything that can still refuse the start comes before the service, whose journal may
    // get a line (`start`) for a device it then serves.
    // Pings find a peer that vanished without a reset; a connection that never opened is cut
    // by `incoming`.
    // What a client may hold of the actuator's memory is bounded (`admission`).
    let mut builder = tonic::transport::Server::builder()
        .tcp_keepalive(Some(Duration::from_secs(60)))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(admission::STREAMS_PER_CONNECTION)
        .timeout(admission::CALL_LIMIT);
    if let Some(t) = tls {
        builder = builder
            .tls_config(t)
            // The cause says what is wrong ("transport error" alone did not: a key that is not
            // the certificate's, a damaged certificate).
            .map_err(|e| {
                let files = opts.tls.as_ref().map(|f| format!(" {} / {}", f.cert.display(), f.key.display()));
                ActuatorError::BadInput(format!(
                    "--tls-cert/--tls-key{}: unusable: {}",
                    files.unwrap_or_default(),
                    crate::error::with_causes(&e)
                ))
            })?;
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let caps = backend.capabilities().clone();
    let service = ActuatorService::new(backend, journal, stop_rx.clone());
    tokio::spawn(service.clone().watch_deadlines());
    let auth = BearerAuth::new(opts.token.clone());
    // A request may name every queue (an Apply of the whole fabric, ~60 bytes a queue): gRPC's
    // default 4 MiB would refuse one past about 70 000 queues. Bounded by the fabric, not open.
    let max_request = (4 << 20) + 256 * caps.queues.len();
    let server = ActuatorServer::new(service.clone()).max_decoding_message_size(max_request);
    let router = builder
        .layer(admission::AdmissionLayer::new(admission::LARGE_REQUESTS))
        .add_service(tonic::service::interceptor::InterceptedService::new(server, auth.clone()));
    info!(
        %addr,
        backend = %caps.backend,
        queues = caps.queues.len(),
        tls = opts.tls.is_some(),
        token = opts.token.is_some(),
        journal = ?opts.journal,
        "actuator serving"
    );
    // Room for the connections, and descriptors beyond them to revert with.
    let connections =
        crate::open_files::connections_within(incoming::MAX_CONNECTIONS, crate::open_files::raise_limit(), "actuator");
    let mut stopped = stop_rx.clone();
    let hurry = Arc::new(Notify::new());
    let hurried = hurry.clone();
    let task = tokio::spawn(async move {
        let signal = async move {
            while !*stopped.borrow_and_update() {
                if stopped.changed().await.is_err() {
                    break;
                }
            }
        };
        let serving = router.serve_with_incoming_shutdown(incoming::bounded(listener, connections), signal);
        // Graceful shutdown waits for open calls; a client that never closes its connection
        // must not keep the actuator (and its pending revert) from stopping.
        let mut grace = stop_rx;
        let result = tokio::select! {
            r = serving => r.map_err(|e| ActuatorError::Failed(format!("gRPC server: {e}"))),
            hurried = async {
                while !*grace.borrow_and_update() {
                    if grace.changed().await.is_err() { break; }
                }
                tokio::select! {
                    _ = tokio::time::sleep(GRACE) => false,
                    _ = hurried.notified() => true,
                }
            } => {
                if hurried {
                    warn!("open calls cut off at a second signal; stopping");
                } else {
                    warn!("open calls did not finish within {GRACE:?}; stopping anyway");
                }
                Ok(())
            }
        };
        let svc = service.clone();
        let stopped = tokio::task::spawn_blocking(move || svc.stop())
            .await
            .map_err(|e| ActuatorError::Failed(format!("actuator stop: {e}")))?;
        auth.flush();
        info!("actuator stopped");
        result.and(stopped.map_err(ActuatorError::Failed))
    });
    Ok(ActuatorHandle { addr, tls: opts.tls.is_some(), stop: stop_tx, hurry, task: Some(task), sim: None })
}

/// Start a simulated fabric behind an actuator (what `ecn-tuner run --target sim` embeds).
///
/// The scenario loads and the simulator starts before the socket is bound; the handle's
/// [`ActuatorHandle::sim`] gives in-process controls (completed-run summaries, pause storms).
pub async fn serve_sim(sim: SimOptions, opts: ServeOptions) -> Result<ActuatorHandle, ActuatorError> {
    // Loading a scenario generates its flows: CPU work, kept off the async workers.
    let backend = tokio::task::spawn_blocking(move || SimBackend::start(sim))
        .await
        .map_err(|e| ActuatorError::Failed(format!("simulator start: {e}")))??;
    let control = backend.control();
    let mut handle = serve(backend, opts).await?;
    handle.sim = Some(control);
    Ok(handle)
}

/// Start a dry-run actuator.
pub async fn serve_dry_run(dry: DryRunOptions, opts: ServeOptions) -> Result<ActuatorHandle, ActuatorError> {
    let backend = tokio::task::spawn_blocking(move || DryRunBackend::start(dry))
        .await
        .map_err(|e| ActuatorError::Failed(format!("dry-run start: {e}")))??;
    serve(backend, opts).await
}

/// Start an actuator in front of a SONiC switch's Redis.
pub async fn serve_sonic(sonic: SonicOptions, opts: ServeOptions) -> Result<ActuatorHandle, ActuatorError> {
    // Said before the switch is reached: a missing flag is not a Redis that does not answer.
    if opts.journal.is_none() {
        return Err(journal_required("sonic"));
    }
    let backend = tokio::task::spawn_blocking(move || SonicBackend::start(sonic))
        .await
        .map_err(|e| ActuatorError::Failed(format!("SONiC backend start: {e}")))??;
    serve(backend, opts).await
}
