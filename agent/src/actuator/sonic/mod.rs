//! The `sonic` backend: a SONiC switch through its Redis databases (REFERENCE.md §7).
//!
//! - [`schema`]: database indices, table and field names, value parsing, profile naming;
//! - [`config`]: CONFIG_DB capabilities and the WRED writes, one MULTI/EXEC per apply;
//! - [`counters`]: COUNTERS_DB polling into per-interval telemetry batches;
//! - [`asic`]: ASIC_DB, read back to see each write programmed;
//! - [`originals`]: the recording of the original profiles, and `sonic restore`;
//! - [`refresh`]: polls kept clear of the moments SONiC refreshes the queue counters;
//! - [`conn`]: connections (one URL, one database index per SONiC database, and another URL
//!   for a database on another instance);
//! - [`layout`]: SONiC's own map of its databases, `database_config.json`.
//!
//! Redis I/O never runs on the async runtime's workers: writes go through a dedicated writer
//! thread that owns the CONFIG_DB connection (the calling thread waits for its answer, handed
//! over to the runtime with `block_in_place` so other tasks keep running), and telemetry comes
//! from a polling thread. Every socket has a timeout (`--redis-timeout`), so an apply against a
//! Redis that went away fails within a bounded time instead of hanging.
//!
//! ## An apply, and a Redis that goes away in the middle of one
//!
//! All queues of one apply are written in one MULTI/EXEC transaction: other clients see CONFIG_DB
//! fully old or fully new. When the transaction fails without an answer (a timeout, a broken
//! connection), the writer cannot tell from the error whether EXEC ran, or whether it is still
//! on its way: held in a socket buffer or on a stalled network path, it could run after any
//! read-back. So the writer first fences the old connection off: on a new one it closes it
//! at the server (`CLIENT KILL ID`, once `CLIENT LIST` shows that id still bears our connection's
//! name: after a Redis restart the id may be another program's), after which nothing sent on it
//! can run, and only then reads the tables back. When they show the new settings the apply is reported done; otherwise it is
//! reported failed, and that is then true for good (nothing changed, as the service expects).
//!
//! When Redis cannot be reached to fence, the apply is reported failed and the writer owes the
//! service that answer: until it has fenced the old connection off, it retries every
//! `--redis-timeout` while idle (and before any other write), and puts back the settings last
//! applied if the transaction did land meanwhile.

pub mod asic;
pub mod config;
pub mod conn;
pub mod counters;
pub mod layout;
pub mod originals;
pub mod refresh;
pub mod schema;

use super::backend::{Backend, BackendCaps, BackendError, NoTelemetry, TelemetryReceiver, WriteTimes};
use super::ActuatorError;
use asic::Readback;
use config::{effective, Curve, Layout, Snapshot};
use conn::RedisTarget;
use ecn_datasets::counters::CounterWidth;
use ecn_env::EcnSetting;
use ecn_proto::v1 as pb;
use originals::{Recorder, Recording};
use redis::Connection;
use schema::DbIndices;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

/// The shortest `--poll-interval`: SONiC's flex counters refresh no faster (`counterpoll`'s
/// shortest interval), and faster polls only load the Redis that orchagent and syncd share.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Default `--redis-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default `--program-timeout`: orchagent programs a WRED change in milliseconds when it is
/// well; within the controller's default `--call-timeout` (5 s) with the transaction around it.
pub const DEFAULT_PROGRAM_TIMEOUT: Duration = Duration::from_secs(2);
/// While idle, CONFIG_DB is compared with the settings last applied once every this many
/// poll intervals (5 s at the default): a read of the two WRED tables.
const DRIFT_CHECK_POLLS: u32 = 5;
/// How often ASIC_DB is read while a write waits to be programmed.
const READBACK_PERIOD: Duration = Duration::from_millis(10);
/// Default `--frozen-after`: longer than SONiC's slowest default `counterpoll` interval for the
/// counters read (queues, 10 s) and LLDP's transmit interval (30 s), so that a live switch
/// never looks stopped.
pub const DEFAULT_FROZEN_AFTER: Duration = Duration::from_secs(60);

/// How to reach and read the switch.
#[derive(Debug, Clone)]
pub struct SonicOptions {
    /// `redis://HOST:PORT` or `unix:///var/run/redis/redis.sock`.
    pub redis: String,
    /// Database indices.
    pub dbs: DbIndices,
    /// Databases on another Redis instance than `redis` (SONiC's multi-database layout, from
    /// `--database-config`): index and URL.
    pub elsewhere: Vec<(i64, String)>,
    /// The `--database-config` map that placed the databases, for messages (`None`: `--redis`
    /// and the index flags).
    pub map: Option<PathBuf>,
    /// Switch name; default: `DEVICE_METADATA|localhost` `hostname`.
    pub switch_name: Option<String>,
    /// COUNTERS_DB poll period (the native telemetry interval); `None`: as often as SONiC
    /// refreshes the counters telemetry needs ([`follow_counter_refresh`]).
    pub poll_interval: Option<Duration>,
    /// Width of the switch's counters in bits (64 for SAI).
    pub counter_bits: u32,
    /// Connect, read and write timeout of every Redis call.
    pub timeout: Duration,
    /// The Redis password, where not in the URL (`--redis-password-file`).
    pub password: Option<String>,
    /// Also keep the recording of the original profiles in this file.
    pub originals_file: Option<PathBuf>,
    /// Publish no telemetry once no counter has moved for this long.
    pub frozen_after: Duration,
    /// With ASIC_DB read-back: how long orchagent may take to program a write before it is
    /// undone and the apply fails.
    pub program_timeout: Duration,
}

impl SonicOptions {
    /// Defaults for everything but the URL.
    pub fn new(redis: impl Into<String>) -> SonicOptions {
        SonicOptions {
            redis: redis.into(),
            dbs: DbIndices::default(),
            elsewhere: Vec::new(),
            map: None,
            switch_name: None,
            poll_interval: None,
            counter_bits: 64,
            timeout: DEFAULT_TIMEOUT,
            password: None,
            originals_file: None,
            frozen_after: DEFAULT_FROZEN_AFTER,
            program_timeout: DEFAULT_PROGRAM_TIMEOUT,
        }
    }
}

/// `CLIENT SETNAME` of the writer's CONFIG_DB connection: fencing closes an old connection only
/// if it still bears this name.
const CONFIG_CONNECTION: &str = conn::ACTUATOR_CONNECTIONS[0];

/// A request to the writer thread.
struct Job {
    settings: Vec<EcnSetting>,
    reply: mpsc::SyncSender<Result<(), String>>,
}

