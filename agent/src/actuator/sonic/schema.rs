//! SONiC's Redis schema as far as ecn-tuner uses it (REFERENCE.md §7): database indices, table
//! and field names, key shapes, value parsing, and the name of the profiles ecn-tuner creates.
//!
//! Pure functions only; everything that talks to Redis is in the sibling modules.

use ecn_env::EcnSetting;
use std::collections::BTreeMap;

/// The fields of one Redis hash, in the order Redis returns them (`HGETALL`).
pub type Fields = Vec<(String, String)>;

/// Which Redis database holds which SONiC database. The defaults are those of SONiC's
/// `database_config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbIndices {
    /// APPL_DB: `PORT_TABLE:<port>` speed when CONFIG_DB has none.
    pub appl: i64,
    /// COUNTERS_DB: the SAI counters.
    pub counters: i64,
    /// CONFIG_DB: `WRED_PROFILE`, `QUEUE`, `PORT`, `BUFFER_POOL`, `DEVICE_METADATA`.
    pub config: i64,
    /// STATE_DB: where ecn-tuner keeps its recording of the original profiles.
    pub state: i64,
    /// ASIC_DB: the SAI objects orchagent has programmed, read back after each write.
    pub asic: i64,
}

/// Each database's command-line flag and its name in SONiC's `database_config.json`, in the
/// order [`DbIndices::by_flag`] gives them.
const DATABASES: [(&str, &str); 5] = [
    ("--config-db", "CONFIG_DB"),
    ("--state-db", "STATE_DB"),
    ("--counters-db", "COUNTERS_DB"),
    ("--appl-db", "APPL_DB"),
    ("--asic-db", "ASIC_DB"),
];

impl DbIndices {
    /// Each index with the command-line flag that sets it.
    pub fn by_flag(&self) -> [(&'static str, i64); 5] {
        let indices = [self.config, self.state, self.counters, self.appl, self.asic];
        std::array::from_fn(|k| (DATABASES[k].0, indices[k]))
    }

    /// Each index, to set, with the flag that sets it and the database's name in SONiC's
    /// `database_config.json`, in [`DbIndices::by_flag`]'s order.
    pub fn by_name_mut(&mut self) -> impl Iterator<Item = (&'static str, &'static str, &mut i64)> {
        let indices = [&mut self.config, &mut self.state, &mut self.counters, &mut self.appl, &mut self.asic];
        DATABASES.into_iter().zip(indices).map(|((flag, name), index)| (flag, name, index))
    }
}

/// SONiC's name of the database whose index `flag` sets (`--config-db`: `CONFIG_DB`), as its
/// `database_config.json` names it.
pub fn db_name(flag: &str) -> &'static str {
    DATABASES.iter().find(|&&(f, _)| f == flag).map_or("?", |&(_, name)| name)
}

/// The databases `sonic restore` uses, by flag: the recording lives in STATE_DB, the profiles
/// and queue bindings it puts back in CONFIG_DB.
pub const RESTORE_DB_FLAGS: [&str; 2] = ["--config-db", "--state-db"];

impl Default for DbIndices {
    fn default() -> Self {
        DbIndices { appl: 0, asic: 1, counters: 2, config: 4, state: 6 }
    }
}

/// CONFIG_DB tables.
pub const WRED_PROFILE: &str = "WRED_PROFILE";
/// CONFIG_DB queue table: `QUEUE|<port>|<queue>`.
pub const QUEUE: &str = "QUEUE";
/// CONFIG_DB port table: `PORT|<port>`, field `speed` in Mb/s.
pub const PORT: &str = "PORT";
/// CONFIG_DB buffer pools: `BUFFER_POOL|<pool>`, field `size` in bytes.
pub const BUFFER_POOL: &str = "BUFFER_POOL";
/// CONFIG_DB `DEVICE_METADATA|localhost`, field `hostname`.
pub const DEVICE_METADATA_LOCALHOST: &str = "DEVICE_METADATA|localhost";
/// CONFIG_DB keys of SONiC's counter polling that telemetry reads, with the `counterpoll`
/// group that sets each, the interval SONiC uses when the key has no `POLL_INTERVAL`
/// (milliseconds), and whether SONiC polls the group when the key has no
/// `FLEX_COUNTER_STATUS`. Queue and port counters are on out of the box; ECN marks
/// (`SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS`) are a group of their own, off by default.
pub const FLEX_COUNTER_POLLS: [FlexCounterPoll; 3] = [
    FlexCounterPoll { key: QUEUE_POLL, group: "queue", default_ms: 10_000, on_by_default: true },
    FlexCounterPoll { key: "FLEX_COUNTER_TABLE|PORT", group: "port", default_ms: 1_000, on_by_default: true },
    FlexCounterPoll { key: WRED_ECN_QUEUE_POLL, group: "wredqueue", default_ms: 10_000, on_by_default: false },
];
/// CONFIG_DB key of the queue counters' polling.
pub const QUEUE_POLL: &str = "FLEX_COUNTER_TABLE|QUEUE";
/// CONFIG_DB key of the ECN-mark counters' polling.
pub const WRED_ECN_QUEUE_POLL: &str = "FLEX_COUNTER_TABLE|WRED_ECN_QUEUE";

