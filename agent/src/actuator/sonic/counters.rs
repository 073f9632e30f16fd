//! COUNTERS_DB → telemetry: poll the SAI counters of every controlled queue (and the PFC
//! counters of its port and priority) at the configured interval and turn the cumulative
//! counters into one per-interval sample per queue.
//!
//! - Queue `q` of port `p` is `COUNTERS:<oid>` with the oid from `COUNTERS_QUEUE_NAME_MAP`
//!   (`p:q`); its PFC counters are those in `COUNTERS:<port oid>` (from
//!   `COUNTERS_PORT_NAME_MAP`) of the priorities the port's `pfc_to_queue_map` sends to it,
//!   summed: under SONiC's default map, lossless queues 3 and 4 carry PFC priorities 3 and 4.
//! - Cumulative counters go through [`ecn_datasets::counters`]: growth is a delta, a wrap of a
//!   narrower counter (`--counter-bits 32`) is the distance across the top, and a decrease or an
//!   implausible jump (more than the line could carry) is a reset: that queue's sample for the
//!   interval is dropped, never guessed, and counting resumes from the new value.
//! - Depth: `SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES` is the peak since the flex counter last
//!   read and cleared it (every 60 s by default: not the interval's peak) (`queue_bytes_max`);
//!   `SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES`, where SONiC polls it (for the PFC watchdog), is the
//!   depth now (`queue_bytes`, and `queue_bytes_avg` for lack of a time average); without it
//!   both are the watermark. Counters SONiC publishes only when asked (ECN marks, occupancy,
//!   pause time) are warned of when absent, once: they would read 0.
//! - Counters that stop moving are not an idle fabric: when nothing read (every queue counter,
//!   and the octets in and out of every controlled port, which LLDP alone moves on a port that
//!   is up) has changed for `--frozen-after`, SONiC's flex counters have most likely stopped
//!   (syncd hung, `counterpoll` disabled), and the poller publishes nothing until they move
//!   again, so that the controller sees stale telemetry and falls back, instead of reading
//!   zeros as a quiet fabric.
//! - So is a counter group SONiC no longer polls (`counterpoll queue disable` or `counterpoll
//!   port disable` on a running switch): every queue counter, or every PFC counter, stands
//!   still while the other group's move. The poller reads each group's `FLEX_COUNTER_STATUS`
//!   every [`GROUP_CHECK_POLLS`] polls and publishes nothing while the queue or the port group
//!   is off, and counts afresh when it is on again (the first reading after is a new baseline,
//!   not a lump of the whole stop). ECN marks (`wredqueue`, off by default) are warned of.
//! - Poll no faster than SONiC's own `counterpoll` intervals for queues and ports: a counter
//!   that SONiC refreshes every 10 s moves in 10 s lumps, which a 1 s poll would see as
//!   implausible jumps. At SONiC's own interval, the polls keep clear of its refreshes
//!   ([`super::refresh`]).

use super::config::QueueRef;
use super::conn::RedisTarget;
use super::refresh::{QueueBytes, RefreshGuard};
use super::schema;
use ecn_datasets::counters::{counter_step, max_plausible_bytes, CounterStep, CounterWidth};
use ecn_env::EcnSetting;
use ecn_proto::v1 as pb;
use redis::Connection;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

/// One reading of one queue: cumulative counters and gauges, `None` where the field is absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    /// `SAI_QUEUE_STAT_BYTES`.
    pub bytes: Option<u64>,
    /// `SAI_QUEUE_STAT_PACKETS`.
    pub packets: Option<u64>,
    /// `SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS`.
    pub ecn_marked: Option<u64>,
    /// `SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES` (gauge).
    pub watermark: Option<u64>,
    /// `SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES` (gauge).
    pub occupancy: Option<u64>,
    /// `SAI_QUEUE_STAT_DROPPED_PACKETS`.
    pub dropped: Option<u64>,
    /// `SAI_PORT_STAT_PFC_<p>_RX_PKTS`, summed over the PFC priorities `p` the queue carries.
    pub pfc_rx: Option<u64>,
    /// `SAI_PORT_STAT_PFC_<p>_TX_PKTS`, summed likewise.
    pub pfc_tx: Option<u64>,
    /// `SAI_PORT_STAT_PFC_<p>_RX_PAUSE_DURATION_US`, summed likewise.
    pub pause_us: Option<u64>,
}

/// Per-interval deltas of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deltas {
    /// Interval length, ns.
    pub span_ns: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets marked.
    pub ecn_marked: u64,
    /// Whether both readings had the mark counter (absent, `ecn_marked` reads 0 unknowingly).
    pub ecn_marks_counted: bool,
    /// Packets dropped.
    pub dropped: u64,
    /// PAUSE frames received.
    pub pfc_rx: u64,
    /// PAUSE frames sent.
    pub pfc_tx: u64,
    /// Time paused, ns (at most the interval).
    pub paused_ns: u64,
}

/// Turns successive readings of each queue into deltas.
#[derive(Debug)]
pub struct Tracker {
    width: CounterWidth,
    prev: Vec<Option<(Instant, Reading)>>,
}

/// Smallest Ethernet frame: bounds packet counts by byte counts.
const MIN_FRAME_BYTES: u64 = 64;

impl Tracker {
    /// `queues` queues whose counters are `width` bits wide.
    pub fn new(queues: usize, width: CounterWidth) -> Tracker {
        Tracker { width, prev: vec![None; queues] }
    }

    /// Forget queue `i`'s last reading (its counters moved to another object).
    pub fn forget(&mut self, i: usize) {
        self.prev[i] = None;
    }

    /// Whether queue `i` has a reading to count its next one from.
    pub fn has_reading(&self, i: usize) -> bool {
        self.prev[i].is_some()
    }