/// A SONiC switch behind the actuator.
pub struct SonicBackend {
    caps: BackendCaps,
    settings: Arc<Mutex<Vec<EcnSetting>>>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    telemetry: broadcast::WeakSender<Arc<pb::TelemetryBatch>>,
    stop: Arc<AtomicBool>,
    /// The writer's `unsettled`: a failed transaction may still land.
    unsettled: Arc<AtomicBool>,
    /// The writer thread, joined at shutdown: a write under way ends first.
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    /// The writer's `reading`: it only compares CONFIG_DB with the settings last applied.
    writer_reading: Arc<AtomicBool>,
    /// The poller thread, waited for at shutdown only up to `poller_patience`.
    poller_thread: Mutex<Option<JoinHandle<()>>>,
    /// How long a read may take against a Redis that answers: one that stops answering in the
    /// middle of a batch of reads (a stopped process, a host gone quiet) holds it one
    /// `--redis-timeout` per command (redis-rs reads every reply), for minutes, so shutdown
    /// does not wait longer for the poller, nor for the writer while it only reads.
    poller_patience: Duration,
    /// Zero of telemetry `ts_ns`, shared with the poller.
    epoch: Instant,
    poll_interval: Duration,
    /// When (`ts_ns`) the last write was handed to the writer: it cannot have landed earlier.
    write_started_ns: AtomicU64,
    /// With ASIC_DB read-back, when it showed the last write programmed.
    programmed_at: Arc<Mutex<Option<Instant>>>,
}

/// Select every database once at start-up: an index Redis does not have, or credentials it
/// refuses, are the operator's to fix (exit 2, naming the flag); the poller would otherwise
/// retry a database that does not exist for ever.
fn check_databases(target: &RedisTarget, dbs: &[(&str, i64)]) -> Result<(), ActuatorError> {
    for &(flag, db) in dbs {
        // Every batch of commands asks ECHO first (`conn::probe`): a user that may not would
        // start, and then no poll or write could run.
        let checked = target.connect(db, "ecn-tuner-discover").and_then(|mut con| {
            conn::probe(&mut con)
                .map_err(|e| format!("Redis at {} (db {db}): ECHO: {}", target.url_of(db), conn::said(&e)))
        });
        if let Err(e) = checked {
            let lower = e.to_lowercase();
            return Err(if lower.contains("out of range") {
                ActuatorError::BadInput(format!(
                    "{}: Redis at {} has no such database ({e})",
                    target.index_named(flag, db),
                    target.url_of(db)
                ))
            } else if lower.contains("authentication required") {
                // redis-rs says a server with a password, reached without one, so.
                ActuatorError::BadInput(format!(
                    "{}: Redis asks for a password ({e}): give it with --redis-password-file FILE \
                     (or in the URL, where `ps` shows it)",
                    target.named(db)
                ))
            } else if lower.contains("wrongpass") || lower.contains("noauth") || lower.contains("password") {
                ActuatorError::BadInput(format!("{}: authentication refused ({e})", target.named(db)))
            } else if lower.contains("noperm") {
                ActuatorError::BadInput(format!(
                    "{}: the Redis user may not run a command the actuator needs ({e}); with ACLs it needs +echo \
                     among the rest (README, \"Where it looks\")",
                    target.named(db)
                ))
            } else {
                ActuatorError::Failed(e)
            });
        }
    }
    Ok(())
}

/// The default `--poll-interval`: as often as SONiC refreshes the counters telemetry cannot do
/// without, queues' and ports' (CONFIG_DB `FLEX_COUNTER_TABLE`'s `POLL_INTERVAL`, or SONiC's
/// default: 10 s for queues), whether or not the group is on now (it is said at start-up), no
/// faster than [`MIN_POLL_INTERVAL`], and a whole number of queue refreshes. Polled faster,
/// most samples would carry no traffic and the next one a lump, dropped as a reset where it is
/// more than the line carries in a poll. ECN marks (`wredqueue`) do not slow it down: telemetry
/// goes on without them, and says so (`ecn_marks_counted`).
fn follow_counter_refresh(
    target: &RedisTarget,
    config_db: i64,
    frozen_after: Duration,
) -> Result<Duration, ActuatorError> {
    let mut con = target.connect(config_db, "ecn-tuner-discover").map_err(ActuatorError::Failed)?;
    let mut slowest = (Duration::ZERO, "", String::new());
    let mut queue_refresh = Duration::ZERO;
    for poll in schema::FLEX_COUNTER_POLLS.iter().filter(|p| p.blinds_telemetry()) {
        let (refresh_ms, whence) = refresh_of(&mut con, poll).map_err(|e| {
            ActuatorError::Failed(format!("Redis at {} (db {config_db}): {}", target.url_of(config_db), conn::said(&e)))
        })?;
        let refresh = Duration::from_millis(refresh_ms);
        if poll.key == schema::QUEUE_POLL {
            queue_refresh = refresh;
        }
        if refresh > slowest.0 {
            slowest = (refresh, poll.key, whence);
        }
    }
    let (refresh, key, mut whence) = slowest;
    let mut interval = refresh.max(MIN_POLL_INTERVAL);
    // A whole number of queue refreshes, which the polls can keep clear of ([`refresh`]): the
    // queue counters carry the traffic; a slower port group's PFC counts alias instead.
    if !queue_refresh.is_zero() && !refresh::guards(queue_refresh, interval) {
        let periods = interval.as_nanos().div_ceil(queue_refresh.as_nanos());
        interval = u32::try_from(periods).ok().and_then(|n| queue_refresh.checked_mul(n)).unwrap_or(interval);
        whence = format!("{whence}, rounded up to {periods} queue refreshes of {queue_refresh:?}");
    }
    if interval >= frozen_after {
        return Err(ActuatorError::BadInput(format!(
            "SONiC refreshes the counters every {refresh:?} ({key}, {whence}), and telemetry polls as often by \
             default: not within --frozen-after ({frozen_after:?}), so the counters would always look stopped; \
             shorten SONiC's interval (`counterpoll queue interval MS`, `counterpoll port interval MS`), or give a \
             longer --frozen-after"
        )));
    }
    info!(
        poll_interval = ?interval,
        "telemetry polls COUNTERS_DB as often as SONiC refreshes the counters it reads ({key}, {whence}); \
         --poll-interval sets it"
    );
    Ok(interval)
}

/// How often SONiC refreshes a counter group, in milliseconds, and whence that comes. A
/// `POLL_INTERVAL` that is not a whole number, or a key that is not a hash, is warned of and
/// taken as SONiC's default; only a failure to reach Redis is an error.
fn refresh_of(con: &mut Connection, poll: &schema::FlexCounterPoll) -> redis::RedisResult<(u64, String)> {
    let default = || format!("SONiC's default, {} ms", poll.default_ms);
    let raw: Option<Vec<u8>> = match redis::cmd("HGET").arg(poll.key).arg("POLL_INTERVAL").query(con) {
        Ok(raw) => raw,
        Err(e) if e.code() == Some("WRONGTYPE") => {
            conn::read_as_absent(
                poll.key,
                &format!("{} is not a hash, so its POLL_INTERVAL is {}", poll.key, default()),
            );
            return Ok((poll.default_ms, format!("not a hash: {}", default())));
        }
        Err(e) => return Err(e),
    };
    let Some(raw) = raw else { return Ok((poll.default_ms, format!("no POLL_INTERVAL: {}", default()))) };
    let text = String::from_utf8_lossy(&raw);
    match schema::poll_interval_ms(&text) {
        Some(ms) => Ok((ms, "POLL_INTERVAL".into())),
        None => {
            let shown = crate::actuator::validate::quoted_at_most(&text, 40);
            let what = format!("POLL_INTERVAL {shown} is not a whole number of milliseconds; taken as {}", default());
            conn::warn_once(poll.key, &what);
            Ok((poll.default_ms, format!("POLL_INTERVAL {shown} not a number: {}", default())))
        }
    }
}

