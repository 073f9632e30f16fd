//! Reading telemetry from a live actuator without controlling it, for `record --target` and
//! `recommend --target`. Nothing here writes: no writer lease is taken. As for `run`, the
//! target `sim` (or a built-in scenario's name) is a simulated fabric behind an actuator in
//! this process (PRODUCT.md: it stands in for a real fabric behind the same interface).

use crate::actuator::security::read_pem_certificates;
use crate::actuator::sim::{SimOptions, DEFAULT_SIM_SCENARIO, DEFAULT_TIME_SCALE};
use crate::actuator::telemetry::sample_from_wire;
use crate::actuator::{self, ServeOptions};
use crate::controller::{self, said};
use crate::error::CliError;
use crate::stop_signals::StopSignals;
use ecn_datasets::io::TelemetryWriter;
use ecn_datasets::telemetry::counted;
use ecn_proto::v1 as pb;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;
use tracing::info;

/// How to reach the actuator.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// Its URL.
    pub url: String,
    /// Bearer token, if it requires one.
    pub token: Option<String>,
    /// CA certificate (PEM) for https.
    pub tls_ca: Option<Vec<u8>>,
    /// For `--target sim` or a built-in scenario's name: the simulated fabric to start behind
    /// an in-process actuator (whose URL is not known until then).
    pub simulated: Option<SimOptions>,
}

impl Target {
    /// From the command-line flags `--target`, `--token-file` and `--tls-ca`.
    pub fn from_flags(
        url: &str,
        token_file: Option<&std::path::Path>,
        tls_ca: Option<&std::path::Path>,
    ) -> Result<Target, CliError> {
        let simulated = match url {
            "sim" => Some(DEFAULT_SIM_SCENARIO.to_string()),
            name if ecn_env::scenario::builtin(name).is_some() => Some(name.to_string()),
            _ => None,
        };
        let url_like = url.starts_with("http://") || url.starts_with("https://");
        if simulated.is_none() && !url_like {
            let names: Vec<&str> = ecn_env::scenario::BUILTIN_SCENARIOS.iter().map(|(n, _)| *n).collect();
            return Err(CliError::BadInput(format!(
                "--target {url}: give an actuator's URL (http:// or https://), `sim`, or a built-in scenario's \
                 name ({}); a scenario file is no target: `record --scenario FILE` simulates it",
                names.join(", ")
            )));
        }
        if simulated.is_some() {
            if let Some(flag) = [("--token-file", token_file), ("--tls-ca", tls_ca)].iter().find(|(_, f)| f.is_some()) {
                return Err(CliError::BadInput(format!(
                    "{}: the simulated fabric of --target {url} runs in this process, on loopback, and needs none",
                    flag.0
                )));
            }
        }
        Ok(Target {
            url: url.to_string(),
            token: token_file.map(crate::actuator::security::read_token_file).transpose()?,
            tls_ca: tls_ca.map(|p| read_pem_certificates("--tls-ca", p)).transpose().map_err(CliError::BadInput)?,
            simulated: simulated.map(|scenario| SimOptions {
                scenario,
                seed: None,
                time_scale: DEFAULT_TIME_SCALE,
                storms: Vec::new(),
                bad_write: None,
            }),
        })
    }
}

/// When to stop reading.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// After this many telemetry batches.
    Batches(usize),
    /// After this much wall-clock time.
    Elapsed(Duration),
}

/// What was read (into the file given to [`capture`]).
pub struct Captured {
    /// Rows written: every sample, in arrival order, with each queue's setting as reported.
    pub rows: u64,
    /// The actuator's backend kind.
    pub backend: String,
    /// Queues it controls.
    pub queues: usize,
    /// Batches received.
    pub batches: usize,
    /// Why reading stopped before `until`, if it did (the stream failed or ended, or the
    /// actuator went silent). What was read until then is kept.
    pub cut_short: Option<String>,
}

/// What a stop signal (`SIGINT`, ...) did to the reading, for messages: each keeps what was
/// read.
fn stopped_by(signal: &str) -> String {
    match signal {
        "SIGINT" => format!("interrupted ({signal})"),
        _ => format!("stopped ({signal})"),
    }
}

/// A batch must come within this, or the actuator counts as silent.
const SILENCE: Duration = Duration::from_secs(30);

/// Simulated time a one-shot read of a simulated fabric lets pass after its first flow: its
/// first batches are of a fabric still filling, with no queue yet.
const SIM_WARMUP_NS: u64 = 2_000_000;

/// Read telemetry from `target` until `until` into `out`, a batch at a time (an hour of 64
/// queues at 1 s is 230 000 rows, a day 5.5 million: not held in memory); for a simulated
/// target, start its fabric first and stop it after. A failed write ends the reading with its
/// error.
pub async fn capture(target: &Target, until: Until, out: &mut TelemetryWriter) -> Result<Captured, CliError> {
    // Ctrl-C, SIGTERM or SIGHUP, from the start: before the stream opens it ends the reading
    // with nothing read (the caller's file is then never written); after, what was read is kept.
    let mut stop = StopSignals::watch()?;
    let Some(sim) = target.simulated.clone() else { return capture_from(target, until, 0, out, &mut stop).await };
    let scenario = sim.scenario.clone();
    let handle = tokio::select! {
        handle = actuator::serve_sim(sim, ServeOptions::loopback()) => handle?,
        why = stop.next() => {
            let why = stopped_by(why);
            return Err(CliError::Failed(format!("--target {}: {why} before any telemetry was read", target.url)));
        }
    };
    info!(url = %handle.url(), %scenario, "simulated fabric running behind an embedded actuator");
    // The fabric fills from its first flow on, which an HPCC configuration puts late (its
    // lead-in runs at once, unpaced): the warm-up counts from there.
    let first_flow_ns = handle.sim().map_or(0, |s| s.first_flow_ns());
    let actuator = Target { url: handle.url(), ..Target::default() };
    let from_ns = match until {
        Until::Batches(_) => first_flow_ns + SIM_WARMUP_NS,
        Until::Elapsed(_) => 0,
    };
    let captured = capture_from(&actuator, until, from_ns, out, &mut stop).await;
    handle.shutdown().await?;
    captured
}

