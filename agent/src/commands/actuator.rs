//! `ecn-tuner actuator`: serve a fabric's ECN settings over gRPC, with switch-side safety.

use crate::actuator::{self, BadWrite, DryRunOptions, ServeOptions, SimOptions, SonicOptions, StormSpec, TlsFiles};
use crate::commands::positive_duration;
use crate::commands::sonic::RedisArgs;
use crate::error::CliError;
use clap::{Args, ValueEnum};
use ecn_env::fabric::MarkingFault;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use tracing::info;

/// Which device the actuator drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// A simulated fabric running a scenario in scaled wall-clock time.
    Sim,
    /// Settings kept in memory; nothing is touched.
    DryRun,
    /// A SONiC switch through its Redis databases (--redis).
    Sonic,
}

/// How the queues of an injected bad write mark (`--bad-write-marks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BadWriteMarks {
    /// Every packet, as thresholds that landed at zero: DCQCN starves the senders.
    Every,
    /// No packet, as thresholds that landed above the buffer: the queues grow until PFC.
    None,
}

/// Arguments of `actuator`.
#[derive(Args)]
pub struct ActuatorArgs {
    /// The device: `sim` (a scenario on the simulator), `dry-run` (settings in memory) or
    /// `sonic` (a SONiC switch's CONFIG_DB and COUNTERS_DB, see --redis).
    #[arg(long, value_enum)]
    backend: BackendKind,
    /// Scenario (built-in name, TOML file or HPCC config.txt): the simulated fabric for `sim`;
    /// the queues and initial settings for `dry-run`. Default: websearch-50 (for dry-run with
    /// --telemetry: the recording's queues).
    #[arg(long, value_name = "NAME|FILE")]
    scenario: Option<String>,
    /// Seed of the first scenario run (default: the scenario's); each restart takes the next.
    #[arg(long)]
    seed: Option<u64>,
    /// Address to serve on. Anything but loopback needs --tls-cert/--tls-key and --token-file.
    /// Port 0 picks a free port; the first stdout line says which (`listening on ADDR`).
    #[arg(long, value_name = "ADDR", default_value = actuator::DEFAULT_LISTEN)]
    listen: String,
    /// Append every apply, confirm, revert and rollback here, and every write refused for its
    /// content or its lease, one JSON object per line. Calls refused for their token, and
    /// validate_only checks, are logged, not journaled.
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    /// Simulated nanoseconds per wall-clock nanosecond (1 = real time, 0.01 = 100 times slower),
    /// from 1e-6 to 1e6: the pace of the sim backend, or of a dry-run's --telemetry replay
    /// [default: 0.01].
    // No clap default, so that one given where nothing is paced is seen and refused.
    #[arg(long, value_name = "X")]
    time_scale: Option<f64>,
    /// Test and demo knob (sim only): a PFC pause storm on queue QUEUE (index in
    /// GetCapabilities order) from simulated time SIMTIME for DURATION, e.g. 3@5ms:20ms.
    /// Repeatable.
    #[arg(long = "inject-storm", value_name = "QUEUE@SIMTIME:DURATION")]
    inject_storm: Vec<String>,
    /// Test and demo knob (sim only): the Nth write to the settings (1 = the first apply,
    /// rollback or revert) lands mis-programmed, as with thresholds written in the wrong unit:
    /// every queue it changes marks as --bad-write-marks says until a later write changes
    /// that queue.
    #[arg(long = "inject-bad-write", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    inject_bad_write: Option<u64>,
    /// What the queues of --inject-bad-write mark: `every` packet (thresholds landed at zero)
    /// or `none` (thresholds landed above the buffer).
    #[arg(long, value_enum, value_name = "MARKS", default_value = "every", requires = "inject_bad_write")]
    bad_write_marks: BadWriteMarks,
    /// Dry-run only: replay this recorded telemetry (Parquet or CSV, e.g. from `sim --out`,
    /// checked as `validate` checks it) as the telemetry stream, looping. Without it a dry-run
    /// actuator serves no telemetry.
    #[arg(long, value_name = "FILE")]
    telemetry: Option<PathBuf>,
    /// TLS certificate chain (PEM). Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM). Needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require `authorization: Bearer <token>` on every call; the file holds the token.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// SONiC: the switch's Redis and database indices.
    #[command(flatten)]
    redis: RedisArgs,
    // The SONiC-only flags have no clap defaults, so that one given to another backend is seen
    // and refused by name; their defaults are `SonicOptions::new`'s.
    /// SONiC: the switch's name in queue ids (default: DEVICE_METADATA|localhost hostname).
    #[arg(long, value_name = "NAME")]
    switch_name: Option<String>,
    /// SONiC: how often COUNTERS_DB is read (the telemetry interval; default: as often as SONiC
    /// refreshes queue and port counters, its `counterpoll` intervals, 10s out of the box, in
    /// whole queue refreshes). Faster than those, samples come in lumps; no whole number of
    /// queue refreshes, they alias (both warned of at start).
    #[arg(long, value_name = "DUR")]
    poll_interval: Option<String>,
    /// SONiC: width of the switch's counters in bits (default 64, SAI's; a wrap of narrower
    /// ones is told apart from a reset).
    #[arg(long, value_name = "BITS")]
    counter_bits: Option<u32>,
    /// SONiC: when no counter (queues, and octets in and out of their ports) has moved for
    /// this long (default 60s), take SONiC's counters as stopped and publish no telemetry until
    /// they move, so that the controller falls back instead of reading an idle fabric.
    #[arg(long, value_name = "DUR")]
    frozen_after: Option<String>,
    /// SONiC: where ASIC_DB shows what orchagent programmed, how long it may take to program a
    /// write (default 2s); one it has not programmed by then is undone in CONFIG_DB and the
    /// apply fails.
    #[arg(long, value_name = "DUR")]
    program_timeout: Option<String>,
}