/// Warn when SONiC does not poll a counter group telemetry reads (its counters would read 0
/// or stand still), or refreshes it less often than the poller reads it: most samples would
/// then carry no traffic, and the next one a lump. Only warnings: the operator may mean it,
/// and the counters still add up; the poller itself withholds telemetry while a group it
/// cannot do without is off ([`counters`]).
fn warn_of_slower_counters(con: &mut Connection, poll_interval: Duration) {
    for poll in &schema::FLEX_COUNTER_POLLS {
        let schema::FlexCounterPoll { key, group, .. } = *poll;
        let status: Option<String> = redis::cmd("HGET").arg(key).arg("FLEX_COUNTER_STATUS").query(con).unwrap_or(None);
        if !poll.is_on(status.as_deref()) {
            let what = match group {
                "wredqueue" => {
                    "ECN marks (SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS): every sample's ecn_marked_pkts, \
                                and the mark fraction a learned policy observes, will read 0"
                }
                "queue" => "queue counters: no telemetry is published until it is on (samples would show no traffic)",
                _ => "port counters: no telemetry is published until it is on (PFC pauses would read 0)",
            };
            let whence =
                if status.is_some() { "FLEX_COUNTER_STATUS disable" } else { "no FLEX_COUNTER_STATUS: off by default" };
            let platform = if poll.blinds_telemetry() {
                ""
            } else {
                " (where STATE_DB QUEUE_COUNTER_CAPABILITIES says the platform counts them)"
            };
            warn!("SONiC does not poll {what} ({key}, {whence}); run `counterpoll {group} enable` on the switch{platform}");
            continue;
        }
        // Redis failing here is the poller's to report; a value that is no number is warned of.
        let Ok((sonic_ms, whence)) = refresh_of(con, poll) else { continue };
        let refresh = Duration::from_millis(sonic_ms);
        if key == schema::QUEUE_POLL && refresh <= poll_interval && !refresh::guards(refresh, poll_interval) {
            warn!(
                "--poll-interval {poll_interval:?} is not a whole number of SONiC's queue counter refreshes, every \
                 {sonic_ms} ms ({key}, {whence}): intervals will hold one refresh more or less now and then, and the \
                 polls cannot keep clear of the refreshes; give a multiple of {sonic_ms} ms, or leave it out"
            );
        }
        if refresh <= poll_interval {
            continue;
        }
        let fix = format!("run `counterpoll {group} interval {}` on the switch", poll_interval.as_millis());
        if !poll.blinds_telemetry() {
            // Marks lag the packets they mark by up to a refresh, and a lump of them stays
            // under the packets' bound: samples go on, saying the marks are not counted.
            warn!(
                "SONiC refreshes ECN mark counters every {sonic_ms} ms ({key}, {whence}), less often than \
                 --poll-interval {poll_interval:?}: samples say ecn_marks_counted false, and the utilization health \
                 check cannot tell a change's throttling from traffic ending; {fix}"
            );
            continue;
        }
        // A lump is judged against what the line carries in one poll, with the counters' 25%
        // slack (`max_plausible_bytes`): past that share of line rate it is a "reset".
        let dropped_above = 125.0 * poll_interval.as_secs_f64() * 1e3 / sonic_ms as f64;
        warn!(
            "SONiC refreshes these counters every {sonic_ms} ms ({key}, {whence}), less often than --poll-interval \
             {poll_interval:?}: most samples will show no traffic and the next one all of it, and where a queue \
             carries more than {dropped_above:.0}% of line rate that lump is more than the line carries in one poll, \
             so its sample is dropped as a counter reset; {fix}, or raise --poll-interval (left out, it follows \
             SONiC's intervals)"
        );
    }
}

/// The PFC priorities whose counters are each controlled queue's pauses, by its port's
/// `PORT_QOS_MAP` `pfc_to_queue_map` (`MAP_PFC_PRIORITY_TO_QUEUE|<name>`, priority → queue):
/// the priorities that map to it. A port without a map, or a priority absent from one, keeps
/// SONiC's default, the identity. Read once at start-up; a queue that carries another
/// priority than its index is logged, one that carries none is warned of (its pauses read 0).
/// A key that cannot be read (not a hash, not text, Redis failing) is warned of, once, and
/// read as absent: it fell back to the identity unsaid, and a queue whose pauses come on
/// another priority then read none.
fn pfc_priorities(con: &mut Connection, queues: &[config::QueueRef]) -> Vec<Vec<u32>> {
    fn or_absent<T: Default>(key: &str, read: redis::RedisResult<T>) -> T {
        read.unwrap_or_else(|e| {
            let why = format!(
                "cannot read {key} ({e}), so its queues take SONiC's default PFC map (priority i pauses queue i)"
            );
            conn::read_as_absent(key, &why);
            T::default()
        })
    }
    let mut maps: HashMap<String, HashMap<String, String>> = HashMap::new();
    queues
        .iter()
        .map(|q| {
            let key = format!("PORT_QOS_MAP|{}", q.port);
            let read = redis::cmd("HGET").arg(&key).arg("pfc_to_queue_map").query(con);
            let name: Option<String> = or_absent(&key, read);
            let Some(name) = name else { return vec![q.queue] };
            let map = maps.entry(name.clone()).or_insert_with(|| {
                let key = format!("MAP_PFC_PRIORITY_TO_QUEUE|{name}");
                or_absent(&key, redis::cmd("HGETALL").arg(&key).query(con))
            });
            let goes_to = |p: u32| map.get(&p.to_string()).map_or(p, |to| to.trim().parse().unwrap_or(u32::MAX));
            let carried: Vec<u32> = (0..8).filter(|&p| goes_to(p) == q.queue).collect();
            if carried.is_empty() {
                warn!(
                    queue = %q.name(),
                    map = %name,
                    "MAP_PFC_PRIORITY_TO_QUEUE|{name} maps no PFC priority to this queue: its PFC pauses read 0"
                );
            } else if carried != [q.queue] {
                info!(queue = %q.name(), map = %name, "PFC priorities {carried:?} map to this queue: their pauses are its own");
            }
            carried
        })
        .collect()
}

