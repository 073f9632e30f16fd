//! CONFIG_DB: what the switch has (capabilities, the queues' WRED profiles) and the writes that
//! put a set of ECN settings in effect, one MULTI/EXEC transaction per apply.
//!
//! ## Which profile a queue uses
//!
//! Every queue has a *home* profile: the WRED profile it was bound to before ecn-tuner touched
//! the switch (from the recording of the originals when there is one). Given the wanted
//! settings, each home profile carries the setting most of its queues want (ties: the first
//! queue's, in capabilities order); a queue that wants something else is bound to a profile
//! of its own, `ECN_TUNER_<port>_<queue>`, a copy of its home profile with its own thresholds.
//! A profile of ours that no queue uses any more is deleted in the same transaction.
//!
//! A home profile that a queue we do not control also uses is never edited in place (the
//! change would reach that queue unjudged): only queues that want what it holds stay on it.
//!
//! The mapping is a function of the wanted settings (and of which profiles other queues use)
//! alone, so putting the original settings back (a revert, a rollback) also puts the original
//! bindings back and removes every profile ecn-tuner created.

use super::conn::{hashes_among, hgetall_typed, scan_keys, RedisTarget};
use super::originals::Recording;
use super::schema::{self, Fields};
use crate::actuator::backend::{BackendCaps, Bounds, QueueCap, QueueKey};
use crate::actuator::ActuatorError;
use ecn_env::EcnSetting;
use redis::Connection;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tracing::warn;

/// The `WRED_PROFILE` and `QUEUE` tables: name (`AZURE_LOSSLESS`, `Ethernet0|3`) → fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `WRED_PROFILE|<name>` entries.
    pub profiles: BTreeMap<String, Fields>,
    /// `QUEUE|<port>|<queue>` entries (every shape of key, as stored).
    pub queues: BTreeMap<String, Fields>,
    /// Keys under either table that hold another type than a hash (read as absent): a profile
    /// of ours written under such a name is deleted first ([`plan`]), or its HSET fails while
    /// Redis runs the rest of the transaction.
    pub strays: BTreeSet<String>,
}

/// Read both tables in full.
pub fn read_snapshot(con: &mut Connection) -> redis::RedisResult<Snapshot> {
    read_tables(con, false)
}

/// Read both tables in full, watching every key read (`WATCH`): a transaction sent next on this
/// connection ([`exec`]) does not run if another client changed any of them meanwhile. A key
/// created after the scan is not watched.
pub fn read_snapshot_watched(con: &mut Connection) -> redis::RedisResult<Snapshot> {
    read_tables(con, true)
}

fn read_tables(con: &mut Connection, watch: bool) -> redis::RedisResult<Snapshot> {
    let mut out = Snapshot::default();
    for (table, into) in [(schema::WRED_PROFILE, &mut out.profiles), (schema::QUEUE, &mut out.queues)] {
        let keys = scan_keys(con, &format!("{table}|*"))?;
        if watch && !keys.is_empty() {
            redis::cmd("WATCH").arg(&keys).query::<()>(con)?;
        }
        let (entries, strays) = hgetall_typed(con, &keys)?;
        // Empty: gone since the scan (Redis holds no empty hash).
        for (k, v) in entries.into_iter().filter(|(_, v)| !v.is_empty()) {
            let name = k[table.len() + 1..].to_string();
            into.insert(name, v);
        }
        out.strays.extend(strays);
    }
    Ok(out)
}

/// The largest `BUFFER_POOL` size read, in bytes: no switch has a buffer near 64 GiB.
pub const MAX_POOL_BYTES: u64 = 64 << 30;

/// One controlled queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRef {
    /// Port, e.g. `Ethernet0`.
    pub port: String,
    /// Queue index (the PFC priorities read for it come from the port's `pfc_to_queue_map`,
    /// [`super::counters::PolledQueue`]).
    pub queue: u32,
}

impl QueueRef {
    /// `Ethernet0|3`, the queue's name in the `QUEUE` table.
    pub fn name(&self) -> String {
        format!("{}|{}", self.port, self.queue)
    }
}

/// What the writer needs to know about the controlled queues, fixed at startup.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// The queues, in capabilities order.
    pub queues: Vec<QueueRef>,
    /// Home profile of each queue.
    pub homes: Vec<String>,
    /// Each home profile as it was originally (decides which yellow/red fields follow green).
    pub originals: BTreeMap<String, Fields>,
}

/// What a switch offers, read at startup.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// Capabilities to serve.
    pub caps: BackendCaps,
    /// Queues and their home profiles.
    pub layout: Layout,
    /// The setting of each queue now.
    pub initial: Vec<EcnSetting>,
}

