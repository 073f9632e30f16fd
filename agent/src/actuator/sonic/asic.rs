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
//! A switch whose ASIC_DB does not show the settings CONFIG_DB holds at start-up (no orchagent
//! writes it there, as on a bare Redis) cannot be read back; the backend then allows orchagent
//! one poll interval instead, as it says in its log.

use super::config::{effective, QueueRef};
use super::schema;
use ecn_env::EcnSetting;
use redis::Connection;
use std::collections::HashMap;

/// A green curve as the switch holds it: Kmin and Kmax in bytes, the percent at Kmax.
pub type Curve = (u64, u64, u32);

/// The SAI queue objects of the controlled queues, in capabilities order.
///
/// A syncd cold restart (`config reload`, a reboot) gives the queues new object ids, so they
/// are read again ([`AsicQueues::remap`]) when ASIC_DB does not show a write.
#[derive(Debug, Clone)]
pub struct AsicQueues {
    /// Each queue's key in `COUNTERS_QUEUE_NAME_MAP` (`Ethernet0:3`).
    names: Vec<String>,
    /// Each queue's object id, `None` where the map has none.
    oids: Vec<Option<String>>,
}

impl AsicQueues {
    /// The SAI queue objects of `queues` from COUNTERS_DB's name map (`counters`, on the
    /// COUNTERS_DB index), if ASIC_DB (`asic`) shows each with the curve of `now`, the settings
    /// CONFIG_DB holds: then a later write can be read back. Otherwise the reason it cannot.
    pub fn discover(
        counters: &mut Connection,
        asic: &mut Connection,
        queues: &[QueueRef],
        now: &[EcnSetting],
    ) -> redis::RedisResult<Result<AsicQueues, String>> {
        let names = queues.iter().map(|q| schema::queue_counter_name(&q.port, q.queue)).collect();
        let mut found = AsicQueues { names, oids: Vec::new() };
        found.remap(counters)?;
        if let Some(q) = found.oids.iter().position(Option::is_none) {
            return Ok(Err(format!("COUNTERS_QUEUE_NAME_MAP has no object id for queue {}", queues[q].name())));
        }
        let shown = found.read(asic)?;
        for ((q, s), shown) in queues.iter().zip(now).zip(&shown) {
            match shown {
                None => return Ok(Err(format!("ASIC_DB shows no WRED curve for queue {}", q.name()))),
                Some(c) if *c != effective(s) => {
                    return Ok(Err(format!(
                        "ASIC_DB shows queue {} at {c:?} (Kmin, Kmax, percent), CONFIG_DB at {:?}",
                        q.name(),
                        effective(s)
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(Ok(found))
    }

    /// Read the queues' object ids again from COUNTERS_DB's name map; returns how many changed.
    pub fn remap(&mut self, counters: &mut Connection) -> redis::RedisResult<usize> {
        let map: HashMap<String, String> = redis::cmd("HGETALL").arg(schema::QUEUE_NAME_MAP).query(counters)?;
        let oids: Vec<Option<String>> = self.names.iter().map(|n| map.get(n).cloned()).collect();
        let changed = if self.oids.len() == oids.len() {
            self.oids.iter().zip(&oids).filter(|(a, b)| a != b).count()
        } else {
            oids.len()
        };
        self.oids = oids;
        Ok(changed)
    }

    /// Each queue's green curve as ASIC_DB shows it; `None` where it shows none (no WRED object
    /// bound, or one without the three attributes as whole numbers).
    pub fn read(&self, asic: &mut Connection) -> redis::RedisResult<Vec<Option<Curve>>> {
        let mut pipe = redis::pipe();
        for oid in &self.oids {
            // A queue the map has no id for reads as one without a curve.
            let oid = oid.as_deref().unwrap_or(schema::SAI_NULL_OBJECT_ID);
            pipe.cmd("HGET").arg(schema::asic_queue_key(oid)).arg(schema::SAI_QUEUE_WRED_PROFILE_ID);
        }
        let wred: Vec<Option<String>> = pipe.query(asic)?;
        let mut pipe = redis::pipe();
        for w in &wred {
            pipe.cmd("HMGET")
                .arg(schema::asic_wred_key(w.as_deref().unwrap_or(schema::SAI_NULL_OBJECT_ID)))
                .arg(&schema::SAI_WRED_GREEN[..]);
        }
        let fields: Vec<(Option<String>, Option<String>, Option<String>)> = pipe.query(asic)?;
        Ok(fields
            .into_iter()
            .map(|(kmin, kmax, percent)| {
                let number = |v: Option<String>| v.and_then(|v| v.parse::<u64>().ok());
                Some((number(kmin)?, number(kmax)?, u32::try_from(number(percent)?).ok()?))
            })
            .collect())
    }

    /// The first queue (index) whose ASIC_DB curve is not `want`'s, with what it shows.
    pub fn differs(
        &self,
        asic: &mut Connection,
        want: &[EcnSetting],
    ) -> redis::RedisResult<Option<(usize, Option<Curve>)>> {
        let shown = self.read(asic)?;
        Ok(shown
            .into_iter()
            .zip(want)
            .enumerate()
            .find(|(_, (c, s))| *c != Some(effective(s)))
            .map(|(i, (c, _))| (i, c)))
    }
}