impl SonicBackend {
    /// Read the switch's queues and start the writer and poller threads. Blocking: call it off
    /// the async workers.
    pub fn start(opts: SonicOptions) -> Result<SonicBackend, ActuatorError> {
        if opts.switch_name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(ActuatorError::BadInput(
                "--switch-name: empty; give the switch's name, or leave the flag \
                 out for DEVICE_METADATA's hostname"
                    .into(),
            ));
        }
        if let Some(given) = opts.poll_interval {
            if given < MIN_POLL_INTERVAL {
                return Err(ActuatorError::BadInput(format!(
                    "--poll-interval {given:?}: at least {MIN_POLL_INTERVAL:?}; SONiC refreshes its counters no more \
                     often (`counterpoll`'s shortest interval), and each poll is a round of reads on the switch's Redis"
                )));
            }
            if opts.frozen_after <= given {
                return Err(ActuatorError::BadInput(format!(
                    "--frozen-after {:?}: must be longer than --poll-interval ({given:?})",
                    opts.frozen_after
                )));
            }
        }
        if !(8..=64).contains(&opts.counter_bits) {
            return Err(ActuatorError::BadInput(format!(
                "--counter-bits {}: must be between 8 and 64 (SAI counters are 64 bits wide)",
                opts.counter_bits
            )));
        }
        let target =
            redis_target(&opts.redis, &opts.elsewhere, opts.map.as_deref(), opts.timeout, opts.password.as_deref())?;
        check_databases(&target, &opts.dbs.by_flag())?;
        let poll_interval = match opts.poll_interval {
            Some(given) => given,
            None => follow_counter_refresh(&target, opts.dbs.config, opts.frozen_after)?,
        };
        // The recording, if any, tells which profile each queue came from.
        let mut state = target.connect(opts.dbs.state, "ecn-tuner-discover").map_err(ActuatorError::Failed)?;
        // Two actuators on one switch would each undo the other's writes as edits from outside,
        // and each journal would tell only half of what the switch went through.
        let instances = opts.dbs.by_flag().map(|(_, db)| db);
        if let Some(other) =
            conn::running_actuator_at(&target, &instances, "ecn-tuner-discover").map_err(ActuatorError::Failed)?
        {
            return Err(ActuatorError::BadInput(format!(
                "{}: another ecn-tuner actuator is connected to this switch ({other}); one actuator per \
                 switch: stop that one first",
                target.named(opts.dbs.config)
            )));
        }
        let (recording, from_file) = match Recording::read(&mut state, opts.dbs.state).map_err(ActuatorError::Failed)? {
            Some(r) => (Some(r), false),
            None => match &opts.originals_file {
                Some(p) if p.exists() => (Some(Recording::read_file(p).map_err(ActuatorError::BadInput)?), true),
                _ => (None, false),
            },
        };
        drop(state);
        let interval_ns = poll_interval.as_nanos().min(u128::from(u64::MAX)) as u64;
        let found = config::discover(
            &target,
            opts.dbs.config,
            opts.dbs.appl,
            opts.switch_name.as_deref(),
            recording.as_ref(),
            interval_ns,
        )?;
        if let Err(why) = conn::can_fence(&target, opts.dbs.config).map_err(ActuatorError::Failed)? {
            return Err(ActuatorError::BadInput(format!(
                "{}: the actuator must be able to run CLIENT ID, CLIENT LIST and CLIENT KILL ID (Redis 5.0 or \
                 newer; with ACLs, +client|id +client|list +client|kill) to fence off a transaction that timed out, \
                 and it cannot: {why}",
                target.named(opts.dbs.config)
            )));
        }
        if let Err(why) = conn::can_transact(&target, opts.dbs.config).map_err(ActuatorError::Failed)? {
            return Err(ActuatorError::BadInput(format!(
                "{}: the actuator must be able to run WATCH, UNWATCH, MULTI and EXEC (with ACLs, \
                 +@transaction) to write a change whole, and it cannot: {why}",
                target.named(opts.dbs.config)
            )));
        }
        let caps = found.caps;
        let switch = caps.queues[0].key.switch.clone();
        if let Some(rec) = &recording {
            // A recording of another name on the same Redis is most likely this switch under a
            // mistyped --switch-name (or a hostname changed since): a restore would undo all of
            // ecn-tuner's changes to fix a typo.
            if let (Some(given), true) = (&opts.switch_name, rec.switch != switch) {
                return Err(ActuatorError::BadInput(format!(
                    "--switch-name {given:?}: the recording of the original profiles in this Redis is of switch \
                     {:?}; give that name (or leave the flag out for the hostname), or, if this is another \
                     switch, run `ecn-tuner sonic restore --switch-name {:?}` first",
                    rec.switch, rec.switch
                )));
            }
            rec.check_belongs(&switch, opts.dbs.config, &found.layout.queues).map_err(|e| {
                ActuatorError::BadInput(match &opts.originals_file {
                    // The file will be put back into STATE_DB as this switch's original state.
                    Some(p) if from_file => {
                        format!("{}: {e}; move the file away to record this switch afresh", p.display())
                    }
                    // A recording taken before a controlled queue existed cannot undo what
                    // ecn-tuner writes to it: `sonic restore` would leave that queue on a profile
                    // of ours.
                    _ => format!(
                        "STATE_DB (db {}) {}: {e}; run `ecn-tuner sonic restore` to put back what it holds, and \
                         the actuator then records this switch afresh",
                        opts.dbs.state,
                        schema::RECORDING_KEY
                    ),
                })
            })?;
        }
        // Start-up warnings about what telemetry can read, and the PFC priorities of each
        // queue: a connection that fails here skips the warnings and keeps SONiC's default map
        // (the writer's own connection reports Redis being away).
        let mut pfc = None;
        if let Ok(mut con) = target.connect(opts.dbs.config, "ecn-tuner-discover") {
            warn_of_slower_counters(&mut con, poll_interval);
            pfc = Some(pfc_priorities(&mut con, &found.layout.queues));
        }
        let pfc = pfc.unwrap_or_else(|| found.layout.queues.iter().map(|q| vec![q.queue]).collect());
        let readback = readback(&target, &opts, poll_interval, &found.layout, &found.initial);
        let programmed_at = readback.shown_at.clone();
        let settings = Arc::new(Mutex::new(found.initial.clone()));
        let stop = Arc::new(AtomicBool::new(false));
        let unsettled = Arc::new(AtomicBool::new(false));
        let writer_reading = Arc::new(AtomicBool::new(false));
        info!(
            url = %target.url(),
            switch = %switch,
            queues = caps.queues.len(),
            profiles = found.layout.originals.len(),
            buffer_bytes = caps.buffer_bytes,
            recorded_originals = recording.is_some(),
            "SONiC switch found"
        );

        let writer = Writer {
            target: target.clone(),
            dbs: opts.dbs,
            switch: switch.clone(),
            layout: found.layout.clone(),
            con: None,
            recorder: Recorder::new(opts.originals_file.clone()),
            applied: found.initial.clone(),
            unfenced: None,
            unsettled: unsettled.clone(),
            reading: writer_reading.clone(),
            retry: opts.timeout,
            settle_warned: None,
            readback,
            drift_every: poll_interval.saturating_mul(DRIFT_CHECK_POLLS),
            drift: None,
            gone: Vec::new(),
            tried: None,
        };
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let writer_thread = std::thread::Builder::new()
            .name("ecn-sonic-writer".into())
            .spawn(move || writer.run(jobs_rx))
            .map_err(|e| ActuatorError::Failed(format!("cannot start the writer thread: {e}")))?;

