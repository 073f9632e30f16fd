//! A SONiC switch's Redis for end-to-end tests: a real `redis-server` on a free loopback port
//! with a scratch directory, seeded with CONFIG_DB and COUNTERS_DB content shaped like a SONiC
//! switch's (REFERENCE.md §7), and counters that advance as the switch's flex counters would.
//!
//! - [`RedisServer`]: the server process (never a system one), killed when dropped;
//! - [`Spec`] and [`seed`]: what the switch looks like: 32 ports `Ethernet0`..`Ethernet124`
//!   (step 4), lossless queues 3 and 4 bound to `AZURE_LOSSLESS` (SONiC's default lossless
//!   profile), buffer pools, ports' speed, the counter name maps;
//! - [`Counters`]: the switch's counters in memory, advanced by [`Traffic`] and written back,
//!   with a configurable width (32 bits to see wraps) and resets (`sonic-clear counters`);
//! - [`Proxy`]: a TCP relay that can cut every connection and refuse new ones, to take Redis
//!   away from the actuator while a test still reads it directly;
//! - [`Orchagent`]: programs CONFIG_DB's WRED profiles into ASIC_DB, late or not at all, and
//!   restarts cold (new queue object ids, the name map published later);
//! - [`tables`]: `HGETALL` of every `WRED_PROFILE` and `QUEUE` key, to compare byte for byte.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// SONiC's database indices (database_config.json).
pub const APPL_DB: i64 = 0;
/// ASIC_DB.
pub const ASIC_DB: i64 = 1;
/// COUNTERS_DB.
pub const COUNTERS_DB: i64 = 2;
/// CONFIG_DB.
pub const CONFIG_DB: i64 = 4;
/// STATE_DB.
pub const STATE_DB: i64 = 6;

/// The `redis-server` binary: `REDIS_SERVER` or the one on `PATH`.
pub fn redis_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("REDIS_SERVER") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|d| d.join("redis-server")).find(|p| p.exists()))
        .unwrap_or_default();
    found.unwrap_or_else(|| {
        panic!("redis-server is not installed: `apt-get install redis-server` (scripts/test does it when run as root)")
    })
}

/// A `redis-server` child process on loopback, with its own directory.
pub struct RedisServer {
    /// Its port.
    pub port: u16,
    /// Its working directory (AOF files, log).
    pub dir: TempDir,
    durable: bool,
    child: Option<Child>,
}

impl RedisServer {
    /// A throw-away server: `--save '' --appendonly no`.
    pub fn start() -> RedisServer {
        Self::launch(false)
    }

    /// A server whose data survives SIGKILL and a restart: every write is in its append-only
    /// file before it is answered (`--appendonly yes --appendfsync always`).
    pub fn start_durable() -> RedisServer {
        Self::launch(true)
    }