/// One of SONiC's counter polling groups (CONFIG_DB `FLEX_COUNTER_TABLE`).
#[derive(Debug, Clone, Copy)]
pub struct FlexCounterPoll {
    /// The CONFIG_DB key.
    pub key: &'static str,
    /// The `counterpoll` group that sets it.
    pub group: &'static str,
    /// SONiC's interval without `POLL_INTERVAL`, in milliseconds.
    pub default_ms: u64,
    /// Whether SONiC polls it without `FLEX_COUNTER_STATUS`.
    pub on_by_default: bool,
}

impl FlexCounterPoll {
    /// Whether SONiC polls the group, given its `FLEX_COUNTER_STATUS` (`None`: absent).
    pub fn is_on(&self, status: Option<&str>) -> bool {
        status.map_or(self.on_by_default, |s| s.trim() == "enable")
    }

    /// How often SONiC refreshes the group's counters, in milliseconds, given its
    /// `POLL_INTERVAL` (`None`, or not a number: SONiC's default).
    pub fn refresh_ms(&self, poll_interval: Option<&str>) -> u64 {
        poll_interval.and_then(poll_interval_ms).unwrap_or(self.default_ms)
    }

    /// Whether telemetry must be withheld while SONiC does not poll the group: queue counters
    /// (traffic, depth) and port counters (PFC pauses) then stand still, which reads as an idle
    /// fabric without pauses, and the health checks would pass any change. ECN marks, off by
    /// default and missing on some platforms, are only warned of.
    pub fn blinds_telemetry(&self) -> bool {
        self.on_by_default
    }
}

/// A `FLEX_COUNTER_TABLE` `POLL_INTERVAL` as milliseconds, if it is a whole number of them.
pub fn poll_interval_ms(value: &str) -> Option<u64> {
    value.trim().parse().ok()
}

/// Whether a WRED profile's `ecn` mode marks green packets (SONiC's `ecn_green`,
/// `ecn_green_yellow`, `ecn_green_red`, `ecn_all`), the colour whose curve ecn-tuner sets.
pub fn marks_green(ecn: &str) -> bool {
    ecn == "ecn_all" || ecn.starts_with("ecn_green")
}
/// APPL_DB port table (`:` separator).
pub const APPL_PORT_TABLE: &str = "PORT_TABLE";

/// ASIC_DB key of a SAI queue object: `ASIC_STATE:SAI_OBJECT_TYPE_QUEUE:oid:0x...`.
pub fn asic_queue_key(oid: &str) -> String {
    format!("ASIC_STATE:SAI_OBJECT_TYPE_QUEUE:{oid}")
}
/// ASIC_DB key of a SAI WRED object, which orchagent creates for each WRED profile.
pub fn asic_wred_key(oid: &str) -> String {
    format!("ASIC_STATE:SAI_OBJECT_TYPE_WRED:{oid}")
}
/// SAI's null object id: no object.
pub const SAI_NULL_OBJECT_ID: &str = "oid:0x0";
/// The queue attribute naming its WRED object ([`SAI_NULL_OBJECT_ID`] for none).
pub const SAI_QUEUE_WRED_PROFILE_ID: &str = "SAI_QUEUE_ATTR_WRED_PROFILE_ID";
/// The WRED object's green curve as programmed: Kmin, Kmax (bytes) and the percent at Kmax.
pub const SAI_WRED_GREEN: [&str; 3] =
    ["SAI_WRED_ATTR_GREEN_MIN_THRESHOLD", "SAI_WRED_ATTR_GREEN_MAX_THRESHOLD", "SAI_WRED_ATTR_GREEN_DROP_PROBABILITY"];