    /// Take a reading of queue `i` at `at`. Returns the deltas since the previous reading, or
    /// `None` on the first reading and when any counter was reset (the interval is dropped).
    pub fn step(&mut self, i: usize, at: Instant, r: Reading, link_bps: u64) -> Option<Deltas> {
        let prev = self.prev[i].replace((at, r));
        let (t0, p) = prev?;
        let span = at.saturating_duration_since(t0);
        let span_ns = span.as_nanos().min(u128::from(u64::MAX)) as u64;
        let bytes_cap = max_plausible_bytes(link_bps, span_ns);
        let pkts_cap = bytes_cap / MIN_FRAME_BYTES + 1;
        let pause_cap_us = (span.as_micros() as u64).saturating_mul(4) + 1_000;
        let mut reset = false;
        let mut d = |old: Option<u64>, new: Option<u64>, cap: Option<u64>| -> u64 {
            match (old, new) {
                (Some(o), Some(n)) => match counter_step(o, n, self.width, cap) {
                    CounterStep::Reset => {
                        reset = true;
                        0
                    }
                    s => s.delta().unwrap_or(0),
                },
                // Absent (the platform does not count it), or appeared just now: nothing known.
                _ => 0,
            }
        };
        let out = Deltas {
            span_ns,
            bytes: d(p.bytes, r.bytes, Some(bytes_cap)),
            packets: d(p.packets, r.packets, Some(pkts_cap)),
            ecn_marked: d(p.ecn_marked, r.ecn_marked, Some(pkts_cap)),
            ecn_marks_counted: p.ecn_marked.is_some() && r.ecn_marked.is_some(),
            // Drops come from every ingress port at once: no line-rate bound.
            dropped: d(p.dropped, r.dropped, None),
            pfc_rx: d(p.pfc_rx, r.pfc_rx, Some(pkts_cap)),
            pfc_tx: d(p.pfc_tx, r.pfc_tx, Some(pkts_cap)),
            // The pause time the received frames asked for (SAI converts their quanta), which a
            // peer that refreshes XOFF before it runs out can push past the wall clock: clamped
            // to the interval, not read as a reset (that dropped samples in a PFC storm). Only
            // a jump beyond four times the interval is one (a narrow counter's reset would
            // otherwise read as a wrap, a whole interval paused).
            paused_ns: d(p.pause_us, r.pause_us, Some(pause_cap_us)).saturating_mul(1_000).min(span_ns),
        };
        (!reset).then_some(out)
    }
}

/// The wire sample of one queue's interval; `marks_counted`: whether SONiC refreshed the
/// ECN-mark counters at every poll (a counter present but not refreshed stands still).
pub fn sample(
    key: &pb::QueueId,
    link_bps: u64,
    ts_ns: u64,
    r: &Reading,
    d: &Deltas,
    s: &EcnSetting,
    marks_counted: bool,
) -> pb::TelemetrySample {
    let depth = r.occupancy.or(r.watermark).unwrap_or(0);
    let peak = r.watermark.unwrap_or(0).max(depth);
    pb::TelemetrySample {
        ts_ns,
        id: Some(key.clone()),
        link_bps,
        queue_bytes: depth,
        queue_bytes_avg: depth as f64,
        queue_bytes_max: peak,
        tx_bytes: d.bytes,
        tx_pkts: d.packets,
        ecn_marked_pkts: d.ecn_marked,
        pfc_pause_rx: d.pfc_rx,
        pfc_pause_tx: d.pfc_tx,
        paused_ns: d.paused_ns,
        drops: d.dropped,
        ecn: Some(pb::EcnSetting { kmin_bytes: s.kmin_bytes, kmax_bytes: s.kmax_bytes, pmax: s.pmax }),
        // After a dropped interval this is shorter than the step from the queue's previous
        // sample: the deltas count from the reading after the reset, not from that sample.
        span_ns: d.span_ns,
        ecn_marks_counted: d.ecn_marks_counted && marks_counted,
    }
}

/// How often the name maps are read again (oids change when syncd restarts).
const MAP_REFRESH: Duration = Duration::from_secs(60);
/// How often, while a controlled queue is missing from them.
const MAP_RETRY: Duration = Duration::from_secs(5);

/// How often, in polls, the poller reads whether SONiC still polls the counter groups
/// (5 s at the default `--poll-interval`): three reads of CONFIG_DB.
pub const GROUP_CHECK_POLLS: u32 = 5;

/// Which of [`schema::FLEX_COUNTER_POLLS`] SONiC polls, and how often, as last read, and when
/// to read again.
struct GroupPolling {
    /// Per group; `None` before the first read.
    on: [Option<bool>; 3],
    /// Per group: how often SONiC refreshes its counters, ms.
    refresh_ms: [u64; 3],
    /// Polls until the next read.
    due_in: u32,
}

/// One group's `FLEX_COUNTER_STATUS` and `POLL_INTERVAL`, as read (`None`: absent).
type GroupFields = (Option<String>, Option<String>);

impl GroupPolling {
    fn new() -> GroupPolling {
        GroupPolling { on: [None; 3], refresh_ms: schema::FLEX_COUNTER_POLLS.map(|g| g.default_ms), due_in: 0 }
    }

    /// Whether SONiC refreshed the ECN-mark counters for every poll `poll` apart, at the last
    /// read (not known: no). Refreshed less often, they stand still between refreshes, and a
    /// sample's zero marks then say nothing (SONiC's default is every 10 s).
    fn marks_counted(&self, poll: Duration) -> bool {
        let wred = schema::FLEX_COUNTER_POLLS.iter().position(|g| g.key == schema::WRED_ECN_QUEUE_POLL);
        wred.is_some_and(|i| self.on[i] == Some(true) && u128::from(self.refresh_ms[i]) <= poll.as_millis())
    }