    fn launch(durable: bool) -> RedisServer {
        let dir = tempfile::Builder::new().prefix("ecn-redis-").tempdir().expect("redis directory");
        let mut s = RedisServer { port: crate::ports::free_port(), dir, durable, child: None };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(redis_server_bin());
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"))
            .args(["--databases", "16", "--daemonize", "no"]);
        if self.durable {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let child =
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = self.try_con(0) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start; its log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A server someone else runs on `127.0.0.1:port` (never killed by this handle).
    pub fn attach(port: u16) -> RedisServer {
        let dir = tempfile::Builder::new().prefix("ecn-redis-attached-").tempdir().expect("scratch directory");
        RedisServer { port, dir, durable: false, child: None }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    fn try_con(&self, db: i64) -> redis::RedisResult<redis::Connection> {
        let url = format!("{}/{db}", self.url());
        redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A connection to database `db`. An I/O error is tried again a few times: redis-rs reads
    /// its set-up replies on a socket with a receive timeout, which the kernel does not restart
    /// after a signal, so a SIGCHLD (another test's child exiting) failed it with EINTR.
    pub fn con(&self, db: i64) -> redis::Connection {
        let mut tries = 0;
        loop {
            match self.try_con(db) {
                Ok(con) => return con,
                Err(e) if e.is_io_error() && tries < 5 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("connect to the test redis-server: {e}"),
            }
        }
    }

    /// The server's process id, while it runs (to stop it with SIGSTOP, as a hung host).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// SIGKILL the server: no chance to save or to answer anyone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and directory (a durable server reloads its data).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The shape of the seeded switch.
#[derive(Debug, Clone)]
pub struct Spec {
    /// `DEVICE_METADATA|localhost` hostname.
    pub hostname: String,
    /// Port names.
    pub ports: Vec<String>,
    /// Port speed, Mb/s.
    pub speed_mbps: u64,
    /// The lossless queues, bound to WRED profiles.
    pub lossless: Vec<u32>,
    /// Bind queue 4 to a second profile, `AZURE_LOSSLESS_Q4`, instead of `AZURE_LOSSLESS`.
    pub two_profiles: bool,
    /// Write references as SONiC did before 202106: `[WRED_PROFILE|AZURE_LOSSLESS]`.
    pub bracketed: bool,
    /// `BUFFER_POOL|egress_lossless_pool` size, bytes.
    pub egress_pool_bytes: u64,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            hostname: "sonic-leaf0".into(),
            ports: (0..32).map(|i| format!("Ethernet{}", i * 4)).collect(),
            speed_mbps: 100_000,
            lossless: vec![3, 4],
            two_profiles: false,
            bracketed: false,
            egress_pool_bytes: 32_099_072,
        }
    }
}

/// SONiC's default lossless WRED profile (as its QoS templates render it).
pub fn azure_lossless() -> Vec<(&'static str, &'static str)> {
    vec![
        ("wred_green_enable", "true"),
        ("wred_yellow_enable", "true"),
        ("wred_red_enable", "true"),
        ("ecn", "ecn_all"),
        ("green_max_threshold", "2097152"),
        ("green_min_threshold", "1048576"),
        ("yellow_max_threshold", "2097152"),
        ("yellow_min_threshold", "1048576"),
        ("red_max_threshold", "2097152"),
        ("red_min_threshold", "1048576"),
        ("green_drop_probability", "5"),
        ("yellow_drop_probability", "5"),
        ("red_drop_probability", "5"),
    ]
}

/// SAI object ids as SONiC shows them: `oid:0x1000000000002`.
pub fn port_oid(i: usize) -> String {
    format!("oid:0x{:x}", 0x1000000000002u64 + i as u64)
}

/// Queue oid of port `i`, queue `q`, as seeded.
pub fn queue_oid(i: usize, q: u32) -> String {
    queue_oid_after(0, i, q)
}

/// Queue oid of port `i`, queue `q` after syncd restarted cold `restarts` times: a cold
/// restart creates every SAI object afresh, under new ids.
pub fn queue_oid_after(restarts: u64, i: usize, q: u32) -> String {
    format!("oid:0x{:x}", 0x15000000000200u64 + restarts * 0x1000 + (i as u64) * 0x10 + u64::from(q))
}

/// `COUNTERS_QUEUE_NAME_MAP` (`Ethernet0:3` → oid) after `restarts` cold restarts.
fn queue_name_map(spec: &Spec, restarts: u64) -> Vec<(String, String)> {
    let mut map = Vec::new();
    for (i, p) in spec.ports.iter().enumerate() {
        for q in 0..8u32 {
            map.push((format!("{p}:{q}"), queue_oid_after(restarts, i, q)));
        }
    }
    map
}

fn hset(pipe: &mut redis::Pipeline, key: &str, fields: &[(&str, String)]) {
    let c = pipe.cmd("HSET").arg(key);
    for (f, v) in fields {
        c.arg(*f).arg(v);
    }
    c.ignore();
}

/// Seed CONFIG_DB, APPL_DB and COUNTERS_DB (counters at zero) of an empty server.
pub fn seed(server: &RedisServer, spec: &Spec) {
    let mut cfg = redis::pipe();
    hset(
        &mut cfg,
        "DEVICE_METADATA|localhost",
        &[
            ("hostname", spec.hostname.clone()),
            ("hwsku", "Force10-S6100".into()),
            ("platform", "x86_64-dell_s6100_c2538-r0".into()),
            ("type", "ToRRouter".into()),
            ("mac", "52:54:00:12:34:56".into()),
        ],
    );
    // Counter polling as `counterpoll queue|port|wredqueue enable` leaves it (SONiC's intervals):
    // the fixture publishes ECN marks, which SONiC polls only with wredqueue on.
    for group in ["QUEUE", "PORT", "WRED_ECN_QUEUE"] {
        hset(&mut cfg, &format!("FLEX_COUNTER_TABLE|{group}"), &[("FLEX_COUNTER_STATUS", "enable".into())]);
    }
    let lossless: Vec<(&str, String)> = azure_lossless().into_iter().map(|(k, v)| (k, v.to_string())).collect();
    hset(&mut cfg, "WRED_PROFILE|AZURE_LOSSLESS", &lossless);
    if spec.two_profiles {
        hset(&mut cfg, "WRED_PROFILE|AZURE_LOSSLESS_Q4", &lossless);
    }
    hset(
        &mut cfg,
        "BUFFER_POOL|egress_lossless_pool",
        &[("mode", "static".into()), ("size", spec.egress_pool_bytes.to_string()), ("type", "egress".into())],
    );
    hset(
        &mut cfg,
        "BUFFER_POOL|ingress_lossless_pool",
        &[
            ("mode", "dynamic".into()),
            ("size", "12766208".into()),
            ("type", "ingress".into()),
            ("xoff", "4194112".into()),
        ],
    );
    for (i, p) in spec.ports.iter().enumerate() {
        hset(
            &mut cfg,
            &format!("PORT|{p}"),
            &[
                ("admin_status", "up".into()),
                ("alias", format!("fortyGigE1/1/{}", i + 1)),
                ("lanes", format!("{},{},{},{}", 4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 4)),
                ("mtu", "9100".into()),
                ("speed", spec.speed_mbps.to_string()),
            ],
        );
        for q in 0..7u32 {
            let mut fields =
                vec![("scheduler", format!("scheduler.{}", if spec.lossless.contains(&q) { 1 } else { 0 }))];
            if spec.lossless.contains(&q) {
                let profile = if spec.two_profiles && q == 4 { "AZURE_LOSSLESS_Q4" } else { "AZURE_LOSSLESS" };
                fields.push((
                    "wred_profile",
                    if spec.bracketed { format!("[WRED_PROFILE|{profile}]") } else { profile.into() },
                ));
            }
            hset(&mut cfg, &format!("QUEUE|{p}|{q}"), &fields);
        }
    }
    cfg.query::<()>(&mut server.con(CONFIG_DB)).expect("seed CONFIG_DB");

    let mut appl = redis::pipe();
    for p in &spec.ports {
        hset(
            &mut appl,
            &format!("PORT_TABLE:{p}"),
            &[("speed", spec.speed_mbps.to_string()), ("oper_status", "up".into())],
        );
    }
    appl.query::<()>(&mut server.con(APPL_DB)).expect("seed APPL_DB");

    let mut ctr = redis::pipe();
    let ports: Vec<(&str, String)> = spec.ports.iter().enumerate().map(|(i, p)| (p.as_str(), port_oid(i))).collect();
    hset(&mut ctr, "COUNTERS_PORT_NAME_MAP", &ports);
    let queues = queue_name_map(spec, 0);
    let queue_refs: Vec<(&str, String)> = queues.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    hset(&mut ctr, "COUNTERS_QUEUE_NAME_MAP", &queue_refs);
    ctr.query::<()>(&mut server.con(COUNTERS_DB)).expect("seed COUNTERS_DB");
    let mut counters = Counters::new(spec, 64);
    counters.flush(&mut server.con(COUNTERS_DB)).expect("zero counters");
}

/// What each lossless queue carries per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traffic {
    /// Transmitted bits per second.
    pub bps: u64,
    /// Fraction of packets CE-marked.
    pub ecn_fraction: f64,
    /// Shared-buffer peak (watermark), bytes.
    pub watermark_bytes: u64,
    /// Fraction of time the queue is paused by PFC from downstream (with PAUSE frames received).
    pub paused_fraction: f64,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic { bps: 40_000_000_000, ecn_fraction: 0.02, watermark_bytes: 150_000, paused_fraction: 0.0 }
    }
}

/// Average packet size of the generated traffic.
pub const PACKET_BYTES: u64 = 1_000;

/// The switch's counters, in memory, written back to COUNTERS_DB by [`Counters::flush`].
pub struct Counters {
    spec: Spec,
    width_bits: u32,
    values: BTreeMap<(String, String), u64>,
    /// Per (port index, queue) traffic; queues not listed carry [`Counters::default_traffic`].
    pub traffic: BTreeMap<(usize, u32), Traffic>,
    /// Traffic of every lossless queue without its own entry.
    pub default_traffic: Traffic,
    /// Per (port index, queue) the PFC priority whose PAUSE frames pause it, for a port whose
    /// `pfc_to_queue_map` is not SONiC's default; queues not listed carry their own index.
    pub pfc_priority: BTreeMap<(usize, u32), u32>,
}

/// The queue counters SONiC's flex counter writes.
pub const QUEUE_FIELDS: [&str; 6] = [
    "SAI_QUEUE_STAT_PACKETS",
    "SAI_QUEUE_STAT_BYTES",
    "SAI_QUEUE_STAT_DROPPED_PACKETS",
    "SAI_QUEUE_STAT_DROPPED_BYTES",
    "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
    "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",
];

impl Counters {
    /// All counters at zero, `width_bits` wide (64 for SAI, 32 to see wraps soon).
    pub fn new(spec: &Spec, width_bits: u32) -> Counters {
        let mut values = BTreeMap::new();
        for i in 0..spec.ports.len() {
            for q in 0..8u32 {
                for f in QUEUE_FIELDS {
                    values.insert((format!("COUNTERS:{}", queue_oid(i, q)), f.to_string()), 0);
                }
            }
            for n in 0..8 {
                for f in ["RX_PKTS", "TX_PKTS", "RX_PAUSE_DURATION_US"] {
                    values.insert((format!("COUNTERS:{}", port_oid(i)), format!("SAI_PORT_STAT_PFC_{n}_{f}")), 0);
                }
            }
            for f in ["SAI_PORT_STAT_IF_IN_OCTETS", "SAI_PORT_STAT_IF_OUT_OCTETS"] {
                values.insert((format!("COUNTERS:{}", port_oid(i)), f.to_string()), 0);
            }
        }
        Counters {
            spec: spec.clone(),
            width_bits,
            values,
            traffic: BTreeMap::new(),
            default_traffic: Traffic::default(),
            pfc_priority: BTreeMap::new(),
        }
    }

