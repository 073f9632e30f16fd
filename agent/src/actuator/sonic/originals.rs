//! The recording of the original WRED profiles and queue bindings, made once before
//! ecn-tuner's first change to a switch, and `ecn-tuner sonic restore`, which puts them back.
//!
//! ## Where the recording lives
//!
//! - In STATE_DB (db 6 by default), hash `ECN_TUNER|ORIGINALS`, field `json`. STATE_DB is not
//!   configuration: `config save` never writes it to `config_db.json`, no SONiC daemon reads
//!   this key, and it outlives the actuator process, so `sonic restore --redis URL` finds it
//!   with nothing else. It is written with `HSETNX`, so an existing recording is never
//!   overwritten, even by two actuators racing.
//! - In a file beside the journal (`<journal>.sonic-originals.json`) when the actuator has a
//!   journal, created only if absent. SONiC does not keep STATE_DB across a reboot; the file
//!   does, and `sonic restore --from FILE` uses it. When STATE_DB has lost its copy but the
//!   file exists, the actuator puts the file's recording back into STATE_DB instead of
//!   recording the (already tuned) tables as "original".
//!
//! The recording holds every `WRED_PROFILE` and `QUEUE` entry with all fields, in the order
//! Redis returned them, so that a restore can make both tables byte-identical.

use super::config::{bound_outside, exec, read_snapshot, read_snapshot_watched, Op, QueueRef, Ran, Snapshot};
use super::conn::{self, RedisTarget};
use super::schema::{self, DbIndices, Fields};
use crate::actuator::ActuatorError;
use redis::Connection;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// Format tag of a recording without [`Recording::controlled`] (made before it was kept).
pub const FORMAT: &str = "ecn-tuner/sonic-originals/v1";

/// Format tag of a recording that names the queues controlled: a new tag, so that a version
/// that knows only [`FORMAT`] refuses it by name instead of reading it without that list (its
/// `sonic restore` would put back everything, an operator's edits too, and its actuator write
/// the list away).
pub const FORMAT_CONTROLLED: &str = "ecn-tuner/sonic-originals/v2";

/// The original `WRED_PROFILE` and `QUEUE` tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// [`FORMAT`], or [`FORMAT_CONTROLLED`] with [`Recording::controlled`].
    pub format: String,
    /// When it was taken.
    pub recorded_unix_ms: u64,
    /// The switch it was taken on.
    pub switch: String,
    /// The CONFIG_DB index it was read from.
    pub config_db: i64,
    /// The file copy, if one was written (a restore renames it so that it is not reused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// `WRED_PROFILE|<name>` → fields, as `[field, value]` pairs in Redis's order.
    pub wred_profile: BTreeMap<String, Fields>,
    /// `QUEUE|<name>` → fields.
    pub queue: BTreeMap<String, Fields>,
    /// The queues (`<port>|<queue>`) the actuator controlled when it recorded: a restore puts
    /// back their bindings and the profiles only they were bound to, what ecn-tuner writes, and
    /// leaves the rest as it finds it. Absent in recordings made before it was kept: every
    /// recorded queue counts as controlled then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controlled: Option<BTreeSet<String>>,
}

impl Recording {
    /// A recording of `snapshot`.
    pub fn of(snapshot: &Snapshot, switch: &str, config_db: i64, file: Option<PathBuf>) -> Recording {
        Recording {
            format: FORMAT.into(),
            recorded_unix_ms: crate::actuator::journal::unix_ms(std::time::SystemTime::now()),
            switch: switch.to_string(),
            config_db,
            file,
            wred_profile: snapshot.profiles.clone(),
            queue: snapshot.queues.clone(),
            controlled: None,
        }
    }

    /// This recording, noting the queues the actuator controls.
    pub fn controlling(mut self, queues: &[QueueRef]) -> Recording {
        self.controlled = Some(queues.iter().map(QueueRef::name).collect());
        self.format = FORMAT_CONTROLLED.into();
        self
    }

    /// Add the `controlled` queues it does not name yet, as `now` shows them, with their
    /// profiles where it holds none of that name; how many were added. A recording made by
    /// an actuator that controlled fewer queues (before a restart that found more: a port
    /// given a speed, a queue bound to a profile) named only those, and a restore then left
    /// this actuator's in-place edit of a new queue's profile as someone else's, and retired
    /// the recording. Taken before this actuator's first write, `now` is what it found.
    pub fn cover(&mut self, controlled: &[QueueRef], now: &Snapshot) -> usize {
        let Some(named) = &mut self.controlled else { return 0 };
        let mut added = 0;
        for name in controlled.iter().map(QueueRef::name) {
            if named.contains(&name) {
                continue;
            }
            // One on a profile of ours, or on one that does not exist, keeps the entry recorded
            // before (a recording holds no profile of ours, and every binding it holds must
            // name a profile it holds).
            let holdable = |p: &str| {
                !schema::is_tuner_profile(p) && (self.wred_profile.contains_key(p) || now.profiles.contains_key(p))
            };
            let found = now.queues.get(&name).filter(|f| schema::bound_profile(f).is_none_or(holdable));
            if let Some(fields) = found {
                if let Some(p) = schema::bound_profile(fields) {
                    if let (false, Some(profile)) = (self.wred_profile.contains_key(p), now.profiles.get(p)) {
                        self.wred_profile.insert(p.to_string(), profile.clone());
                    }
                }
                self.queue.insert(name.clone(), fields.clone());
            }
            named.insert(name);
            added += 1;
        }
        added
    }

    /// Whether `other` is a copy of this recording, taken at the same moment of the same
    /// switch, whatever was added to either since ([`Recording::cover`]): a copy that differed
    /// only in that was not retired by a restore, and a later actuator put it back.
    pub fn is_of(&self, other: &Recording) -> bool {
        (self.recorded_unix_ms, &self.switch, self.config_db)
            == (other.recorded_unix_ms, &other.switch, other.config_db)
    }