        let (tx, _) = broadcast::channel(1024);
        let weak = tx.downgrade();
        let epoch = Instant::now();
        let poller = counters::Poller {
            target,
            db: opts.dbs.counters,
            config_db: opts.dbs.config,
            queues: found
                .layout
                .queues
                .iter()
                .zip(&caps.queues)
                .zip(pfc)
                .map(|((q, c), pfc_priorities)| counters::PolledQueue {
                    queue: q.clone(),
                    link_bps: c.link_bps,
                    id: pb::QueueId { switch: c.key.switch.clone(), port: c.key.port.clone(), queue: c.key.queue },
                    pfc_priorities,
                })
                .collect(),
            interval: poll_interval,
            width: CounterWidth(opts.counter_bits),
            settings: settings.clone(),
            tx,
            stop: stop.clone(),
            epoch,
            frozen_after: opts.frozen_after,
            resets_logged: Default::default(),
            garbled_logged: Default::default(),
        };
        let poller_thread = std::thread::Builder::new()
            .name("ecn-sonic-poller".into())
            .spawn(move || poller.run())
            .map_err(|e| ActuatorError::Failed(format!("cannot start the telemetry thread: {e}")))?;
        Ok(SonicBackend {
            caps,
            settings,
            jobs: Mutex::new(Some(jobs_tx)),
            telemetry: weak,
            stop,
            unsettled,
            writer_thread: Mutex::new(Some(writer_thread)),
            writer_reading,
            poller_thread: Mutex::new(Some(poller_thread)),
            poller_patience: poll_interval + opts.timeout.saturating_mul(2),
            epoch,
            poll_interval,
            write_started_ns: AtomicU64::new(0),
            programmed_at,
        })
    }
}

/// ASIC_DB read-back for this switch, on if its ASIC_DB shows what CONFIG_DB holds now; logged
/// either way, since it decides when a write counts as in effect.
fn readback(
    target: &RedisTarget,
    opts: &SonicOptions,
    poll_interval: Duration,
    layout: &Layout,
    now: &[EcnSetting],
) -> Readback {
    let mut rb = Readback::new(target.clone(), opts.dbs, layout.queues.clone(), opts.program_timeout);
    match rb.discover(now) {
        Ok(()) => info!(
            timeout = ?opts.program_timeout,
            "ASIC_DB shows the queues' WRED curves: a write counts as done once orchagent has programmed it there"
        ),
        Err(why) => info!(
            allowance = ?poll_interval,
            "no ASIC_DB read-back ({why}): a write counts as in effect one poll interval after CONFIG_DB took it \
             (tried again before writes)"
        ),
    }
    rb
}

/// Wait for `rx` without stalling the async runtime: on a multi-threaded runtime's worker the
/// runtime moves its other tasks elsewhere meanwhile.
fn wait<T>(rx: &mpsc::Receiver<T>) -> Result<T, mpsc::RecvError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(|| rx.recv()),
        _ => rx.recv(),
    }
}

impl Backend for SonicBackend {
    fn capabilities(&self) -> &BackendCaps {
        &self.caps
    }

    fn keeps_changes_across_restarts(&self) -> bool {
        true
    }

    fn in_doubt(&self) -> bool {
        self.unsettled.load(Ordering::SeqCst)
    }

    fn read_settings(&self) -> Vec<EcnSetting> {
        self.settings.lock().expect("sonic settings lock").clone()
    }

    fn apply(&self, settings: &[EcnSetting]) -> Result<(), BackendError> {
        if settings.len() != self.caps.queues.len() {
            return Err(BackendError(format!("expected {} settings, got {}", self.caps.queues.len(), settings.len())));
        }
        if let Some((q, e)) = settings.iter().enumerate().find_map(|(q, s)| s.validate().err().map(|e| (q, e))) {
            return Err(BackendError(format!("queue {}: {e}", self.caps.queues[q].key)));
        }
        self.write_started_ns.store(counters::clock_ns(self.epoch, Instant::now()), Ordering::SeqCst);
        let (reply, rx) = mpsc::sync_channel(1);
        let job = Job { settings: settings.to_vec(), reply };
        let sent = self.jobs.lock().expect("sonic jobs lock").as_ref().map(|j| j.send(job).is_ok()).unwrap_or(false);
        if !sent {
            return Err(BackendError("the SONiC writer has stopped".into()));
        }
        match wait(&rx) {
            Ok(Ok(())) => {
                *self.settings.lock().expect("sonic settings lock") = settings.to_vec();
                Ok(())
            }
            Ok(Err(e)) => Err(BackendError(e)),
            Err(_) => Err(BackendError("the SONiC writer stopped during the apply".into())),
        }
    }

    fn subscribe_telemetry(&self) -> Result<TelemetryReceiver, NoTelemetry> {
        self.telemetry
            .upgrade()
            .map(|t| t.subscribe())
            .ok_or_else(|| NoTelemetry::Stopped("the COUNTERS_DB poller has stopped (see the actuator's log)".into()))
    }

    /// The write is in CONFIG_DB when `apply` returns; orchagent programs the ASIC from it on
    /// its own schedule. With ASIC_DB read-back, `apply` returned once ASIC_DB showed it, and
    /// every interval that starts after that was counted under the new settings. Without, one
    /// poll interval is allowed for it (usually milliseconds are enough).
    fn write_times(&self) -> Option<WriteTimes> {
        let shown = *self.programmed_at.lock().expect("sonic readback lock");
        Some(WriteTimes {
            landed_ns: self.write_started_ns.load(Ordering::SeqCst),
            in_effect_from_ns: counters::clock_ns(
                self.epoch,
                shown.unwrap_or_else(|| Instant::now() + self.poll_interval),
            ),
        })
    }

    /// The poller's clock now; its newest sample is at most one poll interval older.
    fn telemetry_now_ns(&self) -> Option<u64> {
        Some(counters::clock_ns(self.epoch, Instant::now()))
    }

    fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs.lock().expect("sonic jobs lock").take();
        // One deadline for both: what only reads is not waited for past it.
        let deadline = Instant::now() + self.poller_patience;
        if let Some(t) = self.writer_thread.lock().expect("sonic threads lock").take() {
            // A write under way ends first, however long it takes.
            let reading = || self.writer_reading.load(Ordering::SeqCst);
            join_until(
                t,
                deadline,
                reading,
                "the CONFIG_DB writer (comparing CONFIG_DB with the settings last applied)",
            );
        }
        if let Some(t) = self.poller_thread.lock().expect("sonic threads lock").take() {
            join_until(t, deadline, || true, "the COUNTERS_DB poller");
        }
    }
}