/// Read CONFIG_DB (and APPL_DB for port speeds CONFIG_DB lacks) and work out the queues.
pub fn discover(
    target: &RedisTarget,
    config_db: i64,
    appl_db: i64,
    switch_name: Option<&str>,
    recording: Option<&Recording>,
    interval_ns: u64,
) -> Result<Discovery, ActuatorError> {
    let failed =
        |e: redis::RedisError| ActuatorError::Failed(format!("Redis at {} (db {config_db}): {e}", target.url()));
    let mut con = target.connect(config_db, "ecn-tuner-discover").map_err(ActuatorError::Failed)?;
    let snapshot = read_snapshot(&mut con).map_err(failed)?;
    if snapshot.profiles.is_empty() {
        return Err(ActuatorError::BadInput(format!(
            "{}: CONFIG_DB (db {config_db}) has no WRED_PROFILE entries, so there is no ECN setting to tune \
             (is this a SONiC switch's Redis, and is {} right?)",
            target.named(config_db),
            target.index_named("--config-db", config_db)
        )));
    }
    // Not a hash, it has no hostname (said by `hashes_among`).
    let metadata = hashes_among(&mut con, &[schema::DEVICE_METADATA_LOCALHOST.to_string()]).map_err(failed)?;
    let hostname: Option<String> = match metadata.first() {
        Some(key) => redis::cmd("HGET").arg(key).arg("hostname").query(&mut con).map_err(failed)?,
        None => None,
    };
    // The name goes into every queue id, so into every request, answer and log line: one of 2 MB
    // made every Apply too long to be read, and one with a line break forged log lines.
    let odd = |h: &&str| h.len() > 255 || h.chars().any(char::is_control);
    if let (None, Some(h)) = (switch_name, hostname.as_deref().filter(odd)) {
        return Err(ActuatorError::BadInput(format!(
            "{}: DEVICE_METADATA|localhost hostname {} is not a host name (at most 255 bytes, no control \
             characters); name the switch with --switch-name",
            target.named(config_db),
            crate::actuator::validate::quoted_at_most(h, 40)
        )));
    }
    let switch = match (switch_name, hostname.filter(|h| !h.trim().is_empty())) {
        (Some(s), _) => s.to_string(),
        (None, Some(h)) => h,
        (None, None) => {
            return Err(ActuatorError::BadInput(format!(
                "{}: DEVICE_METADATA|localhost has no hostname; name the switch with --switch-name",
                target.named(config_db)
            )))
        }
    };

    // Port speeds: CONFIG_DB PORT|<port> speed (Mb/s), else APPL_DB PORT_TABLE:<port>.
    let port_keys = scan_keys(&mut con, &format!("{}|*", schema::PORT)).map_err(failed)?;
    let port_keys = hashes_among(&mut con, &port_keys).map_err(failed)?;
    let mut speeds: HashMap<String, u64> = HashMap::new();
    let speed_values: Vec<Option<String>> = if port_keys.is_empty() {
        Vec::new()
    } else {
        let mut pipe = redis::pipe();
        for k in &port_keys {
            pipe.cmd("HGET").arg(k).arg("speed");
        }
        pipe.query(&mut con).map_err(failed)?
    };
    for (k, v) in port_keys.iter().zip(speed_values) {
        if let Some(bps) = v.as_deref().and_then(schema::parse_speed_mbps) {
            speeds.insert(k[schema::PORT.len() + 1..].to_string(), bps);
        }
    }

    // Buffer: the egress lossless pool where there is one (that is where these queues live),
    // else the ingress lossless pool, else the largest pool with a size.
    let pool_keys = scan_keys(&mut con, &format!("{}|*", schema::BUFFER_POOL)).map_err(failed)?;
    let pool_keys = hashes_among(&mut con, &pool_keys).map_err(failed)?;
    let mut pools: BTreeMap<String, u64> = BTreeMap::new();
    for k in &pool_keys {
        let size: Option<String> = redis::cmd("HGET").arg(k).arg("size").query(&mut con).map_err(failed)?;
        // A size past any switch's buffer is a typo, not a bound: 2^64 − 1 B let Kmax go there.
        match size.as_deref().map(|s| s.trim().parse::<u64>()) {
            Some(Ok(b)) if (1..=MAX_POOL_BYTES).contains(&b) => {
                pools.insert(k[schema::BUFFER_POOL.len() + 1..].to_string(), b);
            }
            Some(Ok(b)) if b > MAX_POOL_BYTES => {
                warn!(key = %k, size = b, "a buffer pool larger than any switch's buffer (64 GiB): not read")
            }
            _ => {}
        }
    }
    let buffer_bytes = pools
        .get("egress_lossless_pool")
        .or_else(|| pools.get("ingress_lossless_pool"))
        .copied()
        .or_else(|| pools.values().max().copied())
        .unwrap_or(0);
    if buffer_bytes == 0 {
        // The pool size is the only bound on Kmax a switch gives; without it a policy could
        // write thresholds no buffer can reach.
        return Err(ActuatorError::BadInput(format!(
            "{}: CONFIG_DB (db {config_db}) has no BUFFER_POOL|<pool> with a size, so Kmax would have no \
             upper bound; nothing is tuned on a switch whose buffer is unknown",
            target.named(config_db)
        )));
    }

    let mut found: Vec<(QueueRef, String)> = Vec::new();
    for (name, fields) in &snapshot.queues {
        let Some(profile) = schema::bound_profile(fields) else { continue };
        let Some((port, queue)) = schema::parse_queue_key(&format!("QUEUE|{name}")) else {
            // `<host>|<asic>|<port>|<queue>` is a VOQ chassis's system port (qos_config.j2).
            let (what, port) = if name.matches('|').count() > 1 {
                ("is a VOQ chassis's system port", "local port")
            } else {
                ("covers several ports or queues", "port")
            };
            warn!(
                key = %format!("QUEUE|{name}"),
                "this QUEUE entry {what}; ecn-tuner controls only entries of one {port} and queue \
                 (QUEUE|<port>|<queue>) and leaves it alone"
            );
            continue;
        };
        found.push((QueueRef { port, queue }, profile.to_string()));
    }
    found.sort_by(|(a, _), (b, _)| schema::port_order(&a.port, &b.port).then(a.queue.cmp(&b.queue)));

    let mut appl: Option<Connection> = None;
    let mut queues = Vec::new();
    let mut layout = Layout { queues: Vec::new(), homes: Vec::new(), originals: BTreeMap::new() };
    let mut initial = Vec::new();
    for (q, bound) in found {
        let name = q.name();
        let Some(fields) = snapshot.profiles.get(&bound) else {
            warn!(queue = %name, profile = %bound, "the queue's WRED profile does not exist; queue left alone");
            continue;
        };
        let Some(setting) = schema::green_setting(fields) else {
            warn!(
                queue = %name,
                profile = %bound,
                "the profile has no numeric green thresholds, or a green_drop_probability that is not a percentage \
                 (0-100); queue left alone"
            );
            continue;
        };
        // Step marking (min = max) is a real WRED setting but not an ECN setting ecn-tuner can
        // put back: a rollback or restore to it would be refused, and every apply carries the
        // full set of settings, so controlling such a queue would block all writes.
        if let Err(e) = setting.validate() {
            warn!(queue = %name, profile = %bound, "the profile's green curve is not one ecn-tuner can set ({e}); queue left alone");
            continue;
        }
        let link_bps = match speeds.get(&q.port) {
            Some(b) => *b,
            None => {
                if appl.is_none() {
                    appl = target.connect(appl_db, "ecn-tuner-discover").ok();
                }
                let key = format!("{}:{}", schema::APPL_PORT_TABLE, q.port);
                let v: Option<String> =
                    appl.as_mut().and_then(|c| redis::cmd("HGET").arg(&key).arg("speed").query(c).ok()).flatten();
                match v.as_deref().and_then(schema::parse_speed_mbps) {
                    Some(b) => b,
                    None => {
                        warn!(queue = %name, "no speed for the port in CONFIG_DB PORT or APPL_DB PORT_TABLE; queue left alone");
                        continue;
                    }
                }
            }
        };
        // Home: the recorded binding if the queue now sits on one of our profiles.
        let home = match recording.and_then(|r| r.queue.get(&name)).and_then(schema::bound_profile) {
            Some(orig) if schema::is_tuner_profile(&bound) && snapshot.profiles.contains_key(orig) => orig.to_string(),
            _ => bound.clone(),
        };
        if schema::is_tuner_profile(&home) {
            warn!(
                queue = %name,
                profile = %home,
                "the queue is bound to an ecn-tuner profile but no recording of its original profile exists"
            );
        }
        let original = recording
            .and_then(|r| r.wred_profile.get(&home))
            .or_else(|| snapshot.profiles.get(&home))
            .cloned()
            .unwrap_or_default();
        let ecn = schema::field(&original, "ecn").unwrap_or("");
        if !schema::marks_green(ecn) {
            warn!(
                profile = %home,
                ecn,
                "the profile does not ECN-mark green packets (field ecn: ecn_green, ecn_green_yellow, ecn_green_red \
                 or ecn_all do); the green thresholds ecn-tuner sets then apply to WRED drops"
            );
        }
        layout.originals.entry(home.clone()).or_insert(original);
        queues.push(QueueCap {
            key: QueueKey { switch: switch.clone(), port: q.port.clone(), queue: q.queue },
            link_bps,
            // SONiC's PG `xoff` is headroom, not the level at which PAUSE starts (that is
            // dynamic, from the shared pool): no safe number to give.
            pfc_xoff_bytes: 0,
        });
        layout.queues.push(q);
        layout.homes.push(home);
        initial.push(setting);
    }
    if queues.is_empty() {
        return Err(ActuatorError::BadInput(format!(
            "{}: no QUEUE|<port>|<queue> entry of CONFIG_DB (db {config_db}) is bound to a WRED profile \
             with green thresholds and a port speed; nothing to tune",
            target.named(config_db)
        )));
    }
    let caps = BackendCaps {
        backend: "sonic".into(),
        queues,
        buffer_bytes,
        bounds: Bounds::for_buffer(buffer_bytes),
        min_telemetry_interval_ns: interval_ns,
        telemetry_time_scale: 1.0,
    };
    Ok(Discovery { caps, layout, initial })
}