    fn parse(text: &str, from: &str) -> Result<Recording, String> {
        let r: Recording = serde_json::from_str(text).map_err(|e| format!("{from}: not a recording ({e})"))?;
        if r.format != FORMAT && r.format != FORMAT_CONTROLLED {
            return Err(format!("{from}: format '{}' is neither {FORMAT} nor {FORMAT_CONTROLLED}", r.format));
        }
        if (r.format == FORMAT_CONTROLLED) != r.controlled.is_some() {
            return Err(format!(
                "{from}: format '{}' with{} a list of controlled queues",
                r.format,
                if r.controlled.is_some() { "" } else { "out" }
            ));
        }
        Ok(r)
    }

    /// A restore writes these tables into CONFIG_DB as they are, so a file, which anyone can
    /// edit, must hold what a switch could: entries with fields (Redis holds no empty hash:
    /// writing one deleted the entry), each field once, no profile of ecn-tuner's (a restore
    /// removes those), whole-byte thresholds with min ≤ max per colour, drop probabilities of
    /// 0–100 percent, and every queue bound to a recorded profile. Each of these, given, wrote
    /// CONFIG_DB and then failed its check, or left a queue on ecn-tuner's profile and retired
    /// the recording. STATE_DB's copy is the actuator's own, written once; it is put back byte
    /// for byte.
    fn check_contents(&self) -> Result<(), String> {
        let entries = self.wred_profile.iter().map(|(n, f)| (schema::WRED_PROFILE, n, f));
        for (table, name, fields) in entries.chain(self.queue.iter().map(|(n, f)| (schema::QUEUE, n, f))) {
            let key = schema::config_key(table, name);
            if fields.is_empty() {
                return Err(format!("{key}: no fields (a switch's entry has at least one)"));
            }
            let mut seen = BTreeSet::new();
            if let Some((field, _)) = fields.iter().find(|(field, _)| !seen.insert(field)) {
                return Err(format!("{key}: field {field} given twice"));
            }
        }
        for (name, fields) in &self.wred_profile {
            let key = schema::config_key(schema::WRED_PROFILE, name);
            if schema::is_tuner_profile(name) {
                return Err(format!(
                    "{key}: a profile of ecn-tuner's, which a recording of the switch before it never holds"
                ));
            }
            let number = |field: &str| -> Result<Option<u64>, String> {
                schema::field(fields, field)
                    .map(|v| v.trim().parse::<u64>().map_err(|_| format!("{key}: {field} '{v}' is not a byte count")))
                    .transpose()
            };
            for colour in schema::COLOURS {
                let (min_f, max_f, prob_f) = schema::colour_fields(colour);
                if let (Some(min), Some(max)) = (number(&min_f)?, number(&max_f)?) {
                    if min > max {
                        return Err(format!("{key}: {min_f} {min} is above {max_f} {max}"));
                    }
                }
                if let Some(p) = number(&prob_f)? {
                    if p > 100 {
                        return Err(format!("{key}: {prob_f} {p} is not a percentage (0-100)"));
                    }
                }
            }
        }
        for (name, fields) in &self.queue {
            if let Some(profile) = schema::bound_profile(fields) {
                if !self.wred_profile.contains_key(profile) {
                    return Err(format!(
                        "{}: bound to WRED_PROFILE|{profile}, which the recording does not hold",
                        schema::config_key(schema::QUEUE, name)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether this recording can be the original state of `controlled` queues on `switch`'s
    /// CONFIG_DB `config_db`: a recording from another switch, or one that lacks a queue,
    /// would make those changes impossible to undo.
    pub fn check_belongs(&self, switch: &str, config_db: i64, controlled: &[QueueRef]) -> Result<(), String> {
        if self.switch != switch {
            return Err(format!("the recording is of switch '{}', not '{switch}'", self.switch));
        }
        if self.config_db != config_db {
            return Err(format!("the recording is of CONFIG_DB db {}, not db {config_db}", self.config_db));
        }
        match controlled.iter().map(QueueRef::name).find(|q| !self.queue.contains_key(q)) {
            Some(q) => Err(format!("the recording has no entry for QUEUE|{q}, a queue ecn-tuner controls")),
            None => Ok(()),
        }
    }

    /// The recording in STATE_DB, if any.
    pub fn read(state: &mut Connection, db: i64) -> Result<Option<Recording>, String> {
        let text: Option<String> = redis::cmd("HGET")
            .arg(schema::RECORDING_KEY)
            .arg(schema::RECORDING_FIELD)
            .query(state)
            .map_err(|e| format!("reading {} from STATE_DB (db {db}): {e}", schema::RECORDING_KEY))?;
        text.map(|t| Recording::parse(&t, &format!("STATE_DB (db {db}) {}", schema::RECORDING_KEY))).transpose()
    }

    /// The recording in a file, checked ([`Recording::check_contents`]).
    pub fn read_file(path: &Path) -> Result<Recording, String> {
        // A recording holds two CONFIG_DB tables: some MiB on the largest switch.
        let text = ecn_datasets::bounded::read_text_at_most(path, 256 << 20)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let r = Recording::parse(&text, &path.display().to_string())?;
        r.check_contents().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(r)
    }
}

/// The file copy of the recording for a journal: `<journal>.sonic-originals.json`.
pub fn file_beside(journal: &Path) -> PathBuf {
    let mut name = journal.file_name().unwrap_or_default().to_os_string();
    name.push(".sonic-originals.json");
    journal.with_file_name(name)
}

/// Makes sure a recording of the original tables is in STATE_DB (and beside the journal) before
/// every change; remembers the one it saw, to put it back where STATE_DB loses it.
pub struct Recorder {
    file: Option<PathBuf>,
    /// The recording STATE_DB held at the last write.
    recorded: Option<Recording>,
    /// The STATE_DB connection, kept between writes: a write must not need a new connection
    /// that a network path may refuse while it still carries the open ones.
    state: Option<Connection>,
}

impl Recorder {
    /// Keep a copy in `file` too, if given.
    pub fn new(file: Option<PathBuf>) -> Recorder {
        Recorder { file, recorded: None, state: None }
    }

    /// STATE_DB's recording, read on the connection kept, or on a new one where that one
    /// fails (Redis restarted since).
    fn read_stored(&mut self, target: &RedisTarget, dbs: &DbIndices) -> Result<Option<Recording>, String> {
        if let Some(Ok(stored)) = self.state.as_mut().map(|c| Recording::read(c, dbs.state)) {
            return Ok(stored);
        }
        self.state = None;
        let mut con = target.connect(dbs.state, "ecn-tuner-state")?;
        let stored = Recording::read(&mut con, dbs.state)?;
        self.state = Some(con);
        Ok(stored)
    }

    /// Record `now` (the tables as they are, just read) unless a recording exists already,
    /// in STATE_DB or in the file; then make sure both hold it. A recording from the file must
    /// belong to this switch and cover the `controlled` queues ([`Recording::check_belongs`]).
    /// Checked before every write: a Redis restarted without its data (or a flushed STATE_DB)
    /// loses the recording while the actuator runs, and it is put back from the one this
    /// actuator saw, not taken afresh from tables it has tuned since.
    pub fn ensure(
        &mut self,
        target: &RedisTarget,
        dbs: &DbIndices,
        now: &dyn Fn() -> Result<Snapshot, String>,
        switch: &str,
        controlled: &[QueueRef],
    ) -> Result<(), String> {
        let stored = self.read_stored(target, dbs)?;
        if stored.is_some() && self.recorded.is_some() {
            return Ok(());
        }
        let r = self.record(dbs, stored, now, switch, controlled);
        if r.is_err() {
            self.state = None;
        }
        r
    }

    /// [`Recorder::ensure`] once STATE_DB was read (`stored`) and found wanting.
    fn record(
        &mut self,
        dbs: &DbIndices,
        stored: Option<Recording>,
        now: &dyn Fn() -> Result<Snapshot, String>,
        switch: &str,
        controlled: &[QueueRef],
    ) -> Result<(), String> {
        let state = self.state.as_mut().expect("connected by read_stored");
        // The file is read only where STATE_DB and this actuator have no recording: a copy torn
        // by a crash or a full disk, with STATE_DB's whole, is replaced below, not trusted.
        let from_file = match (&stored, &self.recorded, &self.file) {
            (None, None, Some(p)) if p.exists() => Some(Recording::read_file(p)?),
            _ => None,
        };
        let file_read = from_file.is_some();
        // The tables as this actuator found them: the recording if none exists, and what
        // [`Recording::cover`] adds to one that does.
        let found = now()?;
        let rec = match (stored, self.recorded.take(), from_file) {
            (Some(r), _, _) => r,
            (None, Some(r), _) => {
                warn!("STATE_DB lost the recording of the original profiles (Redis restarted without its data?); putting it back");
                r
            }
            (None, None, Some(r)) => {
                let file = self.file.as_ref().expect("read from the file").display();
                r.check_belongs(switch, dbs.config, controlled)
                    .map_err(|e| format!("{file}: {e}; move the file away to record this switch afresh"))?;
                warn!(file = %file, "STATE_DB has no recording of the original profiles; putting back the one from the file");
                r
            }
            (None, None, None) => Recording::of(&found, switch, dbs.config, self.file.clone()).controlling(controlled),
        };
        let json = serde_json::to_string(&rec).map_err(|e| format!("recording: {e}"))?;
        let created: bool = redis::cmd("HSETNX")
            .arg(schema::RECORDING_KEY)
            .arg(schema::RECORDING_FIELD)
            .arg(&json)
            .query(state)
            .map_err(|e| format!("writing {} to STATE_DB (db {}): {e}", schema::RECORDING_KEY, dbs.state))?;
        if created {
            info!(
                profiles = rec.wred_profile.len(),
                queues = rec.queue.len(),
                key = schema::RECORDING_KEY,
                state_db = dbs.state,
                "recorded the original WRED profiles and queue bindings (undo everything with `ecn-tuner sonic restore`)"
            );
        }
        // The recording that won in STATE_DB, whichever actuator wrote it, made to name the
        // queues this one controls ([`Recording::cover`]).
        let mut stored = Recording::read(state, dbs.state)?.unwrap_or(rec);
        let added = stored.cover(controlled, &found);
        if added > 0 {
            let json = serde_json::to_string(&stored).map_err(|e| format!("recording: {e}"))?;
            redis::cmd("HSET")
                .arg(schema::RECORDING_KEY)
                .arg(schema::RECORDING_FIELD)
                .arg(&json)
                .query::<()>(state)
                .map_err(|e| format!("writing {} to STATE_DB (db {}): {e}", schema::RECORDING_KEY, dbs.state))?;
            info!(
                queues = added,
                "the recording of the original profiles now names the queues this actuator controls and the one \
                 that made it did not, as they are before this actuator's first write"
            );
        }
        if let Some(p) = &self.file {
            if p.exists() && !file_read {
                if let Err(why) = Recording::read_file(p) {
                    let aside = beside(p, "unreadable");
                    warn!(
                        file = %p.display(), moved_to = %aside.display(),
                        "the file copy of the recording is unreadable ({why}); STATE_DB holds it whole: writing it afresh"
                    );
                    std::fs::rename(p, &aside)
                        .map_err(|e| format!("{}: moving it to {}: {e}", p.display(), aside.display()))?;
                }
            }
            let text = || serde_json::to_string_pretty(&stored).map_err(|e| format!("recording: {e}"));
            if !p.exists() {
                write_new(p, &text()?).map_err(|e| format!("{}: {e}", p.display()))?;
            } else if added > 0 {
                replace(p, &text()?).map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
        self.recorded = Some(stored);
        Ok(())
    }
}

/// Replace `path` with `text`, whole or not at all: written and synced under another name,
/// then renamed over it.
fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let temp = written_beside(path, text)?;
    if let Err(e) = std::fs::rename(&temp, path) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    sync_folder_of(path)
}

/// Create `path` with `text`, whole or not at all, never replacing an existing file: written
/// and synced under another name first, then linked into place (a crash or a full disk
/// mid-write left a torn copy that every later Apply failed to read). On a file system without
/// hard links it is written in place, as before.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    let temp = written_beside(path, text)?;
    let linked = std::fs::hard_link(&temp, path);
    let _ = std::fs::remove_file(&temp);
    match linked {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            tracing::debug!("linking the file copy into place failed ({e}); writing it in place");
            write_synced(path, text)?;
        }
        r => r?,
    }
    sync_folder_of(path)
}

/// `text` in a new file at `path`, synced; an existing file is an error.
fn write_synced(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// `text` written and synced under this process's temporary name beside `path`, which is
/// returned. The name is this process's own: one left by a crash of another with its PID is
/// removed (a link itself, never what it points to), and the file made anew, so that a link
/// planted under that name is not written through.
fn written_beside(path: &Path, text: &str) -> std::io::Result<PathBuf> {
    let mut temp = path.file_name().unwrap_or_default().to_os_string();
    temp.push(format!(".{}.tmp", std::process::id()));
    let temp = path.with_file_name(temp);
    let _ = std::fs::remove_file(&temp);
    if let Err(e) = write_synced(&temp, text) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(temp)
}

/// Sync the folder holding `path`, so that a name just made or renamed there lasts.
fn sync_folder_of(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Where a file copy of a recording is moved out of the way: `<name>.<why>-<unix ms>`.
fn beside(path: &Path, why: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{why}-{}", crate::actuator::journal::unix_ms(std::time::SystemTime::now())));
    path.with_file_name(name)
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// No recording was found: nothing was done.
    pub nothing_recorded: bool,
    /// With no recording: the `WRED_PROFILE|ECN_TUNER_*` entries CONFIG_DB holds all the same,
    /// signs that ecn-tuner changed the switch and its recording was lost (a reboot clears
    /// STATE_DB).
    pub tuner_profiles_unrecorded: Vec<String>,
    /// Entries rewritten to their recorded fields.
    pub profiles_restored: usize,
    /// Queue entries rewritten.
    pub queues_restored: usize,
    /// Profiles of ours deleted.
    pub profiles_removed: usize,
    /// Entries that are not in the recording and not ours: left as they are.
    pub left_alone: Vec<String>,
    /// Profiles of ours kept because a queue the recording does not hold is bound to them, as
    /// (`WRED_PROFILE|<name>`, `QUEUE|<name>`).
    pub kept_bound: Vec<(String, String)>,
    /// Recorded `QUEUE|<name>` entries that are gone from CONFIG_DB: not written back.
    pub gone: Vec<String>,
    /// Recorded entries that ecn-tuner never writes (profiles of queues it did not control,
    /// queues' fields other than the binding) and that differ from the recording now: someone
    /// else's changes, left as they are.
    pub changed_elsewhere: Vec<String>,
    /// File copies of the recording that could not be retired, with why: a later actuator
    /// would put such a copy back, and a later restore undo what has changed since.
    pub not_retired: Vec<(PathBuf, String)>,
}

/// What a restore puts back: the entries ecn-tuner may have written.
struct Scope<'a> {
    /// Queues whose binding ecn-tuner may have changed: those it controlled, and any bound to
    /// one of its profiles now.
    queues: BTreeSet<&'a str>,
    /// Profiles it may have edited in place: those bound, in the recording, to such queues
    /// only.
    profiles: BTreeSet<&'a str>,
}

impl<'a> Scope<'a> {
    fn of(rec: &'a Recording, now: &Snapshot) -> Scope<'a> {
        let bound_to_ours =
            |q: &str| now.queues.get(q).and_then(schema::bound_profile).is_some_and(schema::is_tuner_profile);
        let queues: BTreeSet<&str> = rec
            .queue
            .keys()
            .map(String::as_str)
            .filter(|q| rec.controlled.as_ref().is_none_or(|c| c.contains(*q)) || bound_to_ours(q))
            .collect();
        let mut profiles: BTreeSet<&str> = BTreeSet::new();
        let mut shared: BTreeSet<&str> = BTreeSet::new();
        for (q, fields) in &rec.queue {
            if let Some(p) = schema::bound_profile(fields) {
                if queues.contains(q.as_str()) {
                    profiles.insert(p);
                } else {
                    shared.insert(p);
                }
            }
        }
        profiles.retain(|p| !shared.contains(p));
        Scope { queues, profiles }
    }
}

/// Whether two entries hold the same fields, in any order.
fn same_fields(a: &Fields, b: &Fields) -> bool {
    let sorted = |f: &Fields| {
        let mut f = f.clone();
        f.sort();
        f
    };
    a.len() == b.len() && sorted(a) == sorted(b)
}

/// `cur` with the binding of `rec`: the one field of a queue's entry ecn-tuner writes.
fn with_recorded_binding(cur: &Fields, rec: &Fields) -> Fields {
    let mut want = cur.clone();
    match schema::field(rec, schema::WRED_PROFILE_FIELD) {
        Some(p) => schema::set_field(&mut want, schema::WRED_PROFILE_FIELD, p.to_string()),
        None => want.retain(|(f, _)| f != schema::WRED_PROFILE_FIELD),
    }
    want
}

/// The writes that take one recorded hash from `cur` back to `rec`, byte for byte: fields edited
/// in place (thresholds in the min/max-safe order) when that keeps the recorded field order,
/// otherwise the key rewritten whole.
fn restore_ops(key: String, cur: Option<&Fields>, rec: &Fields) -> Vec<Op> {
    let Some(cur) = cur else { return vec![Op::Create(key, rec.clone())] };
    if cur == rec {
        return Vec::new();
    }
    let (writes, removed) = schema::ordered_writes(cur, rec);
    let mut sim = cur.clone();
    for (f, v) in &writes {
        schema::set_field(&mut sim, f, v.clone());
    }
    sim.retain(|(f, _)| !removed.contains(f));
    if &sim == rec {
        let mut ops: Vec<Op> = writes.into_iter().map(|(f, v)| Op::Set(key.clone(), f, v)).collect();
        ops.extend(removed.into_iter().map(|f| Op::Unset(key.clone(), f)));
        ops
    } else {
        vec![Op::Del(key.clone()), Op::Create(key, rec.clone())]
    }
}

/// The whole restore plan: recorded profiles first (so that every binding points at a profile
/// that exists), then queue bindings, then our own profiles go, except one that a queue whose
/// binding is not restored is bound to: that queue stays as it is, and deleting its profile
/// would leave it bound to nothing. Only what ecn-tuner may have written is put back
/// ([`Scope`]); other recorded entries that differ now are someone else's changes, listed and
/// left alone (a restore used to put back every recorded entry whole: an operator's scheduler
/// on a queue, or a profile no controlled queue used, went back with the rest).
pub fn restore_plan(rec: &Recording, now: &Snapshot) -> (Vec<Op>, RestoreReport) {
    let mut ops = Vec::new();
    let mut report = RestoreReport::default();
    let scope = Scope::of(rec, now);
    let used_outside = bound_outside(now, |q| scope.queues.contains(q));
    // Profiles the restored bindings name. One shared with a queue outside the restore is not
    // put back, but one gone since (its other queues moved, then it was deleted) must be: the
    // restored queue would be bound to nothing.
    let bound_back: BTreeSet<&str> = rec
        .queue
        .iter()
        .filter(|(q, _)| scope.queues.contains(q.as_str()) && now.queues.contains_key(*q))
        .filter_map(|(_, fields)| schema::bound_profile(fields))
        .collect();
    for (name, fields) in &rec.wred_profile {
        let key = schema::config_key(schema::WRED_PROFILE, name);
        let gone_but_bound = !now.profiles.contains_key(name) && bound_back.contains(name.as_str());
        if !scope.profiles.contains(name.as_str()) && !gone_but_bound {
            if !now.profiles.get(name).is_some_and(|p| same_fields(p, fields)) {
                report.changed_elsewhere.push(key);
            }
            continue;
        }
        let o = restore_ops(key, now.profiles.get(name), fields);
        report.profiles_restored += usize::from(!o.is_empty());
        ops.extend(o);
    }
    for (name, fields) in &rec.queue {
        let key = schema::config_key(schema::QUEUE, name);
        // An actuator never deletes a queue entry: one gone was deleted by someone else, most
        // likely with its port, and writing it back would bind a queue the switch no longer has.
        let Some(cur) = now.queues.get(name) else {
            report.gone.push(key);
            continue;
        };
        let want = if scope.queues.contains(name.as_str()) { with_recorded_binding(cur, fields) } else { cur.clone() };
        if !same_fields(&want, fields) {
            report.changed_elsewhere.push(key.clone());
        }
        let o = restore_ops(key, Some(cur), &want);
        report.queues_restored += usize::from(!o.is_empty());
        ops.extend(o);
    }
    for name in now.profiles.keys().filter(|n| !rec.wred_profile.contains_key(*n)) {
        if !schema::is_tuner_profile(name) {
            report.left_alone.push(schema::config_key(schema::WRED_PROFILE, name));
        } else if let Some(queue) = used_outside.get(name.as_str()) {
            report
                .kept_bound
                .push((schema::config_key(schema::WRED_PROFILE, name), schema::config_key(schema::QUEUE, queue)));
        } else {
            ops.push(Op::Del(schema::config_key(schema::WRED_PROFILE, name)));
            report.profiles_removed += 1;
        }
    }
    for name in now.queues.keys().filter(|n| !rec.queue.contains_key(*n)) {
        report.left_alone.push(schema::config_key(schema::QUEUE, name));
    }
    (ops, report)
}

/// How many times a restore plans again after another client's edit aborted its transaction.
const RESTORE_ATTEMPTS: u32 = 3;

/// Put the recorded tables back in one transaction, check them, then retire the recording
/// (STATE_DB key deleted, file renamed to `*.restored-<unix ms>`), so that a later run records
/// afresh. `from` is a recording already read from that file, used instead of STATE_DB's.
/// A recording of another switch or CONFIG_DB index is refused as bad input (`switch`: the
/// name the actuator ran with, if not the hostname); nothing is written then.
pub fn restore(
    target: &RedisTarget,
    dbs: &DbIndices,
    from: Option<(&Path, Recording)>,
    switch: Option<&str>,
) -> Result<RestoreReport, ActuatorError> {
    let mut state = target.connect(dbs.state, "ecn-tuner-restore").map_err(ActuatorError::Failed)?;
    // Under a running actuator a restore would retire the recording its later writes need to be
    // undone, and its next write would tune the switch again. Its connections are to CONFIG_DB's
    // instance, which may not be STATE_DB's.
    if let Some(actuator) = conn::running_actuator_at(target, &[dbs.state, dbs.config], "ecn-tuner-restore")
        .map_err(ActuatorError::Failed)?
    {
        return Err(ActuatorError::BadInput(format!(
            "an ecn-tuner actuator is connected to this switch ({actuator}): stop it first (SIGTERM), then restore"
        )));
    }
    let (from, rec) = match from {
        Some((p, rec)) => (Some(p), Some(rec)),
        None => (None, Recording::read(&mut state, dbs.state).map_err(ActuatorError::Failed)?),
    };
    let mut config = target.connect(dbs.config, "ecn-tuner-restore").map_err(ActuatorError::Failed)?;
    let err = |e: redis::RedisError| {
        ActuatorError::Failed(format!("Redis at {} (db {}): {}", target.url(), dbs.config, conn::said(&e)))
    };
    let Some(rec) = rec else {
        let now = read_snapshot(&mut config).map_err(err)?;
        let ours = now.profiles.keys().filter(|n| schema::is_tuner_profile(n)).map(|n| format!("WRED_PROFILE|{n}"));
        return Ok(RestoreReport {
            nothing_recorded: true,
            tuner_profiles_unrecorded: ours.collect(),
            ..Default::default()
        });
    };
    // Nothing is written to a switch the recording was not taken on.
    let hostname: Option<String> =
        redis::cmd("HGET").arg(schema::DEVICE_METADATA_LOCALHOST).arg("hostname").query(&mut config).map_err(err)?;
    let this_switch = switch.map(str::to_string).or(hostname).unwrap_or_default();
    let source = from.map_or_else(|| format!("STATE_DB (db {})", dbs.state), |p| p.display().to_string());
    rec.check_belongs(&this_switch, dbs.config, &[]).map_err(|e| {
        ActuatorError::BadInput(format!(
            "{source}: {e}; nothing restored (use --config-db, or --switch-name if the actuator ran with one)"
        ))
    })?;
    // The plan is made from the tables as read, so the transaction runs only if none of the
    // keys read changed meanwhile (WATCH); when one did, read again and plan afresh.
    let mut attempts = 0;
    let (mut report, now, ops) = loop {
        attempts += 1;
        let now = read_snapshot_watched(&mut config).map_err(err)?;
        let (ops, report) = restore_plan(&rec, &now);
        if ops.is_empty() {
            let _: () = redis::cmd("UNWATCH").query(&mut config).map_err(err)?;
            break (report, now, ops);
        }
        match exec(&mut config, &ops) {
            Ok(Ran::Done) => break (report, now, ops),
            Ok(Ran::Aborted) if attempts < RESTORE_ATTEMPTS => {
                warn!(attempts, "another client changed WRED_PROFILE or QUEUE during the restore; planning it again")
            }
            Ok(Ran::Aborted) => {
                return Err(ActuatorError::Failed(format!(
                    "another client changed WRED_PROFILE or QUEUE during each of {attempts} tries; nothing was \
                     written, and the recording is kept: rerun `sonic restore` once the switch is quiet"
                )))
            }
            Ok(Ran::Refused(e)) => {
                return Err(ActuatorError::Failed(format!(
                    "Redis refused the restore's transaction: {e}; nothing was written, and the recording is kept: \
                     rerun `sonic restore` once Redis takes writes"
                )))
            }
            Ok(ran @ (Ran::Partial { .. } | Ran::Unguarded(_))) => {
                return Err(ActuatorError::Failed(format!(
                    "{}; CONFIG_DB may hold part of the restore, and the recording is kept: rerun `sonic restore` \
                     once that is mended (it plans from what CONFIG_DB holds then)",
                    ran.failure().unwrap_or_default()
                )))
            }
            // The reply is lost, so whether EXEC ran is unknown: a rerun plans from what is there.
            Err(e) => {
                return Err(ActuatorError::Failed(format!(
                    "{}; the restore's transaction ran whole or not at all, and the recording is kept: rerun \
                     `sonic restore`",
                    err(e)
                )))
            }
        }
    };
    let mut back = read_snapshot(&mut config).map_err(err)?;
    // WATCH does not cover a queue created between the read and the transaction: one bound
    // meanwhile to a profile of ours that the restore deleted would point at nothing. Such a
    // profile is put back as it was, as if the queue had been there all along. (One that
    // someone else deleted is theirs to mend.)
    let deleted: BTreeSet<&str> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Del(key) => schema::entry_name(schema::WRED_PROFILE, key),
            _ => None,
        })
        .collect();
    let dangling: BTreeMap<&str, &str> = back
        .queues
        .iter()
        .filter_map(|(queue, fields)| {
            let profile = schema::bound_profile(fields)?;
            (!back.profiles.contains_key(profile) && deleted.contains(profile)).then_some((profile, queue.as_str()))
        })
        .collect();
    if !dangling.is_empty() {
        let put_back: Vec<Op> = dangling
            .keys()
            .map(|p| Op::Create(schema::config_key(schema::WRED_PROFILE, p), now.profiles[*p].clone()))
            .collect();
        let names: Vec<String> = dangling.iter().map(|(p, q)| format!("WRED_PROFILE|{p} (QUEUE|{q})")).collect();
        warn!(profiles = %names.join(", "), "a queue was bound to a profile of ours during the restore; putting it back");
        let failed = |why: String| {
            ActuatorError::Failed(format!(
                "{why}: queues were bound during the restore to profiles it deleted, and putting them back failed: {}",
                names.join(", ")
            ))
        };
        // Only a transaction that ran whole put them back (a refused one was taken for done).
        match exec(&mut config, &put_back) {
            Ok(ran) => {
                if let Some(why) = ran.failure() {
                    return Err(failed(why));
                }
            }
            Err(e) => return Err(failed(err(e).to_string())),
        }
        for (p, q) in &dangling {
            report.kept_bound.push((schema::config_key(schema::WRED_PROFILE, p), schema::config_key(schema::QUEUE, q)));
            report.profiles_removed -= 1;
        }
        back = read_snapshot(&mut config).map_err(err)?;
    }
    let scope = Scope::of(&rec, &now);
    for (name, fields) in rec.wred_profile.iter().filter(|(n, _)| scope.profiles.contains(n.as_str())) {
        // As a set of fields: Redis keeps a hash's order only while it is small (no value
        // over 64 bytes), and one written in the recorded order may read back in another.
        if !back.profiles.get(name).is_some_and(|b| same_fields(b, fields)) {
            return Err(ActuatorError::Failed(format!(
                "WRED_PROFILE|{name} differs from the recording after the restore (changed meanwhile?)"
            )));
        }
    }
    for (name, fields) in rec.queue.iter().filter(|(n, _)| scope.queues.contains(n.as_str())) {
        let binding = |f: &Fields| schema::field(f, schema::WRED_PROFILE_FIELD).map(str::to_string);
        if back.queues.get(name).is_some_and(|b| binding(b) != binding(fields)) {
            return Err(ActuatorError::Failed(format!(
                "QUEUE|{name}'s binding differs from the recording after the restore (changed meanwhile?)"
            )));
        }
    }
    let _: () = redis::cmd("DEL").arg(schema::RECORDING_KEY).query(&mut state).map_err(|e| {
        ActuatorError::Failed(format!("restored, but deleting {} from STATE_DB failed: {e}", schema::RECORDING_KEY))
    })?;
    // Retire the file the user named, and the actuator's copy only if it holds this very
    // recording: a path read from a recording is not trusted to name a file of ours.
    let copy = rec.file.as_deref().filter(|f| Some(*f) != from && Recording::read_file(f).is_ok_and(|r| r.is_of(&rec)));
    for file in [copy, from].into_iter().flatten() {
        if file.exists() {
            if let Err(e) = std::fs::rename(file, beside(file, "restored")) {
                report.not_retired.push((file.to_path_buf(), e.to_string()));
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Fields {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_restore_plan_gives_back_the_recorded_tables() {
        let mut orig = Snapshot::default();
        orig.profiles.insert(
            "AZURE_LOSSLESS".into(),
            f(&[("ecn", "ecn_all"), ("green_max_threshold", "2097152"), ("green_min_threshold", "1048576")]),
        );
        orig.queues.insert("Ethernet0|3".into(), f(&[("scheduler", "s1"), ("wred_profile", "AZURE_LOSSLESS")]));
        let rec = Recording::of(&orig, "sw", 4, None);
        let mut now = orig.clone();
        now.profiles.insert(
            "AZURE_LOSSLESS".into(),
            f(&[("ecn", "ecn_all"), ("green_max_threshold", "400000"), ("green_min_threshold", "100000")]),
        );
        now.profiles.insert("ECN_TUNER_Ethernet0_3".into(), f(&[("ecn", "ecn_all")]));
        now.profiles.insert("OPERATOR_NEW".into(), f(&[("ecn", "ecn_all")]));
        now.queues.insert("Ethernet0|3".into(), f(&[("scheduler", "s1"), ("wred_profile", "ECN_TUNER_Ethernet0_3")]));
        let (ops, report) = restore_plan(&rec, &now);
        assert_eq!((report.profiles_restored, report.queues_restored, report.profiles_removed), (1, 1, 1));
        assert_eq!(report.left_alone, ["WRED_PROFILE|OPERATOR_NEW"]);
        let mut back = super::super::config::after(&now, &ops);
        back.profiles.remove("OPERATOR_NEW");
        assert_eq!(back, orig);
        // Raising thresholds back: max before min.
        let pos = |field: &str| ops.iter().position(|o| matches!(o, Op::Set(_, f, _) if f == field)).unwrap();
        assert!(pos("green_max_threshold") < pos("green_min_threshold"));
    }

    #[test]
    fn a_profile_of_ours_that_an_unrecorded_queue_is_bound_to_is_kept() {
        let mut orig = Snapshot::default();
        orig.profiles.insert("AZURE_LOSSLESS".into(), f(&[("ecn", "ecn_all")]));
        orig.queues.insert("Ethernet0|3".into(), f(&[("wred_profile", "AZURE_LOSSLESS")]));
        let rec = Recording::of(&orig, "sw", 4, None);
        let mut now = orig.clone();
        for q in ["Ethernet0_3", "Ethernet4_3"] {
            now.profiles.insert(format!("ECN_TUNER_{q}"), f(&[("ecn", "ecn_all")]));
        }
        now.queues.insert("Ethernet0|3".into(), f(&[("wred_profile", "ECN_TUNER_Ethernet0_3")]));
        now.queues.insert("Ethernet0|5".into(), f(&[("wred_profile", "ECN_TUNER_Ethernet0_3")]));
        let (ops, report) = restore_plan(&rec, &now);
        assert_eq!(report.kept_bound, [("WRED_PROFILE|ECN_TUNER_Ethernet0_3".into(), "QUEUE|Ethernet0|5".into())]);
        assert_eq!(report.profiles_removed, 1);
        assert!(ops.contains(&Op::Del("WRED_PROFILE|ECN_TUNER_Ethernet4_3".into())));
        let back = super::super::config::after(&now, &ops);
        assert!(back.profiles.contains_key("ECN_TUNER_Ethernet0_3"), "{ops:?}");
        assert_eq!(back.queues["Ethernet0|3"], orig.queues["Ethernet0|3"]);
    }

    /// With the controlled queues recorded, a restore puts back their bindings and the
    /// profile only they used, and nothing else: an operator's scheduler on a controlled
    /// queue, a queue ecn-tuner did not control bound elsewhere, and a profile no controlled
    /// queue used, edited since, are listed and left as they are.
    #[test]
    fn a_restore_puts_back_only_what_ecn_tuner_writes() {
        let mut orig = Snapshot::default();
        orig.profiles.insert("AZURE_LOSSLESS".into(), f(&[("green_min_threshold", "1048576")]));
        orig.profiles.insert("AZURE_LOSSY".into(), f(&[("green_min_threshold", "10")]));
        orig.queues.insert("Ethernet0|0".into(), f(&[("scheduler", "s0")]));
        orig.queues.insert("Ethernet0|3".into(), f(&[("scheduler", "s1"), ("wred_profile", "AZURE_LOSSLESS")]));
        let queue = |name: &str| {
            let (port, q) = name.split_once('|').unwrap();
            QueueRef { port: port.into(), queue: q.parse().unwrap() }
        };
        let rec = Recording::of(&orig, "sw", 4, None).controlling(&[queue("Ethernet0|3")]);
        let mut now = orig.clone();
        now.profiles.insert("AZURE_LOSSLESS".into(), f(&[("green_min_threshold", "100000")]));
        now.profiles.insert("AZURE_LOSSY".into(), f(&[("green_min_threshold", "20")]));
        now.profiles.insert("ECN_TUNER_Ethernet0_3".into(), f(&[("green_min_threshold", "300000")]));
        now.queues.insert("Ethernet0|0".into(), f(&[("scheduler", "s9"), ("wred_profile", "AZURE_LOSSLESS")]));
        now.queues.insert("Ethernet0|3".into(), f(&[("scheduler", "s7"), ("wred_profile", "ECN_TUNER_Ethernet0_3")]));
        let (ops, report) = restore_plan(&rec, &now);
        let back = super::super::config::after(&now, &ops);
        assert_eq!(back.profiles["AZURE_LOSSLESS"], orig.profiles["AZURE_LOSSLESS"]);
        assert!(!back.profiles.contains_key("ECN_TUNER_Ethernet0_3"));
        assert_eq!(back.queues["Ethernet0|3"], f(&[("scheduler", "s7"), ("wred_profile", "AZURE_LOSSLESS")]));
        assert_eq!(back.queues["Ethernet0|0"], now.queues["Ethernet0|0"]);
        assert_eq!(back.profiles["AZURE_LOSSY"], now.profiles["AZURE_LOSSY"]);
        assert_eq!(report.changed_elsewhere, ["WRED_PROFILE|AZURE_LOSSY", "QUEUE|Ethernet0|0", "QUEUE|Ethernet0|3"]);
        // A recording from before the controlled queues were kept puts back every recorded
        // queue's binding (Ethernet0|0 had none), still nothing else.
        let (ops, _) = restore_plan(&Recording::of(&orig, "sw", 4, None), &now);
        let back = super::super::config::after(&now, &ops);
        assert_eq!(back.queues["Ethernet0|0"], f(&[("scheduler", "s9")]));
        assert_eq!(back.queues["Ethernet0|3"], f(&[("scheduler", "s7"), ("wred_profile", "AZURE_LOSSLESS")]));
        assert_eq!(back.profiles["AZURE_LOSSY"], now.profiles["AZURE_LOSSY"]);
    }

    /// A recording that names its controlled queues has a format of its own, so that a version
    /// that knows only the first refuses it (it read it, without the list); either format is
    /// read, and a copy is one whatever was added to it since.
    #[test]
    fn a_recording_with_its_controlled_queues_has_a_format_of_its_own() {
        let mut snap = Snapshot::default();
        snap.profiles.insert("P".into(), f(&[("green_min_threshold", "1")]));
        snap.queues.insert("Ethernet0|3".into(), f(&[("wred_profile", "P")]));
        let q = QueueRef { port: "Ethernet0".into(), queue: 3 };
        let plain = Recording::of(&snap, "sw", 4, None);
        let named = plain.clone().controlling(&[q]);
        assert_eq!((plain.format.as_str(), named.format.as_str()), (FORMAT, FORMAT_CONTROLLED));
        for r in [&plain, &named] {
            assert_eq!(&Recording::parse(&serde_json::to_string(r).unwrap(), "r").unwrap(), r);
        }
        let mut odd = named.clone();
        odd.format = FORMAT.into();
        assert!(Recording::parse(&serde_json::to_string(&odd).unwrap(), "r").unwrap_err().contains("with a list"));
        assert!(named.is_of(&plain) && !named.is_of(&Recording { recorded_unix_ms: 1, ..plain.clone() }));
    }

    /// A file must hold what a switch could: each of these wrote CONFIG_DB and then failed the
    /// restore's check, or left a queue on a profile of ours and retired the recording.
    #[test]
    fn a_recording_a_switch_could_not_hold_is_refused() {
        let mut snap = Snapshot::default();
        snap.profiles.insert("P".into(), f(&[("green_min_threshold", "1"), ("ecn", "ecn_all")]));
        snap.queues.insert("Ethernet0|3".into(), f(&[("wred_profile", "P")]));
        let good = Recording::of(&snap, "sw", 4, None);
        assert_eq!(good.check_contents(), Ok(()));
        let refused = |edit: &dyn Fn(&mut Recording)| {
            let mut r = good.clone();
            edit(&mut r);
            r.check_contents().unwrap_err()
        };
        let empty_profile = refused(&|r| r.wred_profile.get_mut("P").unwrap().clear());
        assert!(empty_profile.contains("WRED_PROFILE|P: no fields"), "{empty_profile}");
        let empty_queue = refused(&|r| r.queue.get_mut("Ethernet0|3").unwrap().clear());
        assert!(empty_queue.contains("QUEUE|Ethernet0|3: no fields"), "{empty_queue}");
        let twice = refused(&|r| r.wred_profile.get_mut("P").unwrap().push(("ecn".into(), "ecn_all".into())));
        assert!(twice.contains("field ecn given twice"), "{twice}");
        let ours = refused(&|r| {
            let p = r.wred_profile.remove("P").unwrap();
            r.wred_profile.insert("ECN_TUNER_Ethernet0_3".into(), p);
            r.queue.insert("Ethernet0|3".into(), f(&[("wred_profile", "ECN_TUNER_Ethernet0_3")]));
        });
        assert!(ours.contains("a profile of ecn-tuner's"), "{ours}");
    }

    /// A profile a restored queue was bound to, shared with a queue outside the restore, is
    /// left as it is; but where it is gone (its other queue moved, then it was deleted), it
    /// comes back with the binding, which would otherwise name nothing.
    #[test]
    fn a_restored_binding_never_names_a_profile_that_is_gone() {
        let lossless = f(&[("green_min_threshold", "100")]);
        let mut orig = Snapshot::default();
        orig.profiles.insert("AZURE_LOSSLESS".into(), lossless.clone());
        orig.queues.insert("Ethernet0|3".into(), f(&[("wred_profile", "AZURE_LOSSLESS")]));
        orig.queues.insert("Ethernet4|3".into(), f(&[("wred_profile", "AZURE_LOSSLESS")]));
        let controlled = QueueRef { port: "Ethernet0".into(), queue: 3 };
        let rec = Recording::of(&orig, "sw", 4, None).controlling(&[controlled]);
        let mut now = Snapshot::default();
        now.profiles.insert("OTHER".into(), lossless.clone());
        now.profiles.insert("ECN_TUNER_Ethernet0_3".into(), f(&[("green_min_threshold", "7")]));
        now.queues.insert("Ethernet0|3".into(), f(&[("wred_profile", "ECN_TUNER_Ethernet0_3")]));
        now.queues.insert("Ethernet4|3".into(), f(&[("wred_profile", "OTHER")]));
        let (ops, report) = restore_plan(&rec, &now);
        let back = super::super::config::after(&now, &ops);
        assert_eq!(back.queues["Ethernet0|3"], f(&[("wred_profile", "AZURE_LOSSLESS")]));
        assert_eq!(back.profiles.get("AZURE_LOSSLESS"), Some(&lossless));
        assert_eq!(back.queues["Ethernet4|3"], now.queues["Ethernet4|3"]);
        assert!(!back.profiles.contains_key("ECN_TUNER_Ethernet0_3"));
        assert_eq!(report.profiles_restored, 1);
        // Still there, it is left as it is.
        now.profiles.insert("AZURE_LOSSLESS".into(), f(&[("green_min_threshold", "200")]));
        let (ops, _) = restore_plan(&rec, &now);
        let back = super::super::config::after(&now, &ops);
        assert_eq!(back.profiles["AZURE_LOSSLESS"], now.profiles["AZURE_LOSSLESS"]);
    }

    #[test]
    fn fields_compare_in_any_order() {
        assert!(same_fields(&f(&[("a", "1"), ("b", "2")]), &f(&[("b", "2"), ("a", "1")])));
        assert!(!same_fields(&f(&[("a", "1"), ("b", "2")]), &f(&[("a", "1"), ("b", "3")])));
        assert!(!same_fields(&f(&[("a", "1")]), &f(&[("a", "1"), ("a", "1")])));
    }

    #[test]
    fn a_reordered_hash_is_rewritten_whole() {
        let rec = f(&[("a", "1"), ("b", "2")]);
        let ops = restore_ops("K".into(), Some(&f(&[("b", "2")])), &rec);
        assert_eq!(ops, vec![Op::Del("K".into()), Op::Create("K".into(), rec)]);
    }
}