    fn wrap(&self, v: u128) -> u64 {
        if self.width_bits >= 64 {
            v as u64
        } else {
            (v % (1u128 << self.width_bits)) as u64
        }
    }

    /// Add `delta` to a counter (wrapping at the width).
    pub fn add(&mut self, key: &str, field: &str, delta: u64) {
        let v = self.values.entry((key.to_string(), field.to_string())).or_default();
        let w = if self.width_bits >= 64 { u128::from(u64::MAX) + 1 } else { 1u128 << self.width_bits };
        *v = ((u128::from(*v) + u128::from(delta)) % w) as u64;
    }

    /// Set a counter (a gauge, or a counter placed near the top of its range).
    pub fn set(&mut self, key: &str, field: &str, value: u64) {
        let value = self.wrap(u128::from(value));
        self.values.insert((key.to_string(), field.to_string()), value);
    }

    /// A counter's value.
    pub fn get(&self, key: &str, field: &str) -> u64 {
        self.values.get(&(key.to_string(), field.to_string())).copied().unwrap_or(0)
    }

    /// Every counter of queue `q` of port index `i` back to zero, as `sonic-clear queuecounters`
    /// does.
    pub fn clear_queue(&mut self, i: usize, q: u32) {
        let key = format!("COUNTERS:{}", queue_oid(i, q));
        for f in QUEUE_FIELDS {
            self.values.insert((key.clone(), f.to_string()), 0);
        }
    }

