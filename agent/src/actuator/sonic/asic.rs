//! ASIC_DB: whether orchagent has programmed a write.
//!
//! A write is done in CONFIG_DB when its transaction returns, but the switch marks by what
//! orchagent then programs through SAI, on its own schedule (usually milliseconds, seconds
//! when it is busy), and it can refuse a profile the ASIC does not support. Orchagent records
//! each SAI object it programs in ASIC_DB, so each controlled queue's green curve can be read
//! back there:
//!
//! - the queue's SAI object id from COUNTERS_DB `COUNTERS_QUEUE_NAME_MAP` (`Ethernet0:3`);
//! - `ASIC_STATE:SAI_OBJECT_TYPE_QUEUE:<oid>` `SAI_QUEUE_ATTR_WRED_PROFILE_ID`, its WRED object;
//! - `ASIC_STATE:SAI_OBJECT_TYPE_WRED:<oid>` `SAI_WRED_ATTR_GREEN_MIN_THRESHOLD`, `_MAX_THRESHOLD`
//!   and `_DROP_PROBABILITY`.
//!
//! Read-back is on once ASIC_DB shows every controlled queue with the curve CONFIG_DB holds
//! ([`Readback::discover`]); until then (no orchagent writes ASIC_DB, as on a bare Redis, or
//! flex counters have not yet published the name map after a reboot) the backend allows
//! orchagent one poll interval, and tries again before later writes.
//!
//! A syncd cold restart (`config reload`, a reboot) brings the queues back under new object
//! ids, and SONiC publishes the new name map only once flex counters start; so while ASIC_DB
//! does not show a write, the ids are read again ([`Readback::differs`]).

use super::config::{effective, Curve, QueueRef};
use super::conn::RedisTarget;
use super::schema::{self, DbIndices};
use ecn_env::EcnSetting;
use redis::Connection;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How often, at most, the queues' object ids are read again while ASIC_DB does not show a
/// write.
const REMAP_PERIOD: Duration = Duration::from_millis(100);
/// How often, at most, discovery is tried again before a write while read-back is off (a few
/// cheap reads; writes come at most once per control interval anyway).
const REDISCOVER_PERIOD: Duration = Duration::from_secs(1);
/// The read-back's connections' names: to ASIC_DB, and to COUNTERS_DB for the queues' ids.
const ASIC_CONNECTION: &str = "ecn-tuner-asic";
const COUNTERS_CONNECTION: &str = "ecn-tuner-readback";

/// What ASIC_DB shows for a queue that does not show the curve wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// The name map has no object id for the queue (flex counters not started yet).
    NoId,
    /// The queue's object shows no WRED curve (no such object, none bound, or unreadable).
    NoCurve,
    /// Another curve.
    Curve(Curve),
}

/// The SAI queue objects of the controlled queues, in capabilities order.
#[derive(Debug, Clone)]
pub struct AsicQueues {
    /// Each queue's key in `COUNTERS_QUEUE_NAME_MAP` (`Ethernet0:3`).
    names: Vec<String>,
    /// Each queue's object id, `None` where the map has none.
    oids: Vec<Option<String>>,
}

impl AsicQueues {
    /// The queues' object ids as COUNTERS_DB's name map (`counters`) gives them now.
    pub fn map(counters: &mut Connection, queues: &[QueueRef]) -> redis::RedisResult<AsicQueues> {
        let names = queues.iter().map(|q| schema::queue_counter_name(&q.port, q.queue)).collect();
        let mut found = AsicQueues { names, oids: Vec::new() };
        found.remap(counters)?;
        Ok(found)
    }

    /// Read the queues' object ids again; returns how many changed.
    pub fn remap(&mut self, counters: &mut Connection) -> redis::RedisResult<usize> {
        let oids: Vec<Option<String>> = if self.names.is_empty() {
            Vec::new()
        } else {
            redis::cmd("HMGET").arg(schema::QUEUE_NAME_MAP).arg(&self.names).query(counters)?
        };
        let changed = if self.oids.len() == oids.len() {
            self.oids.iter().zip(&oids).filter(|(a, b)| a != b).count()
        } else {
            oids.len()
        };
        self.oids = oids;
        Ok(changed)
    }

    /// How many queues the name map has no object id for.
    pub fn missing(&self) -> usize {
        self.oids.iter().filter(|o| o.is_none()).count()
    }