/// Field of `QUEUE|<port>|<queue>` naming its WRED profile.
pub const WRED_PROFILE_FIELD: &str = "wred_profile";

/// The WRED profile a `QUEUE` entry is bound to: its `wred_profile` field, `NAME` or, as SONiC
/// wrote references before 202106 (sonic-utilities' `db_migrator` strips the brackets at
/// version 3.0.2), `[WRED_PROFILE|NAME]`.
pub fn bound_profile(queue: &Fields) -> Option<&str> {
    let value = field(queue, WRED_PROFILE_FIELD)?;
    Some(
        value
            .strip_prefix('[')
            .and_then(|v| v.strip_suffix(']'))
            .and_then(|v| v.strip_prefix(WRED_PROFILE))
            .and_then(|v| v.strip_prefix('|'))
            .unwrap_or(value),
    )
}

/// The `wred_profile` value binding a queue to `profile`, in the form of the value it replaces:
/// a switch whose references are bracketed takes only bracketed ones (its orchagent refuses
/// the bare name), a newer one only bare names.
pub fn binding_value(profile: &str, replaced: Option<&str>) -> String {
    match replaced {
        Some(v) if v.starts_with('[') => format!("[{WRED_PROFILE}|{profile}]"),
        _ => profile.to_string(),
    }
}

/// Prefix of every WRED profile ecn-tuner creates.
pub const TUNER_PROFILE_PREFIX: &str = "ECN_TUNER_";

/// STATE_DB key of the recording of the original profiles and bindings (field [`RECORDING_FIELD`]).
pub const RECORDING_KEY: &str = "ECN_TUNER|ORIGINALS";
/// Field of [`RECORDING_KEY`] holding the recording as JSON.
pub const RECORDING_FIELD: &str = "json";

/// COUNTERS_DB maps from names to SAI object ids.
pub const QUEUE_NAME_MAP: &str = "COUNTERS_QUEUE_NAME_MAP";
/// `Ethernet0` → `oid:0x...`.
pub const PORT_NAME_MAP: &str = "COUNTERS_PORT_NAME_MAP";

/// Queue counters read from `COUNTERS:<queue oid>`.
pub const Q_BYTES: &str = "SAI_QUEUE_STAT_BYTES";
/// Transmitted packets.
pub const Q_PACKETS: &str = "SAI_QUEUE_STAT_PACKETS";
/// Packets CE-marked by WRED/ECN.
pub const Q_ECN_MARKED: &str = "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS";
/// Peak occupancy since the last read (a gauge, cleared by the flex counter on read).
pub const Q_WATERMARK: &str = "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES";
/// Current occupancy, where the platform reports it (a gauge).
pub const Q_OCCUPANCY: &str = "SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES";
/// Dropped packets, where the platform reports them.
pub const Q_DROPPED: &str = "SAI_QUEUE_STAT_DROPPED_PACKETS";

/// The queue fields read each poll, in this order.
pub const QUEUE_STAT_FIELDS: [&str; 6] = [Q_BYTES, Q_PACKETS, Q_ECN_MARKED, Q_WATERMARK, Q_OCCUPANCY, Q_DROPPED];

/// Port counters read only to tell a live switch from one whose counters stopped: octets in and
/// out move with any frame, LLDP's included, on any port that is up.
pub const PORT_LIVENESS_FIELDS: [&str; 2] = ["SAI_PORT_STAT_IF_IN_OCTETS", "SAI_PORT_STAT_IF_OUT_OCTETS"];

/// The PFC counters of one priority on a port: received PAUSE frames, sent PAUSE frames,
/// microseconds the port was told to pause.
pub fn pfc_fields(priority: u32) -> [String; 3] {
    [
        format!("SAI_PORT_STAT_PFC_{priority}_RX_PKTS"),
        format!("SAI_PORT_STAT_PFC_{priority}_TX_PKTS"),
        format!("SAI_PORT_STAT_PFC_{priority}_RX_PAUSE_DURATION_US"),
    ]
}