    /// `dt` of traffic on every lossless queue.
    pub fn advance(&mut self, dt: Duration) {
        let secs = dt.as_secs_f64();
        for i in 0..self.spec.ports.len() {
            for q in self.spec.lossless.clone() {
                let t = self.traffic.get(&(i, q)).copied().unwrap_or(self.default_traffic);
                let bytes = (t.bps as f64 / 8.0 * secs * (1.0 - t.paused_fraction)) as u64;
                let pkts = bytes / PACKET_BYTES;
                let qk = format!("COUNTERS:{}", queue_oid(i, q));
                self.add(&qk, "SAI_QUEUE_STAT_BYTES", bytes);
                self.add(&qk, "SAI_QUEUE_STAT_PACKETS", pkts);
                self.add(&qk, "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS", (pkts as f64 * t.ecn_fraction) as u64);
                self.set(&qk, "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES", t.watermark_bytes);
                let pk = format!("COUNTERS:{}", port_oid(i));
                self.add(&pk, "SAI_PORT_STAT_IF_OUT_OCTETS", bytes);
                if t.paused_fraction > 0.0 {
                    let paused_us = (secs * t.paused_fraction * 1e6) as u64;
                    let p = self.pfc_priority.get(&(i, q)).copied().unwrap_or(q);
                    // One PAUSE frame per 50 µs of pause (a quanta refresh).
                    self.add(&pk, &format!("SAI_PORT_STAT_PFC_{p}_RX_PKTS"), paused_us / 50 + 1);
                    self.add(&pk, &format!("SAI_PORT_STAT_PFC_{p}_RX_PAUSE_DURATION_US"), paused_us);
                }
            }
        }
    }

    /// Write every counter to COUNTERS_DB in one round trip.
    pub fn flush(&mut self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        self.flush_fields(con, |_| true)
    }