/// What the managed part of CONFIG_DB should look like for a set of settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Profiles that must exist with exactly these fields (home profiles and ours in use).
    pub profiles: BTreeMap<String, Fields>,
    /// Profile of each queue.
    pub bindings: Vec<String>,
    /// Profiles of ours to delete.
    pub delete: BTreeSet<String>,
}

/// A green curve as the switch holds it: Kmin and Kmax in bytes, the percent at Kmax.
pub type Curve = (u64, u64, u32);

/// Settings are the same on the switch when their thresholds and whole-percent probability are.
pub(super) fn effective(s: &EcnSetting) -> Curve {
    (s.kmin_bytes, s.kmax_bytes, schema::drop_probability(s.pmax))
}

/// The controlled queues whose green curve in `now` is not `want`'s, in layout order, with the
/// curve CONFIG_DB gives each (`None`: no profile bound, or one without numeric green
/// thresholds).
pub fn differs(layout: &Layout, now: &Snapshot, want: &[EcnSetting]) -> Vec<(usize, Option<Curve>)> {
    layout
        .queues
        .iter()
        .zip(want)
        .enumerate()
        .filter_map(|(i, (q, w))| {
            let shown = now
                .queues
                .get(&q.name())
                .and_then(schema::bound_profile)
                .and_then(|p| now.profiles.get(p))
                .and_then(schema::green_setting)
                .map(|s| effective(&s));
            (shown != Some(effective(w))).then_some((i, shown))
        })
        .collect()
}