/// `COUNTERS:<oid>`.
pub fn counters_key(oid: &str) -> String {
    format!("COUNTERS:{oid}")
}

/// `Ethernet0:3`, the key of a queue in `COUNTERS_QUEUE_NAME_MAP`.
pub fn queue_counter_name(port: &str, queue: u32) -> String {
    format!("{port}:{queue}")
}

/// A CONFIG_DB key: `TABLE|name`.
pub fn config_key(table: &str, name: &str) -> String {
    format!("{table}|{name}")
}

/// The name in a `<table>|<name>` key of `table`, as [`config_key`] builds it; `None` for a key
/// of another table.
pub fn entry_name<'a>(table: &str, key: &'a str) -> Option<&'a str> {
    key.strip_prefix(table)?.strip_prefix('|')
}

/// `QUEUE|<port>|<queue>` → (port, queue). Other shapes (port lists `Ethernet0,Ethernet4`,
/// queue ranges `3-4`) are `None`: ecn-tuner needs one entry per queue to bind it alone.
pub fn parse_queue_key(key: &str) -> Option<(String, u32)> {
    let rest = key.strip_prefix("QUEUE|")?;
    let (port, q) = rest.split_once('|')?;
    if port.is_empty() || port.contains(',') {
        return None;
    }
    // Written as SONiC writes it: `05` or `+5` parse as 5, and the queue was then written as
    // `QUEUE|<port>|5`, an entry that may exist without a profile, while the one found stayed.
    let canonical = !q.is_empty() && q.bytes().all(|b| b.is_ascii_digit()) && (q == "0" || !q.starts_with('0'));
    let q: u32 = q.parse().ok().filter(|_| canonical)?;
    Some((port.to_string(), q))
}

/// The name of the profile ecn-tuner gives a queue that needs settings of its own:
/// `ECN_TUNER_<port>_<queue>`, e.g. `ECN_TUNER_Ethernet0_3`.
pub fn tuner_profile_name(port: &str, queue: u32) -> String {
    format!("{TUNER_PROFILE_PREFIX}{port}_{queue}")
}

/// True for a profile ecn-tuner created.
pub fn is_tuner_profile(name: &str) -> bool {
    name.starts_with(TUNER_PROFILE_PREFIX)
}

/// The value of a field, if present.
pub fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Set a field in place (keeping its position), or append it.
pub fn set_field(fields: &mut Fields, name: &str, value: String) {
    match fields.iter_mut().find(|(k, _)| k == name) {
        Some((_, v)) => *v = value,
        None => fields.push((name.to_string(), value)),
    }
}

/// Port speed: CONFIG_DB `PORT|<port>` `speed` is in Mb/s (`100000` = 100G). Returns bits/s.
pub fn parse_speed_mbps(s: &str) -> Option<u64> {
    let mbps: u64 = s.trim().parse().ok()?;
    // No port runs faster than 1.6 Tb/s: beyond, a speed is a typo, and saturated it read as
    // u64::MAX b/s, under which a petabyte jump in a counter passed for traffic.
    (1..=MAX_PORT_MBPS).contains(&mbps).then(|| mbps * 1_000_000)
}

/// The fastest port speed read, in Mb/s: 1.6 Tb/s.
pub const MAX_PORT_MBPS: u64 = 1_600_000;

/// The three WRED colours. Green carries the ECN setting; see [`follows_green`] for the others.
pub const COLOURS: [&str; 3] = ["green", "yellow", "red"];

/// `<colour>_min_threshold`, `<colour>_max_threshold`, `<colour>_drop_probability`.
pub fn colour_fields(colour: &str) -> (String, String, String) {
    (format!("{colour}_min_threshold"), format!("{colour}_max_threshold"), format!("{colour}_drop_probability"))
}

/// A WRED profile's green curve as an ECN setting. `None` if a threshold is missing or not a
/// number.
pub fn green_setting(fields: &Fields) -> Option<EcnSetting> {
    let num = |f: &str| field(fields, f).and_then(|v| v.trim().parse::<u64>().ok());
    let kmin_bytes = num("green_min_threshold")?;
    let kmax_bytes = num("green_max_threshold")?;
    // Absent, SAI's default (100%). Present, a percentage, or the curve is not known: read as
    // 100% (or 0%), a rollback wrote that over the profile's own value.
    let pmax = match field(fields, "green_drop_probability") {
        None => 1.0,
        Some(v) => v.trim().parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p))? / 100.0,
    };
    Some(EcnSetting { kmin_bytes, kmax_bytes, pmax })
}