    /// How often SONiC refreshes the queue counters, at the last read.
    fn queue_refresh(&self) -> Duration {
        let queue = schema::FLEX_COUNTER_POLLS.iter().position(|g| g.key == schema::QUEUE_POLL);
        Duration::from_millis(queue.map_or(0, |i| self.refresh_ms[i]))
    }

    /// Whether telemetry is withheld: a group it cannot do without was off at the last read.
    fn withheld(&self) -> bool {
        schema::FLEX_COUNTER_POLLS.iter().zip(self.on).any(|(g, on)| g.blinds_telemetry() && on == Some(false))
    }

    /// Takes the groups' `FLEX_COUNTER_STATUS` as read; returns whether a group came back on
    /// (the counters then count afresh). The start-up check has warned of what was off at the
    /// first read.
    fn observe(&mut self, read: [GroupFields; 3]) -> bool {
        let mut resumed = false;
        for (i, (status, interval)) in read.into_iter().enumerate() {
            let group = &schema::FLEX_COUNTER_POLLS[i];
            self.refresh_ms[i] = group.refresh_ms(interval.as_deref());
            let on = &mut self.on[i];
            let now = group.is_on(status.as_deref());
            match (*on, now) {
                (Some(true), false) if group.blinds_telemetry() => warn!(
                    "SONiC stopped polling {} counters ({}): telemetry is withheld until `counterpoll {} enable`, \
                     as samples would read an idle fabric",
                    group.group, group.key, group.group
                ),
                (Some(true), false) => warn!(
                    "SONiC stopped polling {} counters ({}): ECN marks read 0 until `counterpoll {} enable`",
                    group.group, group.key, group.group
                ),
                (Some(false), true) => {
                    info!("SONiC polls {} counters again ({})", group.group, group.key);
                    // Its counters jump by all that was counted meanwhile (marks too: one sample
                    // would show more marked packets than sent).
                    resumed = true;
                }
                _ => {}
            }
            *on = Some(now);
        }
        resumed
    }
}

/// How many polled queues lack the counters that SONiC publishes only when asked, counted on
/// the first poll that reads any, and reported once: their absence reads as 0 (no marks, no
/// paused time) or as a stale depth, which would pass unremarked.
#[derive(Debug, Default)]
struct Absent {
    polled: usize,
    marks: usize,
    occupancy: usize,
    pause_time: usize,
}

impl Absent {
    fn note(&mut self, r: &Reading) {
        self.polled += 1;
        self.marks += usize::from(r.ecn_marked.is_none());
        self.occupancy += usize::from(r.occupancy.is_none());
        self.pause_time += usize::from(r.pause_us.is_none());
    }

    fn report(&self) {
        let n = self.polled;
        if self.marks > 0 {
            warn!(
                "{} of {n} queues have no SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS in COUNTERS_DB: their ECN marks read 0 \
                 (SONiC polls them only after `counterpoll wredqueue enable`, on platforms that count them)",
                self.marks
            );
        }
        if self.occupancy > 0 {
            warn!(
                "{} of {n} queues have no SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES (SONiC polls it for the PFC watchdog \
                 only): their depth is SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES, the peak since SONiC last read and \
                 cleared it (every 60 s by default), not the depth of the interval",
                self.occupancy
            );
        }
        if self.pause_time > 0 {
            warn!(
                "{} of {n} queues have no SAI_PORT_STAT_PFC_<n>_RX_PAUSE_DURATION_US (few platforms poll it, for the \
                 PFC watchdog): their paused time reads 0; PAUSE frame counts are unaffected",
                self.pause_time
            );
        }
    }
}

/// One controlled queue as the poller reads it.
#[derive(Debug, Clone)]
pub struct PolledQueue {
    /// Port and queue index.
    pub queue: QueueRef,
    /// Line rate of the port, bits per second.
    pub link_bps: u64,
    /// Its identity on the wire.
    pub id: pb::QueueId,
    /// The PFC priorities whose counters are its pauses: those the port's `pfc_to_queue_map`
    /// sends to it (its own index under SONiC's default map; none for a queue no priority goes
    /// to, whose pauses then read 0).
    pub pfc_priorities: Vec<u32>,
}

/// The polling thread.
pub struct Poller {
    /// Where Redis is.
    pub target: RedisTarget,
    /// COUNTERS_DB index.
    pub db: i64,
    /// CONFIG_DB index, where `FLEX_COUNTER_TABLE` says which counter groups SONiC polls.
    pub config_db: i64,
    /// The queues, in capabilities order.
    pub queues: Vec<PolledQueue>,
    /// Poll period.
    pub interval: Duration,
    /// Counter width.
    pub width: CounterWidth,
    /// Settings in effect (reported with each sample).
    pub settings: Arc<Mutex<Vec<EcnSetting>>>,
    /// Where batches go.
    pub tx: broadcast::Sender<Arc<pb::TelemetryBatch>>,
    /// Set to stop.
    pub stop: Arc<AtomicBool>,
    /// Zero of `ts_ns`.
    pub epoch: Instant,
    /// How long nothing may move before the counters count as stopped.
    pub frozen_after: Duration,
    /// When samples dropped at counter resets were last logged (at most once a minute).
    pub resets_logged: std::cell::Cell<Option<Instant>>,
    /// When samples dropped for a counter that is not a number were last logged (likewise).
    pub garbled_logged: std::cell::Cell<Option<Instant>>,
}