/// The managed tables for `settings` (one per queue of `layout`), given the tables now.
///
/// A profile that a queue we do not control is bound to (an entry covering several ports or
/// queues, a queue whose port has no speed, one added by someone else) is never edited: a
/// change to it would reach that queue too, unjudged by any health check. Controlled queues on
/// such a profile stay on it only while they want exactly what it holds; any other setting gets
/// a profile of their own.
pub fn target(layout: &Layout, now: &Snapshot, settings: &[EcnSetting]) -> Target {
    let used_elsewhere = used_by_uncontrolled(layout, now);
    let mut by_home: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, h) in layout.homes.iter().enumerate() {
        by_home.entry(h.as_str()).or_default().push(i);
    }
    let mut profiles = BTreeMap::new();
    let mut bindings = vec![String::new(); layout.queues.len()];
    let empty = Fields::new();
    for (home, idx) in by_home {
        let original = layout.originals.get(home).unwrap_or(&empty);
        let current_home = now.profiles.get(home).unwrap_or(original);
        let shared = if used_elsewhere.contains_key(home) {
            // Left as it is; `None` (no green curve to match) sends every queue to its own.
            schema::green_setting(current_home).map(|s| effective(&s))
        } else {
            // The setting most of the home's queues want; ties go to the first queue's.
            let mut counts: Vec<((u64, u64, u32), usize, usize)> = Vec::new();
            for &i in &idx {
                let e = effective(&settings[i]);
                match counts.iter_mut().find(|c| c.0 == e) {
                    Some(c) => c.1 += 1,
                    None => counts.push((e, 1, i)),
                }
            }
            let best = counts.iter().max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2))).expect("a home has queues");
            let (shared, first) = (best.0, best.2);
            profiles.insert(home.to_string(), with_setting(current_home, original, &settings[first]));
            Some(shared)
        };
        for &i in &idx {
            if Some(effective(&settings[i])) == shared {
                bindings[i] = home.to_string();
            } else {
                let own = own_profile(&layout.queues[i], &used_elsewhere);
                profiles.insert(own.clone(), with_setting(current_home, original, &settings[i]));
                bindings[i] = own;
            }
        }
    }
    let homes: BTreeSet<&String> = layout.homes.iter().collect();
    // Ours, unused by the target bindings and by any queue we do not control.
    let delete = now
        .profiles
        .keys()
        .filter(|p| schema::is_tuner_profile(p) && !profiles.contains_key(*p) && !homes.contains(p))
        .filter(|p| !used_elsewhere.contains_key(p.as_str()))
        .cloned()
        .collect();
    Target { profiles, bindings, delete }
}

/// The profile of our own for queue `q`: `ECN_TUNER_<port>_<queue>`, or, if someone bound a
/// queue we do not control to that one, the first `ECN_TUNER_<port>_<queue>_v<n>` that no such
/// queue uses. Their queue keeps the profile as it is, and ours moves, so that a change (a
/// rollback too) never has to edit a profile under a queue that nothing judges.
fn own_profile(q: &QueueRef, used_elsewhere: &BTreeMap<&str, &str>) -> String {
    let name = schema::tuner_profile_name(&q.port, q.queue);
    if !used_elsewhere.contains_key(name.as_str()) {
        return name;
    }
    (1..).map(|n| format!("{name}_v{n}")).find(|n| !used_elsewhere.contains_key(n.as_str())).expect("unbounded")
}

/// The profiles that queues we do not control are bound to, each with the first such queue.
fn used_by_uncontrolled<'a>(layout: &Layout, now: &'a Snapshot) -> BTreeMap<&'a str, &'a str> {
    let managed: BTreeSet<String> = layout.queues.iter().map(QueueRef::name).collect();
    bound_outside(now, |q| managed.contains(q))
}

/// The profiles that the queues of `now` not `inside` are bound to, each with the first such
/// queue (by name).
pub fn bound_outside(now: &Snapshot, inside: impl Fn(&str) -> bool) -> BTreeMap<&str, &str> {
    let mut used = BTreeMap::new();
    for (queue, fields) in now.queues.iter().filter(|(q, _)| !inside(q)) {
        if let Some(profile) = schema::bound_profile(fields) {
            used.entry(profile).or_insert(queue.as_str());
        }
    }
    used
}