    /// Each queue's green curve as ASIC_DB shows it; `None` where it shows none (no object id,
    /// no WRED object bound, or one without the three attributes as whole numbers).
    pub fn read(&self, asic: &mut Connection) -> redis::RedisResult<Vec<Option<Curve>>> {
        let mut pipe = redis::pipe();
        for oid in &self.oids {
            // A queue the map has no id for reads as one without a curve.
            let oid = oid.as_deref().unwrap_or(schema::SAI_NULL_OBJECT_ID);
            pipe.cmd("HGET").arg(schema::asic_queue_key(oid)).arg(schema::SAI_QUEUE_WRED_PROFILE_ID);
        }
        let wred: Vec<Option<String>> = super::conn::query_pipeline(&pipe, asic)?;
        let mut pipe = redis::pipe();
        for w in &wred {
            pipe.cmd("HMGET")
                .arg(schema::asic_wred_key(w.as_deref().unwrap_or(schema::SAI_NULL_OBJECT_ID)))
                .arg(&schema::SAI_WRED_GREEN[..]);
        }
        let fields: Vec<(Option<String>, Option<String>, Option<String>)> = super::conn::query_pipeline(&pipe, asic)?;
        Ok(fields
            .into_iter()
            .map(|(kmin, kmax, percent)| {
                let number = |v: Option<String>| v.and_then(|v| v.parse::<u64>().ok());
                Some((number(kmin)?, number(kmax)?, u32::try_from(number(percent)?).ok()?))
            })
            .collect())
    }

    /// The first queue (index) whose ASIC_DB curve is not `want`'s, with what it shows; the
    /// queues `gone` (indices) are not looked at.
    pub fn differs(
        &self,
        asic: &mut Connection,
        want: &[EcnSetting],
        gone: &[usize],
    ) -> redis::RedisResult<Option<(usize, Shown)>> {
        let shown = self.read(asic)?;
        let mut queues = shown.into_iter().zip(want).enumerate().filter(|(i, _)| !gone.contains(i));
        Ok(queues.find(|(_, (c, s))| *c != Some(effective(s))).map(|(i, (c, _))| {
            let shown = match (c, &self.oids[i]) {
                (_, None) => Shown::NoId,
                (None, Some(_)) => Shown::NoCurve,
                (Some(c), Some(_)) => Shown::Curve(c),
            };
            (i, shown)
        }))
    }
}

/// ASIC_DB read-back of one switch's writes: its connections, the queues' objects once
/// discovered, and when ASIC_DB last showed a write programmed.
pub struct Readback {
    target: RedisTarget,
    dbs: DbIndices,
    queues: Vec<QueueRef>,
    counters: Option<Connection>,
    asic: Option<Connection>,
    /// The queues' objects; `None` while read-back is off.
    found: Option<AsicQueues>,
    /// When the ids were last read (on), or discovery last tried (off).
    checked_at: Instant,
    /// How long a write may take to show in ASIC_DB (`--program-timeout`).
    pub timeout: Duration,
    /// When ASIC_DB last showed a write programmed; shared with the backend's write times.
    pub shown_at: Arc<Mutex<Option<Instant>>>,
}

impl Readback {
    /// Read-back for `queues` of the switch at `target`, off until [`Readback::discover`].
    pub fn new(target: RedisTarget, dbs: DbIndices, queues: Vec<QueueRef>, timeout: Duration) -> Readback {
        Readback {
            target,
            dbs,
            queues,
            counters: None,
            asic: None,
            found: None,
            checked_at: Instant::now(),
            timeout,
            shown_at: Arc::new(Mutex::new(None)),
        }
    }

    /// Whether writes are read back.
    pub fn is_on(&self) -> bool {
        self.found.is_some()
    }

    /// Turn read-back on if ASIC_DB shows every queue with the curve of `now`, the settings
    /// CONFIG_DB holds; otherwise the reason it stays off.
    pub fn discover(&mut self, now: &[EcnSetting]) -> Result<(), String> {
        let Readback { target, dbs, queues, counters, asic, found, checked_at, .. } = self;
        *checked_at = Instant::now();
        let mapped =
            with_connection(counters, target, dbs.counters, COUNTERS_CONNECTION, |c| AsicQueues::map(c, queues))?;
        if let Some(q) = mapped.oids.iter().position(Option::is_none) {
            return Err(format!("COUNTERS_QUEUE_NAME_MAP has no object id for queue {}", queues[q].name()));
        }
        let differs = with_connection(asic, target, dbs.asic, ASIC_CONNECTION, |a| mapped.differs(a, now, &[]))?;
        if let Some((q, shown)) = differs {
            return Err(describe(&queues[q], shown, &now[q]));
        }
        *found = Some(mapped);
        Ok(())
    }