    /// Write the counters whose field `only` takes to COUNTERS_DB in one round trip, as a flex
    /// counter group that polls some of them does.
    pub fn flush_fields(&mut self, con: &mut redis::Connection, only: impl Fn(&str) -> bool) -> redis::RedisResult<()> {
        let mut by_key: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
        for ((k, f), v) in self.values.iter().filter(|((_, f), _)| only(f)) {
            by_key.entry(k.as_str()).or_default().push((f.as_str(), *v));
        }
        let mut pipe = redis::pipe();
        for (k, fields) in by_key {
            let c = pipe.cmd("HSET").arg(k);
            for (f, v) in fields {
                c.arg(f).arg(v);
            }
            c.ignore();
        }
        pipe.query(con)
    }
}

/// Advances the counters on a thread every `tick` until dropped, as SONiC's flex counters do.
/// Redis errors (a test took the server away) are retried on a new connection.
pub struct Ticker {
    /// The counters; tests change their traffic (storms) through this.
    pub counters: Arc<Mutex<Counters>>,
    _thread: Background,
}

/// A thread that runs until its value is dropped: it should return soon after `stop` is set.
struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    fn spawn(run: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        Background { stop, thread: Some(std::thread::spawn(move || run(s))) }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Ticker {
    /// Start ticking on `server`'s COUNTERS_DB.
    pub fn start(server: &RedisServer, counters: Counters, tick: Duration) -> Ticker {
        Ticker::start_with_pfc_watchdog(server, counters, tick, None)
    }

    /// Start ticking on `server`'s COUNTERS_DB, and, given `watchdog`, write every queue's
    /// `SAI_QUEUE_STAT_PACKETS` that often in between, as SONiC's PFC watchdog group does (every
    /// 200 ms by default) while the queue group writes the rest every `tick`. Each write comes a
    /// period after the last one ends.
    pub fn start_with_pfc_watchdog(
        server: &RedisServer,
        counters: Counters,
        tick: Duration,
        watchdog: Option<Duration>,
    ) -> Ticker {
        let counters = Arc::new(Mutex::new(counters));
        let (c, url) = (counters.clone(), format!("{}/{COUNTERS_DB}", server.url()));
        let thread = Background::spawn(move |s| {
            let mut con: Option<redis::Connection> = None;
            let mut last = Instant::now();
            let (mut next_tick, mut next_watch) = (last + tick, watchdog.map(|w| last + w));
            while !s.load(Ordering::Relaxed) {
                let wake = next_watch.map_or(next_tick, |w| w.min(next_tick));
                std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                let now = Instant::now();
                let mut ctr = c.lock().unwrap();
                ctr.advance(now - last);
                last = now;
                let whole = now >= next_tick;
                if con.is_none() {
                    con = redis::Client::open(url.as_str())
                        .and_then(|cl| cl.get_connection_with_timeout(Duration::from_millis(500)))
                        .ok();
                    if let Some(c) = &con {
                        let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
                    }
                }
                if let Some(cn) = con.as_mut() {
                    let written =
                        if whole { ctr.flush(cn) } else { ctr.flush_fields(cn, |f| f == "SAI_QUEUE_STAT_PACKETS") };
                    if written.is_err() {
                        con = None;
                    }
                }
                drop(ctr);
                if whole {
                    next_tick = Instant::now() + tick;
                }
                next_watch = watchdog.map(|w| Instant::now() + w);
            }
        });
        Ticker { counters, _thread: thread }
    }
}

/// The part of SONiC's orchagent that ecn-tuner can see: it programs CONFIG_DB's WRED profiles
/// and queue bindings into ASIC_DB as SAI objects (`ASIC_STATE:SAI_OBJECT_TYPE_WRED:<oid>` with
/// the green curve, `ASIC_STATE:SAI_OBJECT_TYPE_QUEUE:<oid>` naming its WRED object), on a
/// thread, `lag` after it first sees CONFIG_DB change. While `stuck`, it programs nothing, as
/// an orchagent that is busy, stopped, or refusing what the ASIC cannot do.
pub struct Orchagent {
    /// Program nothing while set.
    pub stuck: Arc<AtomicBool>,
    asic: Arc<Mutex<Asic>>,
    spec: Spec,
    _thread: Background,
}

/// What orchagent programmed, and under which object ids.
struct Asic {
    /// CONFIG_DB's [`tables`] as last programmed.
    programmed: BTreeMap<String, Vec<(String, String)>>,
    wred: WredOids,
    /// Cold restarts so far: the queues' object ids are [`queue_oid_after`] this many.
    restarts: u64,
}

impl Orchagent {
    /// Program `server`'s CONFIG_DB into its ASIC_DB now, then follow it.
    pub fn start(server: &RedisServer, spec: &Spec, lag: Duration) -> Orchagent {
        let stuck = Arc::new(AtomicBool::new(false));
        let (mut config, mut con) = (server.con(CONFIG_DB), server.con(ASIC_DB));
        let mut state = Asic { programmed: tables(&mut config), wred: WredOids::default(), restarts: 0 };
        program(&mut con, spec, &state.programmed, &mut state.wred, 0);
        let asic = Arc::new(Mutex::new(state));
        let (k, a, spec_) = (stuck.clone(), asic.clone(), spec.clone());
        let thread = Background::spawn(move |s| {
            let (mut changed_at, mut restarts) = (None, 0);
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                let mut a = a.lock().unwrap();
                if a.restarts != restarts {
                    (changed_at, restarts) = (None, a.restarts);
                }
                let now = tables(&mut config);
                if now == a.programmed || k.load(Ordering::Relaxed) {
                    continue;
                }
                let since = *changed_at.get_or_insert_with(Instant::now);
                if since.elapsed() >= lag {
                    let restarts = a.restarts;
                    program(&mut con, &spec_, &now, &mut a.wred, restarts);
                    (a.programmed, changed_at) = (now, None);
                }
            }
        });
        Orchagent { stuck, asic, spec: spec.clone(), _thread: thread }
    }

    /// Restart syncd cold, as `config reload` or a reboot does: ASIC_DB starts empty, every
    /// queue comes back under a new object id, and orchagent programs CONFIG_DB into it at
    /// once. COUNTERS_QUEUE_NAME_MAP is gone (SONiC flushes COUNTERS_DB at a cold start) until
    /// [`Orchagent::publish_queue_map`], as flex counters start only some time after the ASIC.
    pub fn cold_restart(&self, server: &RedisServer) {
        let mut a = self.asic.lock().unwrap();
        let mut con = server.con(ASIC_DB);
        redis::cmd("FLUSHDB").query::<()>(&mut con).expect("FLUSHDB ASIC_DB");
        redis::cmd("DEL").arg("COUNTERS_QUEUE_NAME_MAP").query::<()>(&mut server.con(COUNTERS_DB)).expect("DEL map");
        a.restarts += 1;
        a.wred = WredOids { created: a.wred.created, ..WredOids::default() };
        a.programmed = tables(&mut server.con(CONFIG_DB));
        let (restarts, programmed) = (a.restarts, a.programmed.clone());
        program(&mut con, &self.spec, &programmed, &mut a.wred, restarts);
    }

    /// Write COUNTERS_QUEUE_NAME_MAP with the queues' object ids since the last cold restart.
    pub fn publish_queue_map(&self, server: &RedisServer) {
        let restarts = self.asic.lock().unwrap().restarts;
        let map = queue_name_map(&self.spec, restarts);
        let mut pipe = redis::pipe();
        hset(
            &mut pipe,
            "COUNTERS_QUEUE_NAME_MAP",
            &map.iter().map(|(k, v)| (k.as_str(), v.clone())).collect::<Vec<_>>(),
        );
        pipe.query::<()>(&mut server.con(COUNTERS_DB)).expect("COUNTERS_QUEUE_NAME_MAP");
    }
}

/// The WRED objects orchagent created: object id by profile name, and the next id to give.
#[derive(Default)]
struct WredOids {
    by_profile: BTreeMap<String, String>,
    created: u64,
}

/// Write `config` ([`tables`] of CONFIG_DB) into ASIC_DB as orchagent would: one WRED object per
/// profile (an edited profile keeps its object), deleted with its profile, and each queue's
/// `SAI_QUEUE_ATTR_WRED_PROFILE_ID` (the queues' ids after `restarts` cold restarts).
fn program(
    asic: &mut redis::Connection,
    spec: &Spec,
    config: &BTreeMap<String, Vec<(String, String)>>,
    oids: &mut WredOids,
    restarts: u64,
) {
    let field =
        |fields: &[(String, String)], name: &str| fields.iter().find(|(f, _)| f == name).map(|(_, v)| v.clone());
    let mut pipe = redis::pipe();
    let profiles: BTreeMap<&str, &Vec<(String, String)>> =
        config.iter().filter_map(|(k, f)| Some((k.strip_prefix("WRED_PROFILE|")?, f))).collect();
    oids.by_profile.retain(|name, oid| {
        let keep = profiles.contains_key(name.as_str());
        if !keep {
            pipe.cmd("DEL").arg(format!("ASIC_STATE:SAI_OBJECT_TYPE_WRED:{oid}")).ignore();
        }
        keep
    });
    for (name, fields) in &profiles {
        let oid = match oids.by_profile.get(*name) {
            Some(oid) => oid.clone(),
            None => {
                oids.created += 1;
                let oid = format!("oid:0x{:x}", 0x13000000000100u64 + oids.created);
                oids.by_profile.insert(name.to_string(), oid.clone());
                oid
            }
        };
        let cmd = pipe.cmd("HSET").arg(format!("ASIC_STATE:SAI_OBJECT_TYPE_WRED:{oid}"));
        cmd.arg("SAI_WRED_ATTR_ECN_MARK_MODE").arg("SAI_ECN_MARK_MODE_ALL");
        for (sai, cfg) in [
            ("SAI_WRED_ATTR_GREEN_MIN_THRESHOLD", "green_min_threshold"),
            ("SAI_WRED_ATTR_GREEN_MAX_THRESHOLD", "green_max_threshold"),
            ("SAI_WRED_ATTR_GREEN_DROP_PROBABILITY", "green_drop_probability"),
        ] {
            if let Some(v) = field(fields, cfg) {
                cmd.arg(sai).arg(v);
            }
        }
        cmd.ignore();
    }
    for (i, port) in spec.ports.iter().enumerate() {
        for q in 0..8u32 {
            // Either form of reference: `NAME`, or `[WRED_PROFILE|NAME]` before SONiC 202106.
            let bound = config.get(&format!("QUEUE|{port}|{q}")).and_then(|f| field(f, "wred_profile")).map(|v| {
                v.strip_prefix("[WRED_PROFILE|").and_then(|v| v.strip_suffix(']')).map_or(v.clone(), str::to_string)
            });
            let wred = bound.and_then(|name| oids.by_profile.get(&name).cloned()).unwrap_or_else(|| "oid:0x0".into());
            pipe.cmd("HSET")
                .arg(format!("ASIC_STATE:SAI_OBJECT_TYPE_QUEUE:{}", queue_oid_after(restarts, i, q)))
                .arg("SAI_QUEUE_ATTR_WRED_PROFILE_ID")
                .arg(wred)
                .ignore();
        }
    }
    pipe.query::<()>(asic).expect("program ASIC_DB");
}

/// Full `HGETALL` of every `WRED_PROFILE|*` and `QUEUE|*` key of CONFIG_DB, fields in the order
/// Redis returns them: equal tables are byte-identical.
pub fn tables(con: &mut redis::Connection) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    for pattern in ["WRED_PROFILE|*", "QUEUE|*"] {
        let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(con).expect("KEYS");
        for k in keys {
            let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&k).query(con).expect("HGETALL");
            out.insert(k, fields);
        }
    }
    out
}