/// The first profile that `ops` edit or delete while a queue we do not control uses it, with
/// that queue. `target` never plans such a write (it keeps off home profiles so used, and
/// moves a queue of ours off a profile of ours that someone bound another queue to); this is
/// the check that a plan must pass before it runs, whatever planned it.
pub fn reaches_uncontrolled(layout: &Layout, now: &Snapshot, ops: &[Op]) -> Option<(String, String)> {
    let used = used_by_uncontrolled(layout, now);
    ops.iter()
        .filter_map(|op| match op {
            Op::Set(k, _, _) | Op::Unset(k, _) | Op::Del(k) => schema::entry_name(schema::WRED_PROFILE, k),
            Op::Create(..) => None,
        })
        .find_map(|profile| used.get(profile).map(|queue| (profile.to_string(), queue.to_string())))
}

/// `base`'s fields with the thresholds and probability of `s`, yellow/red following green as
/// decided on `original`.
fn with_setting(base: &Fields, original: &Fields, s: &EcnSetting) -> Fields {
    let wanted = schema::profile_fields(original, s);
    let mut out = base.clone();
    for colour in schema::COLOURS {
        let (thresholds, prob) = schema::follows_green(original, colour);
        let (fmin, fmax, fp) = schema::colour_fields(colour);
        let mut names = Vec::new();
        if thresholds {
            names.extend([fmin, fmax]);
        }
        if prob {
            names.push(fp);
        }
        for n in names {
            if let Some(v) = schema::field(&wanted, &n) {
                schema::set_field(&mut out, &n, v.to_string());
            }
        }
    }
    out
}

/// One Redis write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `HSET key f1 v1 f2 v2 ...`: a whole new hash in one command.
    Create(String, Fields),
    /// `HSET key field value`.
    Set(String, String, String),
    /// `HDEL key field`.
    Unset(String, String),
    /// `DEL key`.
    Del(String),
}

/// The writes from `now` to `t`, in a safe order: new profiles exist before a queue is bound to
/// them, profile edits keep `min <= max` at every step, bindings change next, and profiles of
/// ours are deleted only once nothing uses them.
pub fn plan(layout: &Layout, now: &Snapshot, t: &Target) -> Vec<Op> {
    let pkey = |n: &str| schema::config_key(schema::WRED_PROFILE, n);
    let mut ops = Vec::new();
    for (name, fields) in &t.profiles {
        if !now.profiles.contains_key(name) {
            // A key of another type under the name of a profile of ours is ours to replace.
            if schema::is_tuner_profile(name) && now.strays.contains(&pkey(name)) {
                ops.push(Op::Del(pkey(name)));
            }
            ops.push(Op::Create(pkey(name), fields.clone()));
        }
    }
    for (name, fields) in &t.profiles {
        if let Some(cur) = now.profiles.get(name) {
            let (writes, removed) = schema::ordered_writes(cur, fields);
            ops.extend(writes.into_iter().map(|(f, v)| Op::Set(pkey(name), f, v)));
            ops.extend(removed.into_iter().map(|f| Op::Unset(pkey(name), f)));
        }
    }
    for (q, want) in layout.queues.iter().zip(&t.bindings) {
        let name = q.name();
        // A queue whose entry is gone (its port removed) is never written back: that would bind
        // a queue the switch no longer has.
        let Some(fields) = now.queues.get(&name) else { continue };
        if schema::bound_profile(fields) != Some(want.as_str()) {
            ops.push(Op::Set(
                schema::config_key(schema::QUEUE, &name),
                schema::WRED_PROFILE_FIELD.into(),
                schema::binding_value(want, schema::field(fields, schema::WRED_PROFILE_FIELD)),
            ));
        }
    }
    for name in &t.delete {
        ops.push(Op::Del(pkey(name)));
    }
    ops
}

/// `now` after `ops` succeeded: what the tests check a plan against (the writer reads
/// CONFIG_DB again instead).
#[cfg(test)]
pub fn after(now: &Snapshot, ops: &[Op]) -> Snapshot {
    let mut s = now.clone();
    let split = |key: &str| -> (bool, String) {
        match key.split_once('|') {
            Some((t, rest)) => (t == schema::WRED_PROFILE, rest.to_string()),
            None => (false, key.to_string()),
        }
    };
    for op in ops {
        match op {
            Op::Create(k, f) => {
                let (profile, n) = split(k);
                let table = if profile { &mut s.profiles } else { &mut s.queues };
                table.insert(n, f.clone());
            }
            Op::Set(k, f, v) => {
                let (profile, n) = split(k);
                let table = if profile { &mut s.profiles } else { &mut s.queues };
                schema::set_field(table.entry(n).or_default(), f, v.clone());
            }
            Op::Unset(k, f) => {
                let (profile, n) = split(k);
                let table = if profile { &mut s.profiles } else { &mut s.queues };
                if let Some(e) = table.get_mut(&n) {
                    e.retain(|(x, _)| x != f);
                }
            }
            Op::Del(k) => {
                let (profile, n) = split(k);
                let table = if profile { &mut s.profiles } else { &mut s.queues };
                table.remove(&n);
            }
        }
    }
    s
}