impl ActuatorArgs {
    /// The first SONiC-only flag given, if any.
    fn sonic_flag_given(&self) -> Option<&'static str> {
        self.redis.flag_given().or_else(|| {
            super::first_given(&[
                ("--switch-name", self.switch_name.is_some()),
                ("--poll-interval", self.poll_interval.is_some()),
                ("--counter-bits", self.counter_bits.is_some()),
                ("--frozen-after", self.frozen_after.is_some()),
                ("--program-timeout", self.program_timeout.is_some()),
            ])
        })
    }
}

/// Parse `--listen`: an IP:PORT, or HOST:PORT resolved once to one address. A name with
/// several (`localhost`: `::1` and `127.0.0.1`) is refused: the actuator listened on the first
/// alone, and clients given the other were refused.
fn parse_listen(s: &str) -> Result<SocketAddr, CliError> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    let bad = |why: String| CliError::BadInput(format!("--listen {s}: {why}"));
    let mut addrs: Vec<SocketAddr> =
        s.to_socket_addrs().map_err(|e| bad(format!("expected HOST:PORT ({e})")))?.collect();
    addrs.dedup();
    match addrs.as_slice() {
        [] => Err(bad("resolves to no address".into())),
        [one] => Ok(*one),
        several => {
            let listed: Vec<String> = several.iter().map(|a| a.to_string()).collect();
            Err(bad(format!(
                "resolves to several addresses ({}); the actuator listens on one: give it (or [::]:PORT for all)",
                listed.join(", ")
            )))
        }
    }
}