/// Wait for thread `t` to end, but not past `deadline` while `only_reading` says it only
/// reads: then it is left behind (named `what` in the warning), its read not waited for.
fn join_until(t: JoinHandle<()>, deadline: Instant, only_reading: impl Fn() -> bool, what: &str) {
    while !t.is_finished() && (Instant::now() < deadline || !only_reading()) {
        std::thread::sleep(Duration::from_millis(10));
    }
    if t.is_finished() {
        let _ = t.join();
    } else {
        warn!("{what} is still waiting on Redis; stopping without waiting for that read");
    }
}

impl Drop for SonicBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The writer thread's state: the CONFIG_DB connection and what it last saw there.
struct Writer {
    target: RedisTarget,
    dbs: DbIndices,
    switch: String,
    layout: Layout,
    /// The CONFIG_DB connection and its server-side client id.
    con: Option<(Connection, i64)>,
    recorder: Recorder,
    /// The settings the service was last told are in effect.
    applied: Vec<EcnSetting>,
    /// A connection whose failed transaction may still run: its client id, until fenced off.
    unfenced: Option<i64>,
    /// Whether CONFIG_DB may hold something other than `applied`: a transaction failed and
    /// was not yet fenced off and read back. Shared with the backend ([`Backend::in_doubt`]).
    unsettled: Arc<AtomicBool>,
    /// How long to wait between attempts to fence while idle.
    retry: Duration,
    /// When settling last failed with a warning (see [`Writer::settle`]).
    settle_warned: Option<Instant>,
    /// ASIC_DB read-back, where the switch's ASIC_DB can be read.
    readback: Readback,
    /// Set while it only reads (comparing CONFIG_DB with the settings last applied).
    reading: Arc<AtomicBool>,
    /// How often, while idle, CONFIG_DB is compared with the settings last applied.
    drift_every: Duration,
    /// The edit from outside last warned of, while it stands: each new one is warned of (a
    /// queue more, or another curve), and a write that sets it again ends it.
    drift: Option<Drift>,
    /// Controlled queues (indices into the layout) whose `QUEUE` entry was gone from CONFIG_DB
    /// at the last apply: their port removed, most likely.
    gone: Vec<usize>,
    /// The settings of the last transaction sent: where CONFIG_DB shows them instead of the
    /// settings last applied, that is a write of ours in doubt or being undone, not an edit.
    tried: Option<Vec<EcnSetting>>,
}

/// How often a write-back that keeps failing after a failed transaction is warned of.
const SETTLE_WARN_EVERY: Duration = Duration::from_secs(60);

/// How many of the other queues an edit from outside reached the drift warning names.
const DRIFT_NAMED: usize = 5;

/// How many of the curves an edit from outside shows the drift warning names.
const DRIFT_CURVES: usize = 3;

/// An edit from outside: every queue it reached (layout index) with the curve CONFIG_DB
/// shows for it, which tells one edit from the next.
type Drift = Vec<(usize, Option<Curve>)>;

impl Writer {
    fn run(mut self, jobs: mpsc::Receiver<Job>) {
        loop {
            let unsettled = self.unsettled.load(Ordering::SeqCst);
            let job = match jobs.recv_timeout(if unsettled { self.retry } else { self.drift_every }) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match job {
                Some(job) => {
                    self.readback.rediscover(&self.applied);
                    let r = self.apply(&job.settings).and_then(|()| {
                        // A gone queue was not written: orchagent has nothing to program for it.
                        let written = self.keeping_gone(&job.settings);
                        self.await_programmed(&written)
                    });
                    match &r {
                        Ok(()) => self.applied = job.settings,
                        // A write of any kind: an apply, a rollback or a deadline revert (the
                        // service says which in its own log and journal).
                        Err(e) => warn!("CONFIG_DB write failed: {e}"),
                    }
                    let _ = job.reply.send(r);
                }
                None if unsettled => self.settle(),
                None => {
                    self.reading.store(true, Ordering::SeqCst);
                    self.check_drift();
                    self.reading.store(false, Ordering::SeqCst);
                }
            }
        }
        if self.unsettled.load(Ordering::SeqCst) {
            self.settle();
        }
        debug!("SONiC writer stopped");
    }

    /// Make good on a failed apply whose transaction may still run, or ran unseen: fence it
    /// off, read CONFIG_DB, and put the settings last applied back if it ran.
    /// A failure is warned of at first and then once a minute (retries come every
    /// `--redis-timeout` for as long as Redis refuses or is away); the others are debug lines.
    fn settle(&mut self) {
        let applied = self.applied.clone();
        match self.apply(&applied) {
            Ok(()) => {
                self.settle_warned = None;
                info!("CONFIG_DB holds the settings last applied again: the failed transaction is settled")
            }
            Err(e) if self.settle_warned.is_none_or(|at| at.elapsed() >= SETTLE_WARN_EVERY) => {
                self.settle_warned = Some(Instant::now());
                warn!(
                    retry_every = ?self.retry,
                    "cannot yet put the settings last applied back after a failed transaction (it may still land, \
                     or landed in part), retrying: {e}"
                )
            }
            Err(e) => debug!("cannot yet put the settings last applied back, retrying: {e}"),
        }
    }

    /// Compare CONFIG_DB with the settings last applied, and log when an edit from outside
    /// (an operator, `config reload`, which loads the saved configuration) appears, when another
    /// follows, and when it is gone. Nothing is written here: the next write sets every
    /// controlled queue again (and says so), and until then the actuator reports the settings
    /// last applied.
    fn check_drift(&mut self) {
        let now = match self.read(config::read_snapshot) {
            Ok(now) => now,
            Err(e) => {
                debug!("cannot compare CONFIG_DB with the settings last applied: {e}");
                self.con = None;
                return;
            }
        };
        let drift = self.outside_edit(&now);
        match (&self.drift, &drift) {
            (_, Some(d)) if self.drift.as_ref() != Some(d) => warn!(
                "{}: changed outside ecn-tuner (an operator, `config reload`?); the actuator reports the settings \
                 last applied until its next write, which sets every controlled queue again",
                self.described(d)
            ),
            (Some(_), None) => info!("CONFIG_DB holds the settings last applied again"),
            _ => {}
        }
        self.drift = drift;
    }

    /// How CONFIG_DB (`now`) differs from the settings last applied where it does not show the
    /// last transaction sent either (ours, in doubt or being undone), gone queues aside: an
    /// edit from outside, every queue it reached with the curve it shows (an edit of a shared
    /// profile reaches every queue bound to it).
    fn outside_edit(&self, now: &Snapshot) -> Option<Drift> {
        let ours =
            |q: usize, shown: Option<Curve>| self.tried.as_ref().is_some_and(|t| shown == Some(effective(&t[q])));
        let queues: Drift = config::differs(&self.layout, now, &self.applied)
            .into_iter()
            .filter(|&(q, shown)| !self.gone.contains(&q) && !ours(q, shown))
            .collect();
        (!queues.is_empty()).then_some(queues)
    }