/// Read telemetry from an actuator until `until` or `stop` into `out`, counting only batches
/// from `from_ns` on.
async fn capture_from(
    target: &Target,
    until: Until,
    from_ns: u64,
    out: &mut TelemetryWriter,
    stop: &mut StopSignals,
) -> Result<Captured, CliError> {
    tokio::select! {
        opened = open(target) => read_stream(target, opened?, until, from_ns, out, stop).await,
        why = stop.next() => {
            Err(CliError::Failed(format!("{}: {} before any telemetry was read", target.url, stopped_by(why))))
        }
    }
}

/// An open telemetry stream and what the actuator says of itself.
struct Opened {
    stream: tonic::Streaming<pb::TelemetryBatch>,
    backend: String,
    queues: usize,
    /// Each queue's setting (`switch/port/queue`), for samples that do not carry theirs.
    settings: HashMap<String, pb::EcnSetting>,
}

/// Connect to the actuator, ask what it controls and their settings, and open its stream.
async fn open(target: &Target) -> Result<Opened, CliError> {
    let status = |what: &str, s: tonic::Status| CliError::Failed(format!("{}: {what}: {}", target.url, said(&s)));
    let mut client =
        controller::connect(&target.url, target.token.as_deref(), target.tls_ca.as_deref(), SILENCE).await?;
    let caps =
        client.get_capabilities(pb::GetCapabilitiesRequest {}).await.map_err(|s| status("GetCapabilities", s))?;
    let caps = caps.into_inner();
    let config = client.get_config(pb::GetConfigRequest {}).await.map_err(|s| status("GetConfig", s))?.into_inner();
    // Samples normally carry their queue's setting; the config stands in where one does not.
    let settings: HashMap<String, pb::EcnSetting> = config
        .queues
        .iter()
        .filter_map(|q| {
            let id = q.id.as_ref()?;
            Some((id.to_string(), q.setting?))
        })
        .collect();
    let stream = client
        .stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 0 })
        .await
        .map_err(|s| status("StreamTelemetry", s))?
        .into_inner();
    info!(target = %target.url, backend = %caps.backend, queues = caps.queues.len(), "reading telemetry");
    Ok(Opened { stream, backend: caps.backend, queues: caps.queues.len(), settings })
}

/// Read `opened`'s stream until `until` or `stop` into `out`, counting only batches from
/// `from_ns` on.
async fn read_stream(
    target: &Target,
    opened: Opened,
    until: Until,
    from_ns: u64,
    out: &mut TelemetryWriter,
    stop: &mut StopSignals,
) -> Result<Captured, CliError> {
    let Opened { mut stream, backend, queues, settings } = opened;
    let started = Instant::now();
    let mut rows = 0u64;
    let mut batches = 0;
    let mut cut_short = None;
    // Ctrl-C or SIGTERM ends the reading like a lost stream: what was read is kept.
    loop {
        let wait = match until {
            Until::Batches(n) if batches >= n => break,
            Until::Batches(_) => SILENCE,
            Until::Elapsed(d) => match d.checked_sub(started.elapsed()) {
                Some(left) if !left.is_zero() => left.min(SILENCE),
                _ => break,
            },
        };
        let after = |what: String| format!("{}: {what} after {:.1} s", target.url, started.elapsed().as_secs_f64());
        let message = tokio::select! {
            m = tokio::time::timeout(wait, stream.message()) => m,
            why = stop.next() => {
                cut_short = Some(after(stopped_by(why)));
                break;
            }
        };
        let batch = match message {
            Ok(Ok(Some(batch))) => batch,
            Ok(Ok(None)) => {
                cut_short = Some(after("the telemetry stream ended".into()));
                break;
            }
            Ok(Err(s)) => {
                cut_short = Some(after(format!("StreamTelemetry: {}", said(&s))));
                break;
            }
            Err(_) if matches!(until, Until::Elapsed(d) if started.elapsed() >= d) => break,
            Err(_) => {
                cut_short = Some(after(format!("no telemetry for {SILENCE:?}")));
                break;
            }
        };
        if batch.ts_ns < from_ns {
            continue;
        }
        let mut written = Vec::with_capacity(batch.samples.len());
        for s in &batch.samples {
            let key = s.id.as_ref().map(|id| id.to_string()).unwrap_or_default();
            written.extend(sample_from_wire(s, settings.get(&key)));
        }
        // A file that cannot take more (a full disk) cannot be finished either.
        out.write(&written).map_err(|e| rows_lost(e, rows, Some(started.elapsed())))?;
        rows += written.len() as u64;
        batches += 1;
    }
    Ok(Captured { rows, backend, queues, batches, cut_short })
}

/// A recording that cannot be written on (a full disk), `rows` read (`over` that long): they
/// are lost with it, and the error says how many, where it said only the disk's error.
pub fn rows_lost(e: impl std::fmt::Display, rows: u64, over: Option<Duration>) -> CliError {
    let over = over.map_or(String::new(), |d| format!(" over {:.1} s", d.as_secs_f64()));
    CliError::Failed(format!(
        "{e}; the {} read{over} are lost with it (the file appears only when finished): record to a disk with room",
        counted(rows, "row", "rows")
    ))
}