    /// With read-back off, try [`Readback::discover`] again if it is due (a write is about to
    /// be made on top of `now`); logs when it turns on.
    pub fn rediscover(&mut self, now: &[EcnSetting]) {
        if self.is_on() || self.checked_at.elapsed() < REDISCOVER_PERIOD {
            return;
        }
        match self.discover(now) {
            Ok(()) => info!(
                timeout = ?self.timeout,
                "ASIC_DB now shows the queues' WRED curves: a write counts as done once orchagent has programmed it there"
            ),
            Err(why) => debug!("still no ASIC_DB read-back: {why}"),
        }
    }

    /// With read-back on, the first queue whose ASIC_DB curve is not `want`'s, described;
    /// `None` once every queue shows it (and always with read-back off).
    ///
    /// While ASIC_DB does not show `want`, the queues' object ids are read again every
    /// [`REMAP_PERIOD`]: after a syncd cold restart every write would otherwise look
    /// unprogrammed, and be undone, until the actuator restarted.
    ///
    /// Queues whose `QUEUE` entry is gone from CONFIG_DB (`gone`, indices) are not looked at:
    /// orchagent has nothing to program for them, and waiting for them failed every write
    /// after a port was removed, a deadline revert included, which was then retried for ever.
    pub fn differs(&mut self, want: &[EcnSetting], gone: &[usize]) -> Result<Option<String>, String> {
        let Readback { target, dbs, queues, counters, asic, found, checked_at, .. } = self;
        let Some(found) = found.as_mut() else { return Ok(None) };
        let mut differs = with_connection(asic, target, dbs.asic, ASIC_CONNECTION, |a| found.differs(a, want, gone))?;
        if differs.is_some() && checked_at.elapsed() >= REMAP_PERIOD {
            *checked_at = Instant::now();
            match with_connection(counters, target, dbs.counters, COUNTERS_CONNECTION, |c| found.remap(c)) {
                Ok(0) => {}
                Ok(changed) => {
                    info!(
                        queues = changed,
                        missing = found.missing(),
                        "COUNTERS_QUEUE_NAME_MAP gives controlled queues other SAI object ids (syncd restarted?); \
                         ASIC_DB is read at the new ones"
                    );
                    differs =
                        with_connection(asic, target, dbs.asic, ASIC_CONNECTION, |a| found.differs(a, want, gone))?;
                }
                // What ASIC_DB showed stands; the ids are read again next time.
                Err(e) => warn!("cannot read the queues' SAI object ids again: {e}"),
            }
        }
        Ok(differs.map(|(q, shown)| describe(&queues[q], shown, &want[q])))
    }
}

/// Why `queue` does not count as showing `want`.
fn describe(queue: &QueueRef, shown: Shown, want: &EcnSetting) -> String {
    let (queue, want) = (queue.name(), effective(want));
    match shown {
        Shown::NoId => format!(
            "COUNTERS_QUEUE_NAME_MAP has no object id for queue {queue} (flex counters not started since a syncd \
             restart?), so ASIC_DB cannot show it at {want:?}"
        ),
        Shown::NoCurve => format!("ASIC_DB shows no WRED curve for queue {queue}, not {want:?}"),
        Shown::Curve(c) => format!("ASIC_DB shows queue {queue} at {c:?} (Kmin, Kmax, percent), not {want:?}"),
    }
}

/// Run `f` on `con`, opened (as `name`, on `db`) if there is none and dropped on an error.
fn with_connection<T>(
    con: &mut Option<Connection>,
    target: &RedisTarget,
    db: i64,
    name: &str,
    f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
) -> Result<T, String> {
    if con.is_none() {
        *con = Some(target.connect(db, name)?);
    }
    let r = f(con.as_mut().expect("connected"));
    if r.is_err() {
        *con = None;
    }
    r.map_err(|e| format!("Redis at {} (db {db}): {e}", target.url_of(db)))
}