    /// An edit from outside in words, a group per curve it shows.
    fn described(&self, drift: &Drift) -> String {
        let mut groups: Vec<(Option<Curve>, Vec<usize>)> = Vec::new();
        for &(q, shown) in drift {
            match groups.iter_mut().find(|(c, _)| *c == shown) {
                Some((_, qs)) => qs.push(q),
                None => groups.push((shown, vec![q])),
            }
        }
        let said: Vec<String> = groups
            .iter()
            .take(DRIFT_CURVES)
            .map(|(shown, qs)| {
                let shown = shown.map_or("no WRED curve".to_string(), |c| format!("{c:?}"));
                let others = match &qs[1..] {
                    [] => String::new(),
                    rest => {
                        let names: Vec<String> =
                            rest.iter().take(DRIFT_NAMED).map(|&i| self.layout.queues[i].name()).collect();
                        let more = if rest.len() > DRIFT_NAMED { ", ..." } else { "" };
                        format!(" (and {} other queues: {}{more})", rest.len(), names.join(", "))
                    }
                };
                format!(
                    "queue {} at {shown}, not the settings last applied, {:?} (Kmin, Kmax, percent){others}",
                    self.layout.queues[qs[0]].name(),
                    effective(&self.applied[qs[0]])
                )
            })
            .collect();
        let more = match groups.len().saturating_sub(DRIFT_CURVES) {
            0 => String::new(),
            n => format!("; and {n} more curves"),
        };
        format!("CONFIG_DB shows {}{more}", said.join("; "))
    }

    /// With ASIC_DB read-back, wait until orchagent has programmed `settings` (just written to
    /// CONFIG_DB), and note when ASIC_DB showed them. A write not programmed within
    /// `--program-timeout` (orchagent busy, stopped, or refusing what the ASIC cannot do) is
    /// undone: CONFIG_DB gets the settings last applied back and the apply fails, so that
    /// the device is where the service believes it is.
    fn await_programmed(&mut self, settings: &[EcnSetting]) -> Result<(), String> {
        let rb = &mut self.readback;
        if !rb.is_on() {
            return Ok(());
        }
        *rb.shown_at.lock().expect("sonic readback lock") = None;
        let deadline = Instant::now() + rb.timeout;
        let why = loop {
            match rb.differs(settings, &self.gone) {
                Ok(None) => {
                    *rb.shown_at.lock().expect("sonic readback lock") = Some(Instant::now());
                    return Ok(());
                }
                Ok(Some(why)) if Instant::now() >= deadline => break why,
                Err(e) if Instant::now() >= deadline => break format!("ASIC_DB cannot be read: {e}"),
                _ => std::thread::sleep(READBACK_PERIOD),
            }
        };
        let timeout = rb.timeout;
        let previous = self.applied.clone();
        match self.apply(&previous) {
            Ok(()) => Err(format!(
                "CONFIG_DB took the write, but orchagent did not program it within --program-timeout {timeout:?} \
                 ({why}); CONFIG_DB holds the previous settings again"
            )),
            Err(e) => {
                // CONFIG_DB may hold a write the service was told failed: keep putting the
                // previous settings back, as after a transaction in doubt.
                self.unsettled.store(true, Ordering::SeqCst);
                Err(format!(
                    "CONFIG_DB took the write, but orchagent did not program it within --program-timeout \
                     {timeout:?} ({why}), and putting the previous settings back failed ({e}); the actuator \
                     retries until it succeeds"
                ))
            }
        }
    }

    /// `settings`, with each gone queue's replaced by the settings last applied to it.
    fn keeping_gone(&self, settings: &[EcnSetting]) -> Vec<EcnSetting> {
        let mut out = settings.to_vec();
        for &i in &self.gone {
            out[i] = self.applied[i];
        }
        out
    }

    /// The CONFIG_DB connection, opened if there is none.
    fn connection(&mut self) -> Result<&mut Connection, String> {
        self.connected().map(|(con, _)| con)
    }

    /// The CONFIG_DB connection with its client id, opened if there is none.
    fn connected(&mut self) -> Result<&mut (Connection, i64), String> {
        if self.con.is_none() {
            let mut con = self.target.connect(self.dbs.config, CONFIG_CONNECTION)?;
            let id = conn::client_id(&mut con).map_err(|e| {
                format!(
                    "Redis at {}: CLIENT ID failed ({}); ecn-tuner needs Redis 5.0 or newer",
                    self.target.url(),
                    conn::said(&e)
                )
            })?;
            self.con = Some((con, id));
        }
        Ok(self.con.as_mut().expect("connected"))
    }

    /// Close the server side of the connection a failed transaction went out on, so that it
    /// cannot run after what we read next.
    fn fence(&mut self) -> Result<(), String> {
        let Some(id) = self.unfenced else { return Ok(()) };
        let url = self.target.url().to_string();
        let (con, own) = self.connected()?;
        match conn::fence_client(con, *own, id, CONFIG_CONNECTION).map_err(|e| {
            format!("Redis at {url}: fencing off client {id} (CLIENT LIST, CLIENT KILL ID): {}", conn::said(&e))
        })? {
            conn::Fenced::Killed => debug!(client = id, "fenced off the connection of a failed transaction"),
            conn::Fenced::Gone => debug!(client = id, "the connection of a failed transaction is closed already"),
            conn::Fenced::NotOurs { name } => info!(
                client = id,
                other = %name,
                "the failed transaction's client id now names another connection (Redis restarted, closing ours); \
                 left open"
            ),
        }
        self.unfenced = None;
        Ok(())
    }

    /// Read the managed tables with `reader` ([`config::read_snapshot`], or
    /// [`config::read_snapshot_watched`] to watch them until the next transaction or
    /// [`Writer::unwatch`]).
    fn read(&mut self, reader: fn(&mut Connection) -> redis::RedisResult<Snapshot>) -> Result<Snapshot, String> {
        let db = self.dbs.config;
        let url = self.target.url().to_string();
        let reused = self.con.is_some();
        let mut read = reader(self.connection()?);
        // A connection Redis closed while it idled (`CLIENT KILL`, its idle-client timeout)
        // failed the next Apply: the read, which changes nothing, is tried once more on a new
        // connection. (A failed transaction's connection is fenced off before this.)
        if matches!(&read, Err(e) if reused && e.is_connection_dropped()) {
            self.con = None;
            read = reader(self.connection()?);
        }
        read.map_err(|e| format!("Redis at {url} (db {db}): {}", conn::said(&e)))
    }

    /// Stop watching (no transaction follows); a failure drops the connection instead.
    fn unwatch(&mut self) {
        let done = self.con.as_mut().map(|(con, _)| redis::cmd("UNWATCH").query::<()>(con));
        if matches!(done, Some(Err(_))) {
            self.con = None;
        }
    }