/// Whether `read` shows the managed part of `t` in full (field order aside). A queue whose
/// entry is gone has no binding to show ([`plan`] writes none for it).
pub fn shows(layout: &Layout, read: &Snapshot, t: &Target) -> bool {
    let profiles_ok =
        t.profiles.iter().all(|(n, f)| read.profiles.get(n).is_some_and(|r| schema::as_map(r) == schema::as_map(f)));
    let bindings_ok = layout
        .queues
        .iter()
        .zip(&t.bindings)
        .all(|(q, b)| read.queues.get(&q.name()).is_none_or(|f| schema::bound_profile(f) == Some(b.as_str())));
    let deleted_ok = t.delete.iter().all(|n| !read.profiles.contains_key(n));
    profiles_ok && bindings_ok && deleted_ok
}

/// Run `ops` as one MULTI/EXEC transaction: all of them, or none (then also when a key the
/// connection watches changed first), or, where Redis refused some while running it, the rest.
pub fn exec(con: &mut Connection, ops: &[Op]) -> redis::RedisResult<Ran> {
    let mut pipe = redis::pipe();
    // The command each reply answers, for a refusal's message.
    let mut sent: Vec<String> = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Op::Create(k, f) => {
                let c = pipe.cmd("HSET").arg(k);
                for (field, value) in f {
                    c.arg(field).arg(value);
                }
                sent.push(format!("HSET {k}"));
            }
            Op::Set(k, f, v) => {
                pipe.cmd("HSET").arg(k).arg(f).arg(v);
                sent.push(format!("HSET {k} {f}"));
            }
            Op::Unset(k, f) => {
                pipe.cmd("HDEL").arg(k).arg(f);
                sent.push(format!("HDEL {k} {f}"));
            }
            Op::Del(k) => {
                pipe.cmd("DEL").arg(k);
                sent.push(format!("DEL {k}"));
            }
        }
    }
    // A refusal of the probe: nothing was sent.
    if let Err(e) = super::conn::probe(con) {
        return if e.code().is_some() { Ok(Ran::Refused(e.to_string())) } else { Err(e) };
    }
    // Every reply, as Redis sent it: MULTI's, one per command as it was queued, EXEC's.
    // Without them all (a timeout, a closed connection) the transaction may still run: the
    // caller finds out.
    let replies = super::conn::transaction_replies(&pipe, con)?;
    fn refusal(v: &redis::Value) -> Option<String> {
        match v {
            redis::Value::ServerError(e) => Some(redis::RedisError::from(e.clone()).to_string()),
            _ => None,
        }
    }
    let (Some(multi), Some(exec)) = (replies.first(), replies.last()) else {
        return Err(redis::RedisError::from((redis::ErrorKind::ParseError, "a transaction without replies")));
    };
    // MULTI refused (an ACL without it): Redis ran each command on its own as it came.
    if let Some(e) = refusal(multi) {
        return Ok(Ran::Unguarded(format!("MULTI: {e}")));
    }
    // A command refused as it was queued aborts EXEC: nothing ran.
    if let Some(e) = replies[1..replies.len() - 1].iter().find_map(refusal) {
        return Ok(Ran::Refused(e));
    }
    match exec {
        // EXEC answers nil when a watched key changed: nothing ran.
        redis::Value::Nil => Ok(Ran::Aborted),
        redis::Value::Array(replies) => {
            let refused: Vec<String> = sent
                .iter()
                .zip(replies)
                .filter_map(|(command, reply)| Some(format!("{command}: {}", refusal(reply)?)))
                .collect();
            Ok(if refused.is_empty() { Ran::Done } else { Ran::Partial { refused, of: sent.len() } })
        }
        other => match refusal(other) {
            Some(e) => Ok(Ran::Refused(e)),
            None => Err(redis::RedisError::from((
                redis::ErrorKind::ParseError,
                "EXEC answered neither nil nor a reply per command",
                format!("{other:?}"),
            ))),
        },
    }
}

/// Whether a transaction ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// Every write ran.
    Done,
    /// None ran: a key read with [`read_snapshot_watched`] changed before EXEC.
    Aborted,
    /// None ran: Redis refused the transaction, with this error (`LOADING`, `MISCONF`, `OOM`,
    /// `READONLY`, ...). Answered in full: nothing of it can land later.
    Refused(String),
    /// Redis refused the `refused` commands (each with its error) of the transaction's `of`
    /// while running it, and ran the others: Redis rolls nothing back.
    Partial { refused: Vec<String>, of: usize },
    /// Redis refused MULTI (with this error) and ran each command on its own as it came:
    /// CONFIG_DB may hold any part of the write.
    Unguarded(String),
}