/// When to poll after a poll due at `due` that starts at `now`: on the timetable, unless this
/// one is more than a quarter interval late (the process stalled, Redis was slow). Then the
/// timetable starts again from now: catching up would poll again at once, before SONiC has
/// refreshed every counter, and read a counter it has not as a reset.
fn next_poll(due: Instant, now: Instant, interval: Duration) -> Instant {
    if now.duration_since(due) > interval / 4 {
        now + interval
    } else {
        due + interval
    }
}

/// How often samples dropped at counter resets are logged, at most.
const RESETS_LOG_EVERY: Duration = Duration::from_secs(60);

/// `at` on the clock of telemetry `ts_ns`: nanoseconds since `epoch`, the poller's start. The
/// backend gives the times of its writes on it too.
pub fn clock_ns(epoch: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// Whether the counters still move: the last reply, and when it last differed.
struct Liveness {
    last: Vec<Vec<Option<String>>>,
    moved_at: Instant,
    frozen: bool,
}

impl Liveness {
    fn new() -> Liveness {
        Liveness { last: Vec::new(), moved_at: Instant::now(), frozen: false }
    }

    /// Take a poll's reply at `at`; returns whether the counters count as stopped.
    fn observe(&mut self, replies: Vec<Vec<Option<String>>>, at: Instant, frozen_after: Duration) -> bool {
        if replies != self.last {
            self.last = replies;
            self.moved_at = at;
        }
        let frozen = at.saturating_duration_since(self.moved_at) > frozen_after;
        if frozen && !self.frozen {
            warn!(
                still_for = ?at.saturating_duration_since(self.moved_at),
                "no counter has moved: SONiC's flex counters look stopped (is syncd running? `counterpoll show`); \
                 telemetry stops until they move again"
            );
        } else if !frozen && self.frozen {
            info!("the counters move again; telemetry resumes");
        }
        self.frozen = frozen;
        frozen
    }
}

/// Failed looks of the refresh guard in a row, from the last that succeeded. Each drops the
/// guard's watch until a poll gives it one again, and where every look fails (a Redis that
/// refuses or outwaits `HGET` alone) the polls are unguarded: that is said once, a few looks in,
/// and so is the first look to succeed again. One failure alone (a timeout) is routine.
#[derive(Debug, Default)]
struct FailedLooks {
    in_a_row: u32,
}

impl FailedLooks {
    /// Failed looks in a row that are said.
    const SAID_AFTER: u32 = 3;

    fn failed(&mut self, db: i64, e: &str) {
        self.in_a_row += 1;
        if self.in_a_row == Self::SAID_AFTER {
            warn!(
                "COUNTERS_DB (db {db}): the refresh guard's last {} looks failed ({e}): the polls are not kept \
                 clear of SONiC's queue counter refreshes until one succeeds",
                self.in_a_row
            );
        } else {
            debug!("COUNTERS_DB (db {db}): the refresh guard's look failed: {e}");
        }
    }

    fn succeeded(&mut self) {
        if self.in_a_row >= Self::SAID_AFTER {
            info!(failed = self.in_a_row, "the refresh guard's looks succeed again");
        }
        self.in_a_row = 0;
    }
}

/// Queue and port oids of every controlled queue (`None`: not in the maps).
type Oids = Vec<Option<(String, String)>>;

/// What one poll published and read.
struct Polled {
    /// Samples published.
    samples: usize,
    /// When the counters were read.
    at: Instant,
    /// Each queue's byte counter, as read, for the refresh guard.
    bytes: Vec<QueueBytes>,
}

impl Poller {
    /// Poll until stopped.
    pub fn run(self) {
        let mut tracker = Tracker::new(self.queues.len(), self.width);
        let mut liveness = Liveness::new();
        let mut groups = GroupPolling::new();
        let mut guard = RefreshGuard::default();
        let mut failed_looks = FailedLooks::default();
        let mut absent_reported = false;
        let mut con: Option<Connection> = None;
        let mut config: Option<Connection> = None;
        let mut oids: Option<(Instant, Oids)> = None;
        let mut down = false;
        let mut next = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let look = guard.due().filter(|at| *at < next);
            let wake = look.unwrap_or(next);
            if wake > now {
                std::thread::sleep((wake - now).min(Duration::from_millis(50)));
                continue;
            }
            if look.is_some() {
                match self.look(&mut con, oids.as_ref().map(|(_, ids)| ids), &guard.watched()) {
                    Ok(bytes) => {
                        failed_looks.succeeded();
                        if let Some(to) = guard.looked(Instant::now(), &bytes) {
                            self.move_timetable(&mut next, to, &mut tracker, "after");
                        }
                    }
                    Err(e) => {
                        // The poll reconnects, and says so if it cannot.
                        failed_looks.failed(self.db, &e);
                        con = None;
                        guard.clear();
                    }
                }
                continue;
            }
            next = next_poll(next, now, self.interval);
            if self.withheld(&mut config, &mut groups, &mut tracker) {
                guard.clear();
                continue;
            }
            guard.retune(groups.queue_refresh(), self.interval);
            let marks_counted = groups.marks_counted(self.interval);
            match self.poll(&mut con, &mut oids, &mut tracker, &mut liveness, &mut absent_reported, marks_counted) {
                Ok(polled) => {
                    if down {
                        info!(url = %self.target.url_of(self.db), "COUNTERS_DB is back; telemetry resumes");
                        down = false;
                    }
                    debug!(samples = polled.samples, "telemetry polled");
                    if let Some(to) = guard.polled(polled.at, next, &polled.bytes) {
                        self.move_timetable(&mut next, to, &mut tracker, "before");
                    }
                }
                Err(e) => {
                    if !down {
                        warn!(url = %self.target.url_of(self.db), "telemetry stops until COUNTERS_DB answers again: {e}");
                        down = true;
                    }
                    con = None;
                    guard.clear();
                }
            }
        }
        debug!("COUNTERS_DB poller stopped");
    }

    /// Moves the poll timetable to `to`, clear of a queue counter refresh seen just `side` of a
    /// poll; the poll there is a baseline (the interval across the move is not one period).
    fn move_timetable(&self, next: &mut Instant, to: Instant, tracker: &mut Tracker, side: &str) {
        let by = to.saturating_duration_since(*next).as_secs_f64() - next.saturating_duration_since(to).as_secs_f64();
        info!(
            by_ms = (by * 1e3).round() as i64,
            "SONiC refreshed the queue counters just {side} a poll (its refresh drifts against --poll-interval): \
             polls move to half a refresh clear of it; one interval is dropped"
        );
        (0..self.queues.len()).for_each(|i| tracker.forget(i));
        *next = to;
    }

    /// The byte counters of `queues` (indices among the polled queues) now, for the refresh
    /// guard; `None` for each one not read (no oid, not a count). An error leaves replies on
    /// their way: the caller drops the connection, as after a failed poll.
    fn look(
        &self,
        con: &mut Option<Connection>,
        ids: Option<&Oids>,
        queues: &[usize],
    ) -> Result<Vec<Option<u64>>, String> {
        let (Some(c), Some(ids)) = (con.as_mut(), ids) else { return Ok(vec![None; queues.len()]) };
        let oids: Vec<Option<&str>> =
            queues.iter().map(|&i| ids.get(i).and_then(|id| id.as_ref()).map(|(q, _)| q.as_str())).collect();
        let mut pipe = redis::pipe();
        for oid in oids.iter().flatten() {
            pipe.cmd("HGET").arg(schema::counters_key(oid)).arg(schema::Q_BYTES);
        }
        let read: Vec<Option<Vec<u8>>> = super::conn::query_pipeline(&pipe, c).map_err(|e| super::conn::said(&e))?;
        if read.len() != pipe.len() {
            return Err(format!("{} replies to {} reads", read.len(), pipe.len()));
        }
        let mut read = read.into_iter();
        Ok(oids
            .iter()
            .map(|oid| {
                let value = oid.and_then(|_| read.next()).flatten()?;
                std::str::from_utf8(&value).ok()?.trim().parse().ok()
            })
            .collect())
    }

    /// Reads the counter groups' status when due; returns whether telemetry is withheld. A
    /// failed read keeps what the last one said (COUNTERS_DB, on the same server, says more).
    fn withheld(&self, con: &mut Option<Connection>, groups: &mut GroupPolling, tracker: &mut Tracker) -> bool {
        if groups.due_in > 0 {
            groups.due_in -= 1;
            return groups.withheld();
        }
        groups.due_in = GROUP_CHECK_POLLS - 1;
        let read = |con: &mut Option<Connection>| -> Result<[GroupFields; 3], String> {
            if con.is_none() {
                *con = Some(self.target.connect(self.config_db, super::conn::COUNTER_GROUPS_CONNECTION)?);
            }
            let mut pipe = redis::pipe();
            for g in &schema::FLEX_COUNTER_POLLS {
                pipe.cmd("HMGET").arg(g.key).arg("FLEX_COUNTER_STATUS").arg("POLL_INTERVAL");
            }
            let replies: Vec<GroupFields> =
                super::conn::query_pipeline(&pipe, con.as_mut().expect("connected")).map_err(|e| e.to_string())?;
            replies.try_into().map_err(|r: Vec<_>| format!("{} replies to 3 reads", r.len()))
        };
        match read(con) {
            Ok(read) => {
                if groups.observe(read) {
                    // Its counters stood still while off and jump when on: start from a baseline.
                    (0..self.queues.len()).for_each(|i| tracker.forget(i));
                }
            }
            Err(e) => {
                debug!("CONFIG_DB (db {}): cannot read FLEX_COUNTER_TABLE: {e}", self.config_db);
                *con = None;
            }
        }
        groups.withheld()
    }

    fn load_oids(&self, con: &mut Connection, tracker: &mut Tracker, old: Option<&Oids>) -> redis::RedisResult<Oids> {
        let qmap: HashMap<String, String> = redis::cmd("HGETALL").arg(schema::QUEUE_NAME_MAP).query(con)?;
        let pmap: HashMap<String, String> = redis::cmd("HGETALL").arg(schema::PORT_NAME_MAP).query(con)?;
        let mut out = Vec::with_capacity(self.queues.len());
        let mut missing = Vec::new();
        for (i, PolledQueue { queue: q, .. }) in self.queues.iter().enumerate() {
            let ids = qmap
                .get(&schema::queue_counter_name(&q.port, q.queue))
                .zip(pmap.get(&q.port))
                .map(|(a, b)| (a.clone(), b.clone()));
            if ids.is_none() {
                missing.push(q.name());
            }
            if old.is_some_and(|o| o[i] != ids) {
                tracker.forget(i);
            }
            out.push(ids);
        }
        // Warn when the set of queues without ids changes, not at every retry.
        let was_missing = |i: usize| old.is_some_and(|o| o[i].is_none());
        let changed = old.is_none() || (0..out.len()).any(|i| was_missing(i) != out[i].is_none());
        if missing.is_empty() && changed && old.is_some() {
            info!(
                "every controlled queue is in COUNTERS_QUEUE_NAME_MAP/COUNTERS_PORT_NAME_MAP again; telemetry resumes"
            );
        }
        if !missing.is_empty() && changed {
            warn!(
                queues = missing.len(),
                first = %missing[0],
                "queues without counters in COUNTERS_QUEUE_NAME_MAP/COUNTERS_PORT_NAME_MAP get no telemetry \
                 (is `counterpoll queue enable` set? On a switch with SONiC's multi-database layout, \
                 /etc/sonic/enable_multidb, COUNTERS_DB is on another Redis instance: give the actuator \
                 --database-config /var/run/redis/sonic-db/database_config.json)"
            );
        }
        Ok(out)
    }

    /// One poll.
    fn poll(
        &self,
        con: &mut Option<Connection>,
        oids: &mut Option<(Instant, Oids)>,
        tracker: &mut Tracker,
        liveness: &mut Liveness,
        absent_reported: &mut bool,
        marks_counted: bool,
    ) -> Result<Polled, String> {
        if con.is_none() {
            *con = Some(self.target.connect(self.db, "ecn-tuner-counters")?);
        }
        let c = con.as_mut().expect("connected");
        let err = |e: redis::RedisError| format!("COUNTERS_DB (db {}): {}", self.db, super::conn::said(&e));
        let due = |(at, ids): &(Instant, Oids)| {
            // Queues missing from the maps (flex counters not started since a syncd restart)
            // are looked up again sooner.
            let every = if ids.iter().any(Option::is_none) { MAP_RETRY } else { MAP_REFRESH };
            at.elapsed() > every
        };
        if oids.as_ref().is_none_or(due) {
            let fresh = self.load_oids(c, tracker, oids.as_ref().map(|(_, o)| o)).map_err(err)?;
            *oids = Some((Instant::now(), fresh));
        }
        let ids = &oids.as_ref().expect("loaded").1;

        // One round trip: every queue's counters, then every port's PFC counters.
        let mut pipe = redis::pipe();
        let mut port_fields: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (q, id) in self.queues.iter().zip(ids) {
            if let Some((_, port_oid)) = id {
                let fields = port_fields
                    .entry(port_oid.as_str())
                    .or_insert_with(|| schema::PORT_LIVENESS_FIELDS.iter().map(|f| f.to_string()).collect());
                fields.extend(q.pfc_priorities.iter().flat_map(|&p| schema::pfc_fields(p)));
            }
        }
        let polled: Vec<usize> = (0..self.queues.len()).filter(|&i| ids[i].is_some()).collect();
        for &i in &polled {
            let (qoid, _) = ids[i].as_ref().expect("polled");
            pipe.cmd("HMGET").arg(schema::counters_key(qoid)).arg(&schema::QUEUE_STAT_FIELDS[..]);
        }
        for (port_oid, fields) in &port_fields {
            pipe.cmd("HMGET").arg(schema::counters_key(port_oid)).arg(fields);
        }
        // Read as bytes: one value that is not UTF-8 failed the whole reply as a type error, so
        // one garbled counter stopped all telemetry with a message that blamed COUNTERS_DB. Such
        // a value is not a count, and is treated as the other values that are not.
        let raw: Vec<Vec<Option<Vec<u8>>>> = super::conn::query_pipeline(&pipe, c).map_err(err)?;
        // Replies out of step with the reads (a reply left over from a read that timed out) are
        // not counters: the connection is dropped, as after any error.
        let widths = polled.iter().map(|_| schema::QUEUE_STAT_FIELDS.len()).chain(port_fields.values().map(Vec::len));
        if raw.len() != polled.len() + port_fields.len() || raw.iter().zip(widths).any(|(r, w)| r.len() != w) {
            return Err(format!("COUNTERS_DB (db {}): replies out of step with the reads", self.db));
        }
        let replies: Vec<Vec<Option<String>>> = raw
            .into_iter()
            .map(|vals| vals.into_iter().map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned())).collect())
            .collect();
        let at = Instant::now();
        let num = |v: &Option<String>| v.as_deref().and_then(|s| s.trim().parse::<u64>().ok());
        let (queue_replies, port_replies) = replies.split_at(polled.len());
        let mut pfc: HashMap<(&str, String), Option<u64>> = HashMap::new();
        // Port counters that are there but not a count, by field: the queues whose pauses they
        // are drop the interval, as for their own counters (read as absent, they were 0 pauses).
        let mut pfc_garbled: HashMap<(&str, String), &str> = HashMap::new();
        for ((port_oid, fields), vals) in port_fields.iter().zip(port_replies) {
            for (f, v) in fields.iter().zip(vals) {
                if let Some(text) = v.as_deref().filter(|_| num(v).is_none()) {
                    pfc_garbled.insert((port_oid, f.clone()), text);
                }
                pfc.insert((port_oid, f.clone()), num(v));
            }
        }
        let settings = self.settings.lock().expect("sonic settings lock").clone();
        let ts_ns = clock_ns(self.epoch, at);
        let mut samples = Vec::new();
        let mut reload = false;
        let mut absent = Absent::default();
        let mut resets = Vec::new();
        let mut garbled = None;
        let mut bytes = Vec::with_capacity(polled.len());
        for (&i, vals) in polled.iter().zip(queue_replies) {
            let PolledQueue { queue: q, link_bps, id, pfc_priorities } = &self.queues[i];
            let (_, port_oid) = ids[i].as_ref().expect("polled");
            // A counter of each priority the queue carries, summed; absent if one is. (With
            // narrow counters a wrap of one then reads as a reset: the sample is dropped.)
            let get = |field: usize| {
                pfc_priorities.iter().try_fold(0u64, |sum, &p| {
                    let f = schema::pfc_fields(p).into_iter().nth(field)?;
                    Some(sum.wrapping_add(pfc.get(&(port_oid.as_str(), f)).copied().flatten()?))
                })
            };
            // A counter that is there but not a count (a float, a word, 2^64) is not one that
            // is absent: read as absent, it made an idle queue (0 bytes beside 625 000
            // packets) without a word. The interval is dropped, and the next counts afresh.
            let not_a_count = vals
                .iter()
                .zip(schema::QUEUE_STAT_FIELDS)
                .find_map(|(v, f)| v.as_deref().filter(|_| num(v).is_none()).map(|text| (f.to_string(), text)))
                .or_else(|| {
                    pfc_priorities.iter().flat_map(|&p| schema::pfc_fields(p)).find_map(|f| {
                        let text = pfc_garbled.get(&(port_oid.as_str(), f.clone()))?;
                        Some((f, *text))
                    })
                });
            if let Some((field, value)) = not_a_count {
                tracker.forget(i);
                garbled.get_or_insert_with(|| {
                    format!("{}: {field} {}", q.name(), crate::actuator::validate::quoted_at_most(value, 40))
                });
                continue;
            }
            let r = Reading {
                bytes: num(&vals[0]),
                packets: num(&vals[1]),
                ecn_marked: num(&vals[2]),
                watermark: num(&vals[3]),
                occupancy: num(&vals[4]),
                dropped: num(&vals[5]),
                pfc_rx: get(0),
                pfc_tx: get(1),
                pause_us: get(2),
            };
            if r.bytes.is_none() && r.packets.is_none() {
                // The counters object is gone (syncd restarted?): look the oids up again.
                reload = true;
                tracker.forget(i);
                continue;
            }
            absent.note(&r);
            let had_reading = tracker.has_reading(i);
            let step = tracker.step(i, at, r, *link_bps);
            if let Some(n) = r.bytes {
                bytes.push(QueueBytes { queue: i, bytes: n, moved: step.as_ref().is_some_and(|d| d.bytes > 0) });
            }
            match step {
                Some(d) => samples.push(sample(id, *link_bps, ts_ns, &r, &d, &settings[i], marks_counted)),
                None if had_reading => resets.push(q.name()),
                None => debug!(queue = %q.name(), "no sample this interval: a first reading"),
            }
        }
        if !resets.is_empty() && self.resets_logged.get().is_none_or(|t| t.elapsed() >= RESETS_LOG_EVERY) {
            self.resets_logged.set(Some(at));
            info!(
                queues = resets.len(),
                first = %resets[0],
                "samples dropped: counters went back or jumped beyond line rate (a reset, or SONiC refreshing \
                 counters less often than --poll-interval); logged at most once a minute"
            );
        }
        if let Some(example) =
            garbled.filter(|_| self.garbled_logged.get().is_none_or(|t| t.elapsed() >= RESETS_LOG_EVERY))
        {
            self.garbled_logged.set(Some(at));
            warn!(
                example = %example,
                "samples dropped: COUNTERS_DB holds a queue or PFC counter that is not a whole count; logged at most \
                 once a minute"
            );
        }
        if reload {
            *oids = None;
        }
        if absent.polled > 0 && !*absent_reported {
            absent.report();
            *absent_reported = true;
        }
        // The tracker still took this reading: when the counters move again, the first sample
        // covers one interval, not the whole stop.
        if liveness.observe(replies, at, self.frozen_after) {
            return Ok(Polled { samples: 0, at, bytes });
        }
        let n = samples.len();
        if n > 0 {
            // No subscriber is not an error.
            let _ = self.tx.send(Arc::new(pb::TelemetryBatch { ts_ns, samples }));
        }
        Ok(Polled { samples: n, at, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: u64 = 100_000_000_000;

    /// A poll a little late stays on the timetable; one late by more than a quarter interval
    /// (a 154 ms stall on a 200 ms poll) starts it again, where the next poll came 46 ms later.
    #[test]
    fn a_late_poll_starts_the_timetable_again() {
        let (due, interval) = (Instant::now(), Duration::from_millis(200));
        assert_eq!(next_poll(due, due + Duration::from_millis(3), interval), due + interval);
        let late = due + Duration::from_millis(154);
        assert_eq!(next_poll(due, late, interval), late + interval);
    }

    fn reading(bytes: u64, packets: u64, pause_us: u64) -> Reading {
        Reading {
            bytes: Some(bytes),
            packets: Some(packets),
            ecn_marked: Some(packets / 10),
            watermark: Some(50_000),
            pfc_rx: Some(packets / 100),
            pfc_tx: Some(0),
            pause_us: Some(pause_us),
            ..Default::default()
        }
    }

    #[test]
    fn growth_wrap_and_reset() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = Tracker::new(1, CounterWidth(32));
        assert_eq!(t.step(0, t0, reading(1_000, 10, 0), G100), None, "first reading: no delta");
        let d = t.step(0, ms(100), reading(1_000_000, 1_000, 50_000), G100).unwrap();
        assert_eq!((d.bytes, d.packets, d.ecn_marked, d.paused_ns), (999_000, 990, 99, 50_000_000));
        // Marks are vouched for where both readings had the counter and SONiC polled it.
        let id = pb::QueueId::default();
        let setting = EcnSetting::new(ecn_env::Bytes(5_000), ecn_env::Bytes(200_000), 0.01).unwrap();
        assert!(d.ecn_marks_counted);
        assert!(sample(&id, G100, 1, &reading(0, 0, 0), &d, &setting, true).ecn_marks_counted);
        assert!(!sample(&id, G100, 1, &reading(0, 0, 0), &d, &setting, false).ecn_marks_counted);
        let unmarked = Reading { ecn_marked: None, ..reading(2_000_000, 2_000, 50_000) };
        let d = t.step(0, ms(150), unmarked, G100).unwrap();
        assert_eq!((d.ecn_marked, d.ecn_marks_counted), (0, false));
        // A reset (the counters cleared): the interval is dropped, then counting resumes.
        assert_eq!(t.step(0, ms(200), reading(100, 1, 0), G100), None);
        let d = t.step(0, ms(300), reading(600, 6, 0), G100).unwrap();
        assert_eq!((d.bytes, d.packets), (500, 5));
        // 32-bit wrap of the byte counter: the distance across the top, not a reset.
        let near_top = u32::MAX as u64 - 999;
        let mut t = Tracker::new(1, CounterWidth(32));
        t.step(0, t0, reading(near_top, 2_000, 0), G100);
        let d = t.step(0, ms(100), reading(5_000, 3_000, 0), G100).unwrap();
        assert_eq!((d.bytes, d.packets), (6_000, 1_000));
    }

    #[test]
    fn telemetry_is_withheld_while_queue_or_port_polling_is_off() {
        let status = |s: [Option<&str>; 3]| s.map(|s| (s.map(str::to_string), None));
        let mut g = GroupPolling::new();
        // Absent statuses: queue and port on by default, ECN marks off.
        assert!(!g.observe(status([None, None, None])));
        assert!(!g.withheld());
        assert!(!g.observe(status([Some("enable"), Some("enable"), Some("disable")])));
        assert!(!g.withheld(), "marks off is only warned of");
        assert!(g.observe(status([Some("disable"), Some("enable"), Some("enable")])), "marks polled again");
        assert!(g.withheld());
        assert!(g.observe(status([Some("enable"), Some("disable"), Some("enable")])), "queue polling resumed");
        assert!(g.withheld(), "port polling is off now");
        assert!(g.observe(status([Some("enable"), Some(" enable "), Some("enable")])));
        assert!(!g.withheld());
    }

    /// ECN marks are vouched for only where SONiC polls them and refreshes them at least as
    /// often as the poller reads them: at its default 10 s, a 1 s poll reads a counter that
    /// stood still nine times in ten, and its zeros say nothing.
    #[test]
    fn marks_count_only_where_sonic_refreshes_them_every_poll() {
        let second = Duration::from_secs(1);
        let wred = |status: Option<&str>, interval: Option<&str>| {
            let mut g = GroupPolling::new();
            let on = Some("enable".to_string());
            g.observe([(on.clone(), None), (on, None), (status.map(str::to_string), interval.map(str::to_string))]);
            g
        };
        assert!(!GroupPolling::new().marks_counted(second), "not read yet");
        assert!(!wred(Some("enable"), None).marks_counted(second), "SONiC's default: every 10 s");
        assert!(wred(Some("enable"), None).marks_counted(Duration::from_secs(10)));
        assert!(wred(Some("enable"), Some("1000")).marks_counted(second));
        assert!(!wred(Some("enable"), Some("1001")).marks_counted(second));
        assert!(!wred(Some("disable"), Some("100")).marks_counted(second));
        assert!(!wred(None, Some("100")).marks_counted(second), "off by default");
    }

    #[test]
    fn counters_that_stop_moving_count_as_stopped_until_they_move() {
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        let reply = |v: &str| vec![vec![Some(v.to_string()), None]];
        let mut l = Liveness { last: Vec::new(), moved_at: t0, frozen: false };
        let after = Duration::from_secs(10);
        assert!(!l.observe(reply("1"), s(1), after));
        // Unchanged for 10 s is still within the allowance; beyond it, stopped.
        assert!(!l.observe(reply("1"), s(11), after));
        assert!(l.observe(reply("1"), s(12), after));
        assert!(l.observe(reply("1"), s(30), after));
        // Any change, anywhere in the reply, is life.
        assert!(!l.observe(vec![vec![Some("1".into()), Some("0".into())]], s(31), after));
        assert!(!l.observe(vec![vec![Some("1".into()), Some("0".into())]], s(40), after));
    }

    #[test]
    fn an_implausible_jump_is_a_reset_not_a_spike() {
        let t0 = Instant::now();
        let mut t = Tracker::new(1, CounterWidth::SAI);
        t.step(0, t0, reading(1_000, 10, 0), G100);
        // 100 Gb/s for 100 ms is 1.25 GB; 10 GB is not possible.
        let jump = t.step(0, t0 + Duration::from_millis(100), reading(10_000_000_000, 20, 0), G100);
        assert_eq!(jump, None);
    }

    #[test]
    fn counters_sonic_publishes_only_when_asked_are_counted_when_absent() {
        let mut a = Absent::default();
        a.note(&reading(1, 1, 0));
        a.note(&Reading { ecn_marked: None, pause_us: None, occupancy: Some(10), ..reading(1, 1, 0) });
        assert_eq!((a.polled, a.marks, a.occupancy, a.pause_time), (2, 1, 1, 1));
    }

    /// The pause time SAI counts is what received frames asked for, which can outrun the clock
    /// when a peer refreshes XOFF: clamped to the interval. It used to be read as a reset, and
    /// the queue's sample dropped, in the middle of a PFC storm.
    #[test]
    fn pause_time_beyond_the_interval_is_clamped_not_a_reset() {
        let t0 = Instant::now();
        let mut t = Tracker::new(1, CounterWidth::SAI);
        t.step(0, t0, reading(1_000, 10, 0), G100);
        let d = t.step(0, t0 + Duration::from_millis(100), reading(2_000, 20, 180_000), G100).unwrap();
        assert_eq!(d.paused_ns, 100_000_000);
        // A decrease is still a reset, of a 32-bit counter too (not a wrap: a whole interval
        // paused).
        assert_eq!(t.step(0, t0 + Duration::from_millis(200), reading(3_000, 30, 5), G100), None);
        let mut t = Tracker::new(1, CounterWidth(32));
        t.step(0, t0, reading(1_000, 10, 500_000), G100);
        assert_eq!(t.step(0, t0 + Duration::from_millis(100), reading(2_000, 20, 5), G100), None);
    }
}