    fn apply(&mut self, settings: &[EcnSetting]) -> Result<(), String> {
        let r = self.try_apply(settings);
        if r.is_ok() {
            self.unsettled.store(false, Ordering::SeqCst);
        } else {
            self.con = None;
        }
        r
    }

    fn try_apply(&mut self, settings: &[EcnSetting]) -> Result<(), String> {
        self.fence()?;
        // Plan from what CONFIG_DB holds now, read at every apply: a write we could not
        // confirm, or an operator's edit since the last apply (a queue we do not control bound
        // to a profile we would edit in place), must not be planned around. The keys read are
        // watched, so one edited before our EXEC makes the transaction a no-op.
        let model = self.read(config::read_snapshot_watched)?;
        // A controlled queue whose entry is gone (its port removed) is not written (the plan
        // never writes a binding back), and keeps its last settings in the plan, so that it
        // shapes no shared profile; every other queue is written as asked, so that a revert or
        // a fallback never waits for it.
        let gone: Vec<usize> = (0..self.layout.queues.len())
            .filter(|&i| !model.queues.contains_key(&self.layout.queues[i].name()))
            .collect();
        if gone != self.gone {
            let names: Vec<String> = gone.iter().map(|&i| self.layout.queues[i].name()).collect();
            if !names.is_empty() {
                warn!(
                    queues = %names.join(", "),
                    "controlled queues are gone from CONFIG_DB (a port removed?): they are no longer written; restart \
                     the actuator to control the queues the switch has now"
                );
            }
            self.gone = gone;
        }
        // An edit from outside that no comparison has caught yet (one made within a poll of
        // this write) is overwritten here: say so, with what it was, before it goes.
        if let Some(d) = self.outside_edit(&model).filter(|d| self.drift.as_ref() != Some(d)) {
            warn!(
                "{}: changed outside ecn-tuner (an operator, `config reload`?); this write sets every controlled \
                 queue again",
                self.described(&d)
            );
            self.drift = Some(d);
        }
        let settings = self.keeping_gone(settings);
        let t = config::target(&self.layout, &model, &settings);
        let ops = config::plan(&self.layout, &model, &t);
        if ops.is_empty() {
            self.unwatch();
            return Ok(());
        }
        // An error drops the connection (`apply`), and its watch with it.
        if let Some((profile, queue)) = config::reaches_uncontrolled(&self.layout, &model, &ops) {
            return Err(format!(
                "WRED_PROFILE|{profile} would change, and QUEUE|{queue}, which this actuator does not control, \
                 uses it; nothing was written (bind that queue to another profile)"
            ));
        }
        {
            let (target, dbs, switch) = (self.target.clone(), self.dbs, self.switch.clone());
            // The tables were just read: they are what the recording must hold.
            self.recorder.ensure(&target, &dbs, &|| Ok(model.clone()), &switch, &self.layout.queues)?;
        }
        let url = self.target.url().to_string();
        let db = self.dbs.config;
        self.tried = Some(settings);
        let con = self.connection()?;
        let e = match config::exec(con, &ops) {
            Ok(config::Ran::Done) => {
                debug!(writes = ops.len(), "CONFIG_DB transaction done");
                // Whatever stood from outside is written over now.
                self.drift = None;
                return Ok(());
            }
            Ok(config::Ran::Aborted) => {
                return Err("another client changed a WRED profile or queue binding while this apply was planned; \
                     nothing was written (the next apply plans from the new tables)"
                    .into())
            }
            Ok(config::Ran::Refused(e)) => {
                return Err(format!("Redis at {url} (db {db}) refused the transaction: {e}; nothing was written"))
            }
            Ok(ran @ (config::Ran::Partial { .. } | config::Ran::Unguarded(_))) => {
                // CONFIG_DB holds part of this write: the writer puts the settings last applied
                // back (`settle`), as after a transaction that may have landed unseen.
                self.unsettled.store(true, Ordering::SeqCst);
                return Err(format!(
                    "Redis at {url} (db {db}): {}; CONFIG_DB may hold part of this write, and the settings last \
                     applied are written back",
                    ran.failure().unwrap_or_default()
                ));
            }
            Err(e) => e,
        };
        // Did EXEC run, or can it still? Fence the connection off, then look.
        let what = format!("Redis at {url} (db {db}) during the transaction: {}", conn::said(&e));
        self.unfenced = self.con.take().map(|(_, id)| id);
        self.unsettled.store(true, Ordering::SeqCst);
        if let Err(again) = self.fence() {
            return Err(format!(
                "{what}; cannot reach Redis to fence the transaction off ({again}): if it still lands, the \
                 actuator puts the previous settings back as soon as it reaches Redis"
            ));
        }
        match self.read(config::read_snapshot) {
            Ok(now) if config::shows(&self.layout, &now, &t) => {
                warn!("{what}; the transaction had landed (read back), so the apply is done");
                Ok(())
            }
            Ok(_) => {
                self.unsettled.store(false, Ordering::SeqCst);
                Err(format!("{what}; nothing changed (MULTI/EXEC: all or nothing; the connection is fenced off)"))
            }
            Err(again) => Err(format!(
                "{what}; cannot read CONFIG_DB back ({again}): it holds either the old or the new settings \
                 (one transaction, fenced off), and the next apply starts from what it holds then"
            )),
        }
    }
}

/// The switch's Redis at `redis`, with the databases of `elsewhere` on their own instances, as
/// the `--database-config` at `map` placed them where one did.
fn redis_target(
    redis: &str,
    elsewhere: &[(i64, String)],
    map: Option<&std::path::Path>,
    timeout: Duration,
    password: Option<&str>,
) -> Result<RedisTarget, ActuatorError> {
    let mut target = RedisTarget::parse(redis, timeout, password).map_err(ActuatorError::BadInput)?.placed_by(map);
    for (db, url) in elsewhere {
        target = target.with_database_at(*db, url, password).map_err(ActuatorError::BadInput)?;
    }
    Ok(target)
}

/// `ecn-tuner sonic restore`: put the recorded original profiles and bindings back.
pub fn restore(
    at: &layout::DbLayout,
    from: Option<&std::path::Path>,
    switch_name: Option<&str>,
    timeout: Duration,
    password: Option<&str>,
) -> Result<originals::RestoreReport, ActuatorError> {
    let (dbs, map) = (at.dbs, at.map.as_deref());
    let target = redis_target(&at.url, &at.elsewhere, map, timeout, password)?;
    // The file is the user's input: a missing or malformed one is refused before Redis.
    let from = from
        .map(|p| originals::Recording::read_file(p).map(|rec| (p, rec)))
        .transpose()
        .map_err(|e| ActuatorError::BadInput(format!("--from {e}")))?;
    // The two databases a restore reads and writes: an index Redis lacks is the flag's error.
    let used: Vec<(&str, i64)> =
        dbs.by_flag().into_iter().filter(|(flag, _)| schema::RESTORE_DB_FLAGS.contains(flag)).collect();
    check_databases(&target, &used)?;
    originals::restore(&target, &dbs, from, switch_name)
}