impl Ran {
    /// Why the transaction did not run whole, in words (for a partial run: what was refused,
    /// the first few, and that the rest ran); `None` when it did.
    pub fn failure(&self) -> Option<String> {
        match self {
            Ran::Done => None,
            Ran::Aborted => {
                Some("another client changed a key the transaction watched, so Redis ran none of it".into())
            }
            Ran::Refused(e) => Some(format!("Redis refused the transaction, and ran none of it: {e}")),
            Ran::Partial { refused, of } => {
                let shown: Vec<&str> = refused.iter().take(3).map(String::as_str).collect();
                let more = refused.len().saturating_sub(shown.len());
                Some(format!(
                    "Redis refused {} of the transaction's {of} commands while running it and ran the rest ({}{})",
                    refused.len(),
                    shown.join("; "),
                    if more > 0 { format!("; {more} more") } else { String::new() }
                ))
            }
            Ran::Unguarded(e) => Some(format!("Redis refused MULTI ({e}) and ran each command on its own")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Fields {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn azure() -> Fields {
        f(&[
            ("ecn", "ecn_all"),
            ("green_drop_probability", "5"),
            ("green_max_threshold", "2097152"),
            ("green_min_threshold", "1048576"),
            ("wred_green_enable", "true"),
        ])
    }

    fn world() -> (Layout, Snapshot) {
        let queues: Vec<QueueRef> = ["Ethernet0", "Ethernet4"]
            .iter()
            .flat_map(|p| [3, 4].map(|q| QueueRef { port: p.to_string(), queue: q }))
            .collect();
        let mut snap = Snapshot::default();
        snap.profiles.insert("AZURE_LOSSLESS".into(), azure());
        snap.profiles.insert("AZURE_LOSSY".into(), f(&[("ecn", "ecn_none")]));
        for q in &queues {
            snap.queues.insert(q.name(), f(&[("scheduler", "scheduler.1"), ("wred_profile", "AZURE_LOSSLESS")]));
        }
        snap.queues.insert("Ethernet0|0".into(), f(&[("scheduler", "scheduler.0")]));
        let layout = Layout {
            homes: vec!["AZURE_LOSSLESS".into(); queues.len()],
            originals: [("AZURE_LOSSLESS".to_string(), azure())].into(),
            queues,
        };
        (layout, snap)
    }

    const ORIG: EcnSetting = EcnSetting { kmin_bytes: 1_048_576, kmax_bytes: 2_097_152, pmax: 0.05 };
    const NEW: EcnSetting = EcnSetting { kmin_bytes: 100_000, kmax_bytes: 400_000, pmax: 0.5 };

    #[test]
    fn the_same_setting_everywhere_edits_the_shared_profile_in_place() {
        let (layout, snap) = world();
        let t = target(&layout, &snap, &[NEW; 4]);
        assert!(t.bindings.iter().all(|b| b == "AZURE_LOSSLESS"));
        let ops = plan(&layout, &snap, &t);
        // Lowering: min first, then max.
        assert_eq!(
            ops,
            vec![
                Op::Set("WRED_PROFILE|AZURE_LOSSLESS".into(), "green_min_threshold".into(), "100000".into()),
                Op::Set("WRED_PROFILE|AZURE_LOSSLESS".into(), "green_max_threshold".into(), "400000".into()),
                Op::Set("WRED_PROFILE|AZURE_LOSSLESS".into(), "green_drop_probability".into(), "50".into()),
            ]
        );
    }

    #[test]
    fn a_queue_that_differs_gets_its_own_profile_and_going_back_removes_it() {
        let (layout, snap) = world();
        let t = target(&layout, &snap, &[ORIG, NEW, ORIG, ORIG]);
        assert_eq!(t.bindings[1], "ECN_TUNER_Ethernet0_4");
        assert_eq!(t.bindings[0], "AZURE_LOSSLESS");
        let ops = plan(&layout, &snap, &t);
        assert!(matches!(&ops[0], Op::Create(k, _) if k == "WRED_PROFILE|ECN_TUNER_Ethernet0_4"), "{ops:?}");
        assert_eq!(
            ops.last(),
            Some(&Op::Set("QUEUE|Ethernet0|4".into(), "wred_profile".into(), "ECN_TUNER_Ethernet0_4".into()))
        );
        let mid = after(&snap, &ops);
        assert!(shows(&layout, &mid, &t));
        let own = &mid.profiles["ECN_TUNER_Ethernet0_4"];
        assert_eq!(schema::field(own, "ecn"), Some("ecn_all"), "copied from the home profile");
        assert_eq!(schema::green_setting(own).unwrap(), NEW);

        // Back to the original settings: bindings and tables exactly as before.
        let back = target(&layout, &mid, &[ORIG; 4]);
        let ops = plan(&layout, &mid, &back);
        assert_eq!(ops.last(), Some(&Op::Del("WRED_PROFILE|ECN_TUNER_Ethernet0_4".into())));
        assert_eq!(after(&mid, &ops), snap);
    }

    #[test]
    fn the_majority_keeps_the_home_profile() {
        let (layout, snap) = world();
        let t = target(&layout, &snap, &[ORIG, NEW, NEW, NEW]);
        assert_eq!(t.bindings, ["ECN_TUNER_Ethernet0_3", "AZURE_LOSSLESS", "AZURE_LOSSLESS", "AZURE_LOSSLESS"]);
        assert_eq!(schema::green_setting(&t.profiles["AZURE_LOSSLESS"]).unwrap(), NEW);
        assert_eq!(schema::green_setting(&t.profiles["ECN_TUNER_Ethernet0_3"]).unwrap(), ORIG);
        assert!(plan(&layout, &after(&snap, &plan(&layout, &snap, &t)), &t).is_empty(), "idempotent");
    }

    #[test]
    fn a_profile_that_an_uncontrolled_queue_uses_is_never_edited_in_place() {
        let (layout, mut snap) = world();
        // A range entry and a queue left alone at discovery (no port speed) share the profile.
        for q in ["Ethernet0,Ethernet4|1-2", "Ethernet8|3"] {
            snap.queues.insert(q.into(), f(&[("scheduler", "scheduler.1"), ("wred_profile", "AZURE_LOSSLESS")]));
        }
        let t = target(&layout, &snap, &[NEW; 4]);
        assert!(!t.profiles.contains_key("AZURE_LOSSLESS"), "{:?}", t.profiles.keys());
        assert_eq!(
            t.bindings,
            ["ECN_TUNER_Ethernet0_3", "ECN_TUNER_Ethernet0_4", "ECN_TUNER_Ethernet4_3", "ECN_TUNER_Ethernet4_4"]
        );
        let ops = plan(&layout, &snap, &t);
        assert!(
            !ops.iter()
                .any(|op| matches!(op, Op::Set(k, _, _) | Op::Unset(k, _) if k == "WRED_PROFILE|AZURE_LOSSLESS")),
            "{ops:?}"
        );
        let mid = after(&snap, &ops);
        assert_eq!(mid.profiles["AZURE_LOSSLESS"], azure());
        assert!(shows(&layout, &mid, &t));

        // A queue that keeps the profile's own setting stays on it.
        let t = target(&layout, &mid, &[ORIG, NEW, NEW, NEW]);
        assert_eq!(t.bindings[0], "AZURE_LOSSLESS");

        // Back to the original settings: the tables exactly as before.
        let back = target(&layout, &mid, &[ORIG; 4]);
        assert_eq!(after(&mid, &plan(&layout, &mid, &back)), snap);
    }

    #[test]
    fn a_plan_that_edits_our_profile_under_someone_elses_queue_is_caught() {
        let (layout, snap) = world();
        let t = target(&layout, &snap, &[ORIG, NEW, ORIG, ORIG]);
        let mid = after(&snap, &plan(&layout, &snap, &t));
        assert_eq!(reaches_uncontrolled(&layout, &snap, &plan(&layout, &snap, &t)), None);
        // Someone binds a queue we leave alone to the profile of ours that Ethernet0|4 uses.
        let mut shared = mid.clone();
        shared.queues.insert("Ethernet0|1".into(), f(&[("wred_profile", "ECN_TUNER_Ethernet0_4")]));
        let edit = [Op::Set("WRED_PROFILE|ECN_TUNER_Ethernet0_4".into(), "green_min_threshold".into(), "1".into())];
        assert_eq!(
            reaches_uncontrolled(&layout, &shared, &edit),
            Some(("ECN_TUNER_Ethernet0_4".to_string(), "Ethernet0|1".to_string()))
        );
        let delete = [Op::Del("WRED_PROFILE|ECN_TUNER_Ethernet0_4".into())];
        assert!(reaches_uncontrolled(&layout, &shared, &delete).is_some());
    }

    #[test]
    fn a_queue_of_ours_moves_off_our_profile_when_someone_else_binds_a_queue_to_it() {
        let (layout, snap) = world();
        let mid = after(&snap, &plan(&layout, &snap, &target(&layout, &snap, &[ORIG, NEW, ORIG, ORIG])));
        let mut shared = mid.clone();
        shared.queues.insert("Ethernet0|1".into(), f(&[("wred_profile", "ECN_TUNER_Ethernet0_4")]));
        shared.queues.insert("Ethernet0|2".into(), f(&[("wred_profile", "ECN_TUNER_Ethernet0_4_v1")]));
        // Another setting, and a rollback to the original, both leave their profile as it is.
        let other = EcnSetting { kmin_bytes: 200_000, ..NEW };
        for settings in [[ORIG, other, ORIG, ORIG], [ORIG; 4]] {
            let t = target(&layout, &shared, &settings);
            let ops = plan(&layout, &shared, &t);
            assert_eq!(reaches_uncontrolled(&layout, &shared, &ops), None, "{ops:?}");
            let back = after(&shared, &ops);
            assert!(shows(&layout, &back, &t));
            for q in ["Ethernet0|1", "Ethernet0|2"] {
                let profile = schema::bound_profile(&shared.queues[q]).unwrap();
                assert_eq!(back.profiles.get(profile), shared.profiles.get(profile), "{q}'s profile");
            }
        }
        let t = target(&layout, &shared, &[ORIG, other, ORIG, ORIG]);
        assert_eq!(t.bindings[1], "ECN_TUNER_Ethernet0_4_v2");
        assert_eq!(schema::green_setting(&t.profiles["ECN_TUNER_Ethernet0_4_v2"]), Some(other));
        assert!(!t.delete.contains("ECN_TUNER_Ethernet0_4"), "in use by their queue");
    }
}