/// Set one field of a CONFIG_DB hash, as an operator (or a SONiC daemon) would.
pub fn set_config_field(server: &RedisServer, key: &str, field: &str, value: &str) {
    let _: () = redis::cmd("HSET").arg(key).arg(field).arg(value).query(&mut server.con(CONFIG_DB)).expect("HSET");
}

/// The green setting (kmin, kmax, probability %) of the profile bound to `QUEUE|port|queue`.
/// The binding and the profile are read in one script, at one instant: read one command after
/// the other, an actuator's write between them (rebinding the queue to its original profile
/// and deleting its own) left the binding naming a profile already gone.
pub fn queue_setting(con: &mut redis::Connection, port: &str, queue: u32) -> (u64, u64, u64) {
    const READ: &str = "local p = redis.call('HGET', KEYS[1], 'wred_profile') \
                        if not p then return {} end \
                        p = string.match(p, '^%[WRED_PROFILE|(.*)%]$') or p \
                        local f = redis.call('HGETALL', 'WRED_PROFILE|' .. p) \
                        table.insert(f, 1, p) return f";
    let mut reply: Vec<String> = redis::cmd("EVAL")
        .arg(READ)
        .arg(1)
        .arg(format!("QUEUE|{port}|{queue}"))
        .query(con)
        .expect("binding and profile");
    assert!(!reply.is_empty(), "QUEUE|{port}|{queue} has no wred_profile");
    let profile = reply.remove(0);
    let f: BTreeMap<String, String> = reply.chunks(2).map(|kv| (kv[0].clone(), kv[1].clone())).collect();
    let n = |k: &str| f.get(k).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{profile} has no {k}: {f:?}"));
    (n("green_min_threshold"), n("green_max_threshold"), n("green_drop_probability"))
}