/// `green_drop_probability` for a Pmax: a whole percent, 0–100. SONiC stores an integer, so
/// Pmax is rounded to the nearest percent; a positive Pmax never rounds down to 0 (that would
/// turn marking at Kmax off), it becomes 1.
pub fn drop_probability(pmax: f64) -> u32 {
    let p = (pmax.clamp(0.0, 1.0) * 100.0).round() as u32;
    if p == 0 && pmax > 0.0 {
        1
    } else {
        p
    }
}

/// Which yellow/red fields follow green, decided on the profile as it was originally: a colour's
/// thresholds follow green's when both equal green's there, and its drop probability follows
/// when it equals green's. A colour configured with a curve of its own keeps it untouched.
///
/// Lossless RoCE traffic is normally all green; SONiC's own lossless profiles use one curve for
/// every colour, and this keeps it that way.
pub fn follows_green(original: &Fields, colour: &str) -> (bool, bool) {
    if colour == "green" {
        return (true, true);
    }
    let (gmin, gmax, gp) = colour_fields("green");
    let (cmin, cmax, cp) = colour_fields(colour);
    let same = |a: &str, b: &str| matches!((field(original, a), field(original, b)), (Some(x), Some(y)) if x == y);
    (same(&cmin, &gmin) && same(&cmax, &gmax), same(&cp, &gp))
}

/// The fields a profile should have to carry `s`, starting from `original` (the profile as it
/// was before ecn-tuner touched it): green thresholds and drop probability set, yellow/red
/// following green where [`follows_green`] says so, every other field as in `original`.
pub fn profile_fields(original: &Fields, s: &EcnSetting) -> Fields {
    let mut out = original.clone();
    let (kmin, kmax, p) = (s.kmin_bytes.to_string(), s.kmax_bytes.to_string(), drop_probability(s.pmax).to_string());
    for colour in COLOURS {
        let (thresholds, prob) = follows_green(original, colour);
        let (fmin, fmax, fp) = colour_fields(colour);
        if thresholds {
            set_field(&mut out, &fmin, kmin.clone());
            set_field(&mut out, &fmax, kmax.clone());
        }
        if prob {
            set_field(&mut out, &fp, p.clone());
        }
    }
    out
}

/// The `HSET` field writes that take a profile from `current` to `target` (both complete field
/// lists), ordered so that `min <= max` holds for every colour after every single write: when
/// a colour's max rises, max goes first; when it falls, min goes first (REFERENCE.md §7).
/// Fields present in `current` but not in `target` are returned second, for `HDEL`.
pub fn ordered_writes(current: &Fields, target: &Fields) -> (Vec<(String, String)>, Vec<String>) {
    let mut writes = Vec::new();
    let mut handled: Vec<String> = Vec::new();
    let num = |f: &Fields, k: &str| field(f, k).and_then(|v| v.trim().parse::<u64>().ok());
    for colour in COLOURS {
        let (fmin, fmax, _) = colour_fields(colour);
        let changed = |k: &str| field(target, k).filter(|v| field(current, k) != Some(*v)).map(|v| v.to_string());
        let (new_min, new_max) = (changed(&fmin), changed(&fmax));
        let raise_max_first = match (num(current, &fmax), num(target, &fmax)) {
            (Some(old), Some(new)) => new >= old,
            _ => true,
        };
        let min_w = new_min.map(|v| (fmin.clone(), v));
        let max_w = new_max.map(|v| (fmax.clone(), v));
        let pair = if raise_max_first { [max_w, min_w] } else { [min_w, max_w] };
        writes.extend(pair.into_iter().flatten());
        handled.push(fmin);
        handled.push(fmax);
    }
    for (k, v) in target {
        if !handled.contains(k) && field(current, k) != Some(v.as_str()) {
            writes.push((k.clone(), v.clone()));
        }
    }
    let removed = current.iter().filter(|(k, _)| field(target, k).is_none()).map(|(k, _)| k.clone()).collect();
    (writes, removed)
}