/// Run the actuator until SIGINT or SIGTERM.
pub fn run(args: ActuatorArgs) -> Result<(), CliError> {
    let listen = parse_listen(&args.listen)?;
    let storms = args
        .inject_storm
        .iter()
        .map(|s| s.parse::<StormSpec>().map_err(|e| CliError::BadInput(format!("--inject-storm {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if args.backend != BackendKind::Sim && !storms.is_empty() {
        return Err(CliError::BadInput("--inject-storm: only the sim backend has a fabric to storm".into()));
    }
    if args.backend != BackendKind::Sim && args.inject_bad_write.is_some() {
        return Err(CliError::BadInput("--inject-bad-write: only the sim backend can inject faults".into()));
    }
    if args.backend != BackendKind::DryRun && args.telemetry.is_some() {
        return Err(CliError::BadInput("--telemetry: only the dry-run backend replays a recording".into()));
    }
    let paced = args.backend == BackendKind::Sim || args.telemetry.is_some();
    if !paced && args.time_scale.is_some() {
        return Err(CliError::BadInput(
            "--time-scale: paces the sim backend, or a dry-run's --telemetry replay; here nothing is paced: drop the flag"
                .into(),
        ));
    }
    let time_scale = args.time_scale.unwrap_or(actuator::sim::DEFAULT_TIME_SCALE);
    let sonic = match args.backend {
        BackendKind::Sonic => {
            if args.scenario.is_some() {
                return Err(CliError::BadInput("--scenario: a SONiC switch has its own queues; drop the flag".into()));
            }
            if args.seed.is_some() {
                return Err(CliError::BadInput(
                    "--seed: a SONiC switch runs no scenario to seed; drop the flag".into(),
                ));
            }
            let at = args.redis.locate_all()?;
            let mut o = SonicOptions::new(at.url);
            o.dbs = at.dbs;
            o.elsewhere = at.elsewhere;
            o.map = at.map;
            o.timeout = args.redis.timeout()?;
            o.password = args.redis.password()?;
            o.switch_name = args.switch_name.clone();
            let duration = |flag: &str, given: &Option<String>, default: std::time::Duration| {
                given.as_deref().map_or(Ok(default), |text| positive_duration(flag, text))
            };
            o.poll_interval =
                args.poll_interval.as_deref().map(|text| positive_duration("--poll-interval", text)).transpose()?;
            o.counter_bits = args.counter_bits.unwrap_or(o.counter_bits);
            o.frozen_after = duration("--frozen-after", &args.frozen_after, o.frozen_after)?;
            o.program_timeout = duration("--program-timeout", &args.program_timeout, o.program_timeout)?;
            o.originals_file = args.journal.as_deref().map(actuator::sonic::originals::file_beside);
            Some(o)
        }
        _ => {
            if let Some(flag) = args.sonic_flag_given() {
                return Err(CliError::BadInput(format!(
                    "{flag}: only the sonic backend reads a switch's Redis; drop the flag, or use --backend sonic"
                )));
            }
            None
        }
    };
    let token = args.token_file.as_deref().map(actuator::security::read_token_file).transpose()?;
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    let opts = ServeOptions { listen, journal: args.journal, tls, token };
    // Refuse an exposed, unprotected address before loading anything.
    actuator::security::check_exposure(listen, opts.tls.is_some(), opts.token.is_some())?;

    let runtime = crate::threads::async_runtime(Some(2))?;
    runtime.block_on(async move {
        // Watched from before it serves: a SIGTERM right after its first stdout line must stop
        // it cleanly.
        let mut signals = crate::stop_signals::StopSignals::watch()?;
        let mut handle = match args.backend {
            BackendKind::Sim => {
                let sim = SimOptions {
                    scenario: args.scenario.unwrap_or_else(|| actuator::dry_run::DEFAULT_SCENARIO.into()),
                    seed: args.seed,
                    time_scale,
                    storms,
                    bad_write: args.inject_bad_write.map(|write| BadWrite {
                        write,
                        fault: match args.bad_write_marks {
                            BadWriteMarks::Every => MarkingFault::MarkEvery,
                            BadWriteMarks::None => MarkingFault::MarkNone,
                        },
                    }),
                };
                actuator::serve_sim(sim, opts).await?
            }
            BackendKind::DryRun => {
                let dry =
                    DryRunOptions { scenario: args.scenario, seed: args.seed, telemetry: args.telemetry, time_scale };
                actuator::serve_dry_run(dry, opts).await?
            }
            BackendKind::Sonic => actuator::serve_sonic(sonic.expect("sonic options"), opts).await?,
        };
        // Scripts and tests read the real address (port 0) from this first stdout line. Nobody
        // reading it (`| true`) stops nothing, as for every command's output.
        crate::output::outln!("listening on {}", handle.local_addr());
        tokio::select! {
            r = handle.finished() => return r.map_err(CliError::from),
            s = signals.next() => info!("{s}: stopping"),
        }
        // A second signal cuts the grace for open calls short; an unconfirmed change is still
        // reverted, which a forced exit would leave on the device.
        let hurry = handle.hurry();
        let stopping = handle.shutdown();
        tokio::pin!(stopping);
        tokio::select! {
            r = &mut stopping => return r.map_err(CliError::from),
            s = signals.next() => info!("{s} again: not waiting for open calls"),
        }
        hurry.notify_one();
        stopping.await.map_err(CliError::from)
    })
}