/// A TCP relay to a local port that a test can close: every relayed connection is cut at once
/// and new ones are dropped on accept, until it is opened again. It can also hold what clients
/// send on the connections open at the time, as a stalled network path does: the bytes arrive
/// later, in order, even from a client that has hung up meanwhile. It can start holding at a
/// client's next `MULTI`, so that the reads before a transaction go through and the transaction
/// is what the network holds, or at another command.
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    open: Arc<AtomicBool>,
    /// One state per relayed connection: [`RELAY`], [`HOLD`], or [`HOLD_AT`].
    held: Arc<Mutex<Vec<Arc<AtomicU8>>>>,
    /// Where [`HOLD_AT`] starts holding: a command as a client sends it (RESP).
    marker: Arc<Mutex<Vec<u8>>>,
    /// The state a new connection starts in.
    fresh: Arc<AtomicU8>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

/// A relayed connection's state: pass what its client sends on.
const RELAY: u8 = 0;
/// Hold what its client sends.
const HOLD: u8 = 1;
/// Pass it on up to the client's next command that starts as the marker does, and hold from
/// there.
const HOLD_AT: u8 = 2;
/// `MULTI` as a client sends it (RESP).
const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";

impl Proxy {
    /// Relay `127.0.0.1:<port of the returned proxy>` to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let held: Arc<Mutex<Vec<Arc<AtomicU8>>>> = Arc::default();
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let fresh = Arc::new(AtomicU8::new(RELAY));
        let marker = Arc::new(Mutex::new(MULTI.to_vec()));
        let (o, h, cs, st, fr, m) =
            (open.clone(), held.clone(), conns.clone(), stop.clone(), fresh.clone(), marker.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                let _ = client.set_nonblocking(false);
                if !o.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                {
                    let mut list = cs.lock().unwrap();
                    list.push(client.try_clone().unwrap());
                    list.push(server.try_clone().unwrap());
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let flag = Arc::new(AtomicU8::new(fr.load(Ordering::Relaxed)));
                h.lock().unwrap().push(flag.clone());
                let (h, st, m) = (flag, st.clone(), m.clone());
                std::thread::spawn(move || relay(client, server, Some((h, st, m))));
                std::thread::spawn(move || relay(s2, c2, None));
            }
        });
        Proxy { port, open, held, marker, conns, fresh, stop }
    }

    /// `redis://127.0.0.1:PORT` through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Cut every connection and refuse new ones.
    pub fn close(&self) {
        self.open.store(false, Ordering::Relaxed);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Relay again.
    pub fn open(&self) {
        self.open.store(true, Ordering::Relaxed);
    }

    fn set_held(&self, state: u8) {
        for f in self.held.lock().unwrap().iter() {
            f.store(state, Ordering::Relaxed);
        }
    }

    /// Hold what clients send on the connections open now, from each one's next `MULTI` on,
    /// until [`Proxy::release`]: the commands before it (an apply's read of CONFIG_DB) go
    /// through. New connections are relayed as usual.
    pub fn stall_at_transaction(&self) {
        self.stall_at(MULTI);
    }

    /// Hold what clients send on the connections open now, from each one's next command that
    /// starts as `command` (RESP, as a client sends it) on, until [`Proxy::release`].
    pub fn stall_at(&self, command: &[u8]) {
        *self.marker.lock().unwrap() = command.to_vec();
        self.set_held(HOLD_AT);
    }

    /// [`Proxy::stall_at_transaction`], for the connections opened later too.
    pub fn stall_every_transaction(&self) {
        self.fresh.store(HOLD_AT, Ordering::Relaxed);
        self.stall_at_transaction();
    }

    /// [`Proxy::stall_at_transaction`], and refuse new connections from now on.
    pub fn hold_at_transaction(&self) {
        self.open.store(false, Ordering::Relaxed);
        self.stall_at_transaction();
    }

    /// Whether a connection holds back what its client sent (after [`Proxy::stall_at_transaction`],
    /// once its `MULTI` came).
    pub fn holding(&self) -> bool {
        self.held.lock().unwrap().iter().any(|f| f.load(Ordering::Relaxed) == HOLD)
    }

    /// Deliver what was held and relay again.
    pub fn release(&self) {
        self.fresh.store(RELAY, Ordering::Relaxed);
        self.set_held(RELAY);
        self.open.store(true, Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.close();
    }
}

/// Copy `from` to `to` until either side closes. With `hold` (the state, the proxy's stop and
/// its marker), bytes read while it is [`HOLD`] wait until it is [`RELAY`] again, even past
/// `from` closing; at [`HOLD_AT`], a read that holds the marker turns it to [`HOLD`] from there.
type Hold = (Arc<AtomicU8>, Arc<AtomicBool>, Arc<Mutex<Vec<u8>>>);
fn relay(mut from: TcpStream, mut to: TcpStream, hold: Option<Hold>) {
    let state = || {
        hold.as_ref()
            .map_or(RELAY, |(h, stop, _)| if stop.load(Ordering::Relaxed) { RELAY } else { h.load(Ordering::Relaxed) })
    };
    let marker = || hold.as_ref().map_or_else(Vec::new, |(_, _, m)| m.lock().unwrap().clone());
    let held = || state() == HOLD;
    if hold.is_some() {
        let _ = from.set_read_timeout(Some(Duration::from_millis(10)));
    }
    let mut pending = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        if !held() && !pending.is_empty() {
            if to.write_all(&pending).is_err() {
                break;
            }
            pending.clear();
        }
        match from.read(&mut buf) {
            Ok(0) => {
                while held() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = to.write_all(&pending);
                break;
            }
            Ok(n) if held() => pending.extend_from_slice(&buf[..n]),
            Ok(n) if state() == HOLD_AT && position(&buf[..n], &marker()).is_some() => {
                let at = position(&buf[..n], &marker()).expect("found above");
                if to.write_all(&buf[..at]).is_err() {
                    break;
                }
                pending.extend_from_slice(&buf[at..n]);
                if let Some((h, _, _)) = &hold {
                    h.store(HOLD, Ordering::Relaxed);
                }
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// Where `needle` first starts in `bytes`.
fn position(bytes: &[u8], needle: &[u8]) -> Option<usize> {
    bytes.windows(needle.len().max(1)).position(|w| w == needle)
}

/// The recording of the original profiles in STATE_DB, if any.
pub fn recording(server: &RedisServer) -> Option<String> {
    redis::cmd("HGET").arg("ECN_TUNER|ORIGINALS").arg("json").query(&mut server.con(STATE_DB)).expect("HGET")
}

/// The `CLIENT LIST` line of a client named `name` that is inside MULTI, if any.
pub fn client_in_multi(server: &RedisServer, name: &str) -> Option<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.con(0)).ok()?;
    list.lines()
        .find(|l| {
            l.split(' ').any(|f| f == format!("name={name}"))
                && l.split(' ').any(|f| f.starts_with("multi=") && f != "multi=-1")
        })
        .map(str::to_string)
}

/// Path helper for a file inside a directory, as a `String` argument.
pub fn arg(p: &Path) -> String {
    p.display().to_string()
}