/// Natural order of port names: `Ethernet4` before `Ethernet12`.
pub fn port_order(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (name, num) = s.split_at(s.len() - digits);
        (name.to_string(), num.parse::<u64>().unwrap_or(0), s.to_string())
    };
    split(a).cmp(&split(b))
}

/// Parse a field list from `HGETALL` into a map, for comparisons that ignore order.
pub fn as_map(fields: &Fields) -> BTreeMap<&str, &str> {
    fields.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
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
            ("red_drop_probability", "5"),
            ("red_max_threshold", "2097152"),
            ("red_min_threshold", "1048576"),
            ("wred_green_enable", "true"),
            ("yellow_drop_probability", "5"),
            ("yellow_max_threshold", "2097152"),
            ("yellow_min_threshold", "524288"),
        ])
    }

    /// Apply writes one at a time and check min <= max for every colour after each.
    fn replay(current: &Fields, target: &Fields) -> Fields {
        let (writes, removed) = ordered_writes(current, target);
        let mut state = current.clone();
        for (k, v) in writes {
            set_field(&mut state, &k, v);
            for c in COLOURS {
                let (fmin, fmax, _) = colour_fields(c);
                if let (Some(a), Some(b)) = (field(&state, &fmin), field(&state, &fmax)) {
                    let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
                    assert!(a <= b, "{c}: min {a} > max {b} after writing {k}");
                }
            }
        }
        state.retain(|(k, _)| !removed.contains(k));
        state
    }

    #[test]
    fn writes_keep_min_below_max_at_every_step() {
        let start = azure();
        let settings = [
            EcnSetting { kmin_bytes: 3_000_000, kmax_bytes: 4_000_000, pmax: 0.5 },
            EcnSetting { kmin_bytes: 1_000, kmax_bytes: 2_000, pmax: 0.01 },
            EcnSetting { kmin_bytes: 1_500, kmax_bytes: 9_000_000, pmax: 1.0 },
            EcnSetting { kmin_bytes: 8_000_000, kmax_bytes: 8_500_000, pmax: 0.2 },
        ];
        let mut cur = start.clone();
        for s in settings {
            let target = profile_fields(&start, &s);
            let got = replay(&cur, &target);
            assert_eq!(got, target);
            assert_eq!(green_setting(&got).unwrap().kmin_bytes, s.kmin_bytes);
            cur = got;
        }
    }

    #[test]
    fn yellow_with_a_curve_of_its_own_is_left_alone() {
        let start = azure();
        let s = EcnSetting { kmin_bytes: 100_000, kmax_bytes: 400_000, pmax: 0.5 };
        let t = profile_fields(&start, &s);
        assert_eq!(field(&t, "red_min_threshold"), Some("100000"));
        assert_eq!(field(&t, "red_drop_probability"), Some("50"));
        assert_eq!(field(&t, "yellow_min_threshold"), Some("524288"), "yellow had its own min");
        assert_eq!(field(&t, "yellow_max_threshold"), Some("2097152"));
        assert_eq!(field(&t, "yellow_drop_probability"), Some("50"), "its probability followed green");
        // Field order is kept: restoring in place gives byte-identical HGETALL output.
        let names: Vec<&str> = t.iter().map(|(k, _)| k.as_str()).collect();
        let orig: Vec<&str> = start.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, orig);
        // Back to the original setting gives the original fields exactly.
        assert_eq!(profile_fields(&start, &green_setting(&start).unwrap()), start);
    }

    #[test]
    fn drop_probability_is_a_whole_percent() {
        assert_eq!(drop_probability(0.05), 5);
        assert_eq!(drop_probability(0.30000000000000004), 30);
        assert_eq!(drop_probability(0.004), 1, "positive never becomes 0");
        assert_eq!(drop_probability(0.0), 0);
        assert_eq!(drop_probability(1.0), 100);
    }

    /// Each index goes with its own flag and name, whichever way it is read or set.
    #[test]
    fn database_flags_and_names() {
        let mut dbs = DbIndices::default();
        for (k, (flag, name, index)) in dbs.by_name_mut().enumerate() {
            assert_eq!(db_name(flag), name);
            *index = 10 + k as i64;
        }
        assert_eq!(dbs, DbIndices { config: 10, state: 11, counters: 12, appl: 13, asic: 14 });
        let by_flag =
            [("--config-db", 10), ("--state-db", 11), ("--counters-db", 12), ("--appl-db", 13), ("--asic-db", 14)];
        assert_eq!(dbs.by_flag(), by_flag);
        assert_eq!(
            (db_name("--asic-db"), db_name("--counters-db"), db_name("--nope")),
            ("ASIC_DB", "COUNTERS_DB", "?")
        );
    }

    #[test]
    fn keys_and_names() {
        assert_eq!(parse_queue_key("QUEUE|Ethernet0|3"), Some(("Ethernet0".into(), 3)));
        assert_eq!(parse_queue_key("QUEUE|Ethernet0,Ethernet4|3"), None);
        assert_eq!(parse_queue_key("QUEUE|Ethernet0|3-4"), None);
        // Other spellings of a number name no queue SONiC writes: left alone, not taken for 5.
        for odd in ["QUEUE|Ethernet0|05", "QUEUE|Ethernet0|+5", "QUEUE|Ethernet0|", "QUEUE|Ethernet0| 5"] {
            assert_eq!(parse_queue_key(odd), None, "{odd}");
        }
        assert_eq!(parse_queue_key("QUEUE|Ethernet0|0"), Some(("Ethernet0".into(), 0)));
        // A drop probability that is not a percentage leaves the curve unknown, not 100%.
        let curve = |p: Option<&str>| {
            let mut f: Fields =
                vec![("green_min_threshold".into(), "1000".into()), ("green_max_threshold".into(), "2000".into())];
            f.extend(p.map(|p| ("green_drop_probability".to_string(), p.to_string())));
            green_setting(&f).map(|s| s.pmax)
        };
        assert_eq!((curve(None), curve(Some("5")), curve(Some(" 100 "))), (Some(1.0), Some(0.05), Some(1.0)));
        for odd in ["abc", "NaN", "", "1e9", "101", "-5", "inf"] {
            assert_eq!(curve(Some(odd)), None, "{odd}");
        }
        assert_eq!(tuner_profile_name("Ethernet8", 4), "ECN_TUNER_Ethernet8_4");
        assert!(is_tuner_profile("ECN_TUNER_Ethernet8_4") && !is_tuner_profile("AZURE_LOSSLESS"));
        assert_eq!(parse_speed_mbps("100000"), Some(100_000_000_000));
        assert_eq!(parse_speed_mbps("1600000"), Some(1_600_000_000_000));
        for odd in ["1600001", "18446744073709551615", "0", "-1", "1e5"] {
            assert_eq!(parse_speed_mbps(odd), None, "{odd}");
        }
        let mut ports = vec!["Ethernet12", "Ethernet4", "Ethernet0", "Ethernet100"];
        ports.sort_by(|a, b| port_order(a, b));
        assert_eq!(ports, ["Ethernet0", "Ethernet4", "Ethernet12", "Ethernet100"]);
    }

    #[test]
    fn references_are_read_in_both_forms_and_written_in_the_replaced_ones() {
        let q = |v: &str| {
            vec![("scheduler".to_string(), "s1".to_string()), (WRED_PROFILE_FIELD.to_string(), v.to_string())]
        };
        assert_eq!(bound_profile(&q("AZURE_LOSSLESS")), Some("AZURE_LOSSLESS"));
        assert_eq!(bound_profile(&q("[WRED_PROFILE|AZURE_LOSSLESS]")), Some("AZURE_LOSSLESS"));
        // Another table's reference is no WRED profile's name; it is left as it reads.
        assert_eq!(bound_profile(&q("[SCHEDULER|s1]")), Some("[SCHEDULER|s1]"));
        assert_eq!(bound_profile(&vec![]), None);
        assert_eq!(
            binding_value("ECN_TUNER_Ethernet0_3", Some("[WRED_PROFILE|AZURE_LOSSLESS]")),
            "[WRED_PROFILE|ECN_TUNER_Ethernet0_3]"
        );
        assert_eq!(binding_value("ECN_TUNER_Ethernet0_3", Some("AZURE_LOSSLESS")), "ECN_TUNER_Ethernet0_3");
        assert_eq!(binding_value("ECN_TUNER_Ethernet0_3", None), "ECN_TUNER_Ethernet0_3");
    }
}
