//! The actuator journal: an append-only record of every change, revert and refusal
//! (PRODUCT.md "JSON outputs").
//!
//! One JSON object per line, written with a single `write` on a file opened for appending and
//! synced to disk, so lines from one actuator never interleave and a crash loses at most the
//! line being written. An `apply` line is written before the device is touched; if the device
//! then fails, a `reject` line follows with the unchanged generation, and the next change
//! takes the failed one's number. Fields:
//! - `ts`: RFC 3339 UTC time with milliseconds, e.g. `2025-01-31T12:00:00.123Z`;
//! - `ts_unix_ms`: the same instant as Unix milliseconds (easier to compare in scripts);
//! - `event`: `apply`, `confirm`, `revert` (a confirm deadline passed, or the actuator stopped
//!   with a change unconfirmed), `rollback` (one was requested), `reject`, or `start` (an
//!   actuator whose device starts afresh, the sim or dry-run backend, started on a journal
//!   with a past: the settings it starts with);
//! - `generation`: the generation the event produced (for `confirm` and `reject`, the current
//!   one, which may stay unconfirmed above a confirmed one);
//! - `confirmed_generation`: the last confirmed generation after the event;
//! - `queues`: the settings involved, each `{switch, port, queue, kmin_bytes, kmax_bytes,
//!   pmax}`: for `apply` the requested changes, for `reject` the first 64 of them with their
//!   names quoted (escaped, cut at 64 characters); for `confirm` the queues that
//!   differ from the previously confirmed generation; for `revert` and `rollback` the queues
//!   that changed back, with the settings they returned to;
//! - `detail`: the reason given, the error text, or what happened;
//! - `controller`: the writer's controller id, when known;
//! - `confirm_deadline_unix_ms`: for an unconfirmed `apply`, its own deadline (the stack it
//!   joins reverts at the earliest deadline among its generations, which may come sooner);
//! - `in_doubt_generation`: on every line while a failed device write may still land (the
//!   device did not answer, and the write could not be fenced off): the generation of that
//!   write. A `revert` line without it follows once the backend has put the settings of the
//!   current generation back. A journal whose last line carries it, like one that ends on an
//!   unconfirmed apply, stops a restarted actuator for a device that keeps its settings.

use super::backend::{BackendCaps, QueueKey};
use ecn_env::EcnSetting;
use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The largest generation a journal may hold: 2^48, far from where counting on overflows.
pub const MAX_GENERATION: u64 = 1 << 48;

/// The kind of a journal line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// Settings changed by an Apply.
    Apply,
    /// A generation was confirmed.
    Confirm,
    /// An unconfirmed generation reverted by itself.
    Revert,
    /// A rollback was requested and done.
    Rollback,
    /// A change was refused; nothing changed.
    Reject,
    /// An actuator whose device starts afresh (a simulated fabric, dry-run settings) started
    /// on a journal with a past: the settings it starts with, whatever the journal ended on.
    Start,
}

/// One queue's setting in a journal line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueEntry {
    /// Switch name.
    pub switch: String,
    /// Port name.
    pub port: String,
    /// Priority.
    pub queue: u32,
    /// Kmin, bytes.
    pub kmin_bytes: u64,
    /// Kmax, bytes.
    pub kmax_bytes: u64,
    /// Pmax (`null` if the request carried a non-finite number).
    pub pmax: f64,
}

impl QueueEntry {
    /// Entry for a queue and a setting.
    pub fn new(key: &QueueKey, s: &EcnSetting) -> QueueEntry {
        QueueEntry {
            switch: key.switch.clone(),
            port: key.port.clone(),
            queue: key.queue,
            kmin_bytes: s.kmin_bytes,
            kmax_bytes: s.kmax_bytes,
            pmax: s.pmax,
        }
    }

    /// Entries for (queue index, setting) pairs of a backend.
    pub fn list(caps: &BackendCaps, changes: &[(usize, EcnSetting)]) -> Vec<QueueEntry> {
        changes.iter().map(|(q, s)| QueueEntry::new(&caps.queues[*q].key, s)).collect()
    }
}

/// The longest journal line the log repeats whole (about 100 queues).
const LOGGED_LINE_MAX: usize = 16 * 1024;

/// One journal line.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// RFC 3339 UTC, milliseconds.
    pub ts: String,
    /// Unix milliseconds.
    pub ts_unix_ms: u64,
    /// What happened.
    pub event: EventKind,
    /// Generation produced (or current, for a confirm or a reject).
    pub generation: u64,
    /// Last confirmed generation after the event.
    pub confirmed_generation: u64,
    /// Settings involved.
    pub queues: Vec<QueueEntry>,
    /// Reason, error or explanation.
    pub detail: String,
    /// Writer's controller id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    /// Revert deadline of an unconfirmed apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirm_deadline_unix_ms: Option<u64>,
}

impl Event {
    /// An event stamped now.
    pub fn now(event: EventKind, generation: u64, confirmed_generation: u64, queues: Vec<QueueEntry>) -> Event {
        let t = SystemTime::now();
        Event {
            ts: humantime::format_rfc3339_millis(t).to_string(),
            ts_unix_ms: unix_ms(t),
            event,
            generation,
            confirmed_generation,
            queues,
            detail: String::new(),
            controller: None,
            confirm_deadline_unix_ms: None,
        }
    }

    /// Set the detail text.
    pub fn detail(mut self, detail: impl Into<String>) -> Event {
        self.detail = detail.into();
        self
    }

    /// Set the controller id.
    pub fn controller(mut self, id: Option<&str>) -> Event {
        self.controller = id.map(str::to_string);
        self
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Where journal lines go: a file, or nowhere (events are logged either way).
#[derive(Debug, Default)]
pub struct Journal {
    file: Option<(File, PathBuf)>,
    /// What the file already held when opened.
    found: Found,
    /// A write failed, and may have left part of its line (a full disk keeps a short write):
    /// the next line starts on a new one.
    torn: bool,
    /// The generation whose failed device write may still land, stamped on every line.
    in_doubt: Option<u64>,
    /// Lines of what happened on the device whose write failed (a revert on a full disk),
    /// with their generations: written before any later line, so the file never skips them.
    owed: Vec<(u64, String)>,
}

/// What an existing journal says, read once when it is opened.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Found {
    /// The highest generation (0 for a new journal).
    last_generation: u64,
    /// The last state-changing event's (generation, confirmed generation).
    last_state: Option<(u64, u64)>,
    /// The last line's `in_doubt_generation`.
    in_doubt: Option<u64>,
    /// Every switch its lines name.
    switches: std::collections::BTreeSet<String>,
    /// Lines torn by a crash or a full disk, skipped.
    torn_lines: usize,
}

/// A file whose lines are none of them a journal event, however many: not a journal.
fn not_a_journal(lines: usize, first: &[u8]) -> std::io::Error {
    let what = if lines == 1 { "its one line is not" } else { "none of its lines is" };
    let start = String::from_utf8_lossy(&first[..first.len().min(60)]).into_owned();
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{what} a journal event (it begins {start:?}): another file given by mistake (a decision log?); \
             nothing was written to it"
        ),
    )
}

/// How every journal line begins (the `ts` field first, as [`Journal::write`] serializes it).
const LINE_START: &[u8] = b"{\"ts\":\"";

/// Whether `line`, no event, may be one torn by a crash: cut anywhere in a journal line
/// (a prefix of one), or the zeros a file system can leave where a write was lost.
fn torn(line: &[u8]) -> bool {
    line.starts_with(LINE_START) || LINE_START.starts_with(line) || line.iter().all(|&b| b == 0)
}

/// Whether `line` is a whole JSON object in a journal line's form (its `ts` first, or an
/// `event`): what a crash cannot leave, unlike a cut line.
fn whole_event(line: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(o)) => line.starts_with(LINE_START) || o.contains_key("event"),
        _ => false,
    }
}

/// The generation a torn line names, where its whole number survived the cut: a restart
/// numbers after it too, so that one number never names two changes (the torn line's and
/// the next).
fn torn_generation(line: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"generation\":";
    let at = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    // Cut inside the number, it may be a prefix of a larger one: a following byte says it is whole.
    line.get(at + digits).filter(|&&b| b == b',' || b == b'}')?;
    std::str::from_utf8(&line[at..at + digits]).ok()?.parse().ok()
}

impl Journal {
    /// Every switch the journal's changes name, refusals left out (none for a new journal).
    pub fn switches(&self) -> &std::collections::BTreeSet<String> {
        &self.found.switches
    }

    /// No file: events only reach the log.
    pub fn none() -> Journal {
        Journal { file: None, found: Found::default(), torn: false, in_doubt: None, owed: Vec::new() }
    }

    /// The highest generation already in the file: a restarted actuator continues after it, so
    /// that one number never names two different changes in one journal.
    pub fn last_generation(&self) -> u64 {
        self.found.last_generation
    }

    /// The generation the file ended on unconfirmed when opened, with the last confirmed one:
    /// the actuator that wrote it stopped (killed, or the host went down) after an Apply and
    /// before its confirm or revert, so the device may still hold that change. `None` when it
    /// ended confirmed, or was empty or new.
    pub fn unconfirmed_at_end(&self) -> Option<(u64, u64)> {
        self.found.last_state.filter(|(g, c)| c < g)
    }

    /// The generation of a device write that failed without an answer, as the file's last line
    /// says when opened: the actuator that wrote it stopped before that write was settled, so
    /// the device may hold it.
    pub fn in_doubt_at_end(&self) -> Option<u64> {
        self.found.in_doubt
    }

    /// The generation whose failed device write may still land, if any ([`Journal::doubt`]).
    pub fn in_doubt(&self) -> Option<u64> {
        self.in_doubt
    }

    /// Stamp `generation` (a failed device write that may still land) on every line from the
    /// next one on, or stop stamping with `None`, until told otherwise.
    pub fn doubt(&mut self, generation: Option<u64>) {
        self.in_doubt = generation;
    }

    /// Open (create) `path` for appending. A file with lines but no journal event in them (a
    /// decision log, any other file: a path given by mistake) is refused, untouched, and so is
    /// a journal another process holds open this way: two actuators on one journal would
    /// number their changes over each other's, and on one switch both would write it.
    pub fn open(path: &Path) -> std::io::Result<Journal> {
        Self::open_locked(path, true)
    }

    /// A journal read back while its writer holds it (tests): [`Journal::open`] without the lock.
    #[cfg(test)]
    pub(crate) fn peek(path: &Path) -> std::io::Result<Journal> {
        Self::open_locked(path, false)
    }

    /// [`Journal::open`], holding the file's lock or not (not: a test's `peek`).
    fn open_locked(path: &Path, lock: bool) -> std::io::Result<Journal> {
        let mut f = crate::line_files::open_read_append(path)?;
        let found = scan(&mut f)?;
        // Held as long as the file is open, and let go by the kernel when the process ends,
        // however it ends.
        if lock {
            match f.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "another process holds this journal (an actuator already running on it?); one actuator \
                         per journal, and one journal per device",
                    ))
                }
                // A file system without locks (some network ones) is no reason to refuse.
                Err(std::fs::TryLockError::Error(e)) => {
                    tracing::warn!(journal = %path.display(), "cannot lock the journal ({e}); going on without")
                }
            }
        }
        // A crash mid-write can leave a partial last line; end it, so that the first event
        // of this run is a line of its own rather than glued to the fragment.
        crate::line_files::end_partial_line(&mut f)?;
        if found.torn_lines > 0 {
            tracing::warn!(
                journal = %path.display(),
                lines = found.torn_lines,
                last_generation = found.last_generation,
                "the journal has lines torn by a crash or a full disk; they are skipped, and generations are \
                 numbered after the highest any line names"
            );
        }
        Ok(Journal { file: Some((f, path.to_path_buf())), found, torn: false, in_doubt: None, owed: Vec::new() })
    }

    /// The generations of events that happened but whose lines could not be written yet
    /// ([`Journal::write_done`]).
    pub fn owed(&self) -> Vec<u64> {
        self.owed.iter().map(|(g, _)| *g).collect()
    }

    /// Append one event as one line and sync it to disk. Logs it too, so a journal-less
    /// actuator still leaves a trace. Lines owed from before ([`Journal::write_done`]) go first; if they cannot, neither
    /// does this one.
    pub fn write(&mut self, e: &Event) -> std::io::Result<()> {
        let line = self.line(e)?;
        self.append_owed()?;
        self.append(&line)
    }

    /// [`Journal::write`] for an event that has happened on the device whatever the file says
    /// (a revert): a line that cannot be written now is owed, and written before the next one.
    pub fn write_done(&mut self, e: &Event) -> std::io::Result<()> {
        let line = self.line(e)?;
        let written = self.append_owed().and_then(|()| self.append(&line));
        if written.is_err() && self.file.is_some() {
            self.owed.push((e.generation, line));
        }
        written
    }

    /// Send every later write to `/dev/full` (no space left), as a full disk would; `false`
    /// opens the file again for appending.
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn simulate_full_disk(&mut self, full: bool) {
        let Some((f, path)) = &mut self.file else { return };
        let target = if full { Path::new("/dev/full") } else { path.as_path() };
        *f = std::fs::OpenOptions::new().append(true).open(target).expect("open for appending");
    }

    /// Write the lines owed, in order, keeping those that still fail.
    pub fn append_owed(&mut self) -> std::io::Result<()> {
        while let Some((_, line)) = self.owed.first() {
            let line = line.clone();
            self.append(&line)?;
            self.owed.remove(0);
        }
        Ok(())
    }

    /// `e` as its journal line, stamped, logged.
    fn line(&self, e: &Event) -> std::io::Result<String> {
        /// An event with the journal's own stamp.
        #[derive(Serialize)]
        struct Line<'a> {
            #[serde(flatten)]
            event: &'a Event,
            #[serde(skip_serializing_if = "Option::is_none")]
            in_doubt_generation: Option<u64>,
        }
        let stamped = Line { event: e, in_doubt_generation: self.in_doubt };
        let line = serde_json::to_string(&stamped).map_err(std::io::Error::other)?;
        // The log repeats the line, but not a line of thousands of queues (4 MB at 39 000): a
        // log pipeline splits or drops lines past some tens of KB. The journal keeps it whole.
        if line.len() <= LOGGED_LINE_MAX {
            tracing::info!(target: "journal", event = ?e.event, generation = e.generation, detail = %e.detail, "{line}");
        } else {
            tracing::info!(
                target: "journal",
                event = ?e.event,
                generation = e.generation,
                detail = %e.detail,
                queues = e.queues.len(),
                bytes = line.len(),
                "journal line of {} queues (whole in the journal only)",
                e.queues.len()
            );
        }
        Ok(line)
    }

    /// Append `line` and sync it.
    fn append(&mut self, line: &str) -> std::io::Result<()> {
        if let Some((f, path)) = &mut self.file {
            let mut line = format!("{line}\n");
            if self.torn {
                // Glued to a fragment, this line would not parse, and a restart would not see it.
                line.insert(0, '\n');
            }
            // One write call per line: with O_APPEND the line lands whole at the end. Synced
            // before returning, since the caller changes the device next and a crash must not
            // leave the device ahead of the file.
            let written = f.write_all(line.as_bytes()).and_then(|_| f.sync_data());
            self.torn = written.is_err();
            written.map_err(|err| std::io::Error::new(err.kind(), format!("journal {}: {err}", path.display())))?;
        }
        Ok(())
    }
}

/// The longest journal line read: an apply names every queue it changes (about 110 bytes
/// each), so this is some two million queues.
const MAX_LINE_BYTES: u64 = 256 << 20;

/// One pass over an existing journal, line by line. Lines that do not parse (a torn write,
/// cut inside a multi-byte character too) are skipped.
///
/// A generation above [`MAX_GENERATION`] is refused.
fn scan(f: &mut File) -> std::io::Result<Found> {
    use std::io::{BufReader, Seek, SeekFrom};
    /// The fields of a line that matter here.
    #[derive(serde::Deserialize)]
    struct Line {
        /// Required: a line without it is no event.
        event: String,
        generation: u64,
        confirmed_generation: u64,
        #[serde(default)]
        in_doubt_generation: Option<u64>,
        #[serde(default)]
        queues: Vec<Queue>,
    }
    /// The part of a line's queue that matters here.
    #[derive(serde::Deserialize)]
    struct Queue {
        switch: String,
    }
    f.seek(SeekFrom::Start(0))?;
    let mut found = Found::default();
    // Lines that are neither events nor torn ones, with the first: a file with some, and no
    // event, is another file. (A journal whose first writes were all torn by crashes has
    // nothing but torn lines.)
    let (mut events, mut others, mut first_other) = (0usize, 0usize, Vec::new());
    for (n, line) in crate::line_files::lines_at_most(BufReader::new(&mut *f), MAX_LINE_BYTES).enumerate() {
        let line = line?;
        let l = match serde_json::from_slice::<Line>(&line) {
            Ok(l) => l,
            // A whole event that lacks what every event carries (a field missing, null or of
            // another type) is no crash's fragment: skipped as torn, an unconfirmed apply
            // would pass for nothing and the actuator would start over the change it made.
            Err(why) if whole_event(&line) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "line {}: a whole journal line this actuator cannot read ({why}): a corrupt or edited \
                         journal, or one a newer version wrote; nothing was written to it",
                        n + 1
                    ),
                ));
            }
            Err(_) => {
                let blank = line.trim_ascii().is_empty();
                if !blank && torn(&line) {
                    found.torn_lines += 1;
                    if let Some(g) = torn_generation(&line).filter(|&g| g <= MAX_GENERATION) {
                        found.last_generation = found.last_generation.max(g);
                    }
                } else if !blank {
                    if others == 0 {
                        first_other = line;
                    }
                    others += 1;
                }
                continue;
            }
        };
        events += 1;
        if l.generation > MAX_GENERATION {
            // Every change takes a number and its revert another: near 2^64 the arithmetic
            // would overflow mid-change. No real journal gets here (2^48 changes at one a
            // millisecond take 9 000 years); such a line is corrupt or edited.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "line {}: generation {} is beyond the largest this actuator numbers ({MAX_GENERATION}): \
                     a corrupt or edited journal",
                    n + 1,
                    l.generation
                ),
            ));
        }
        found.last_generation = found.last_generation.max(l.generation);
        // Every line carries the state after it, a refusal's too: the one that follows an apply
        // line whose device write failed is what says the device kept the earlier generation.
        found.last_state = Some((l.generation, l.confirmed_generation));
        found.in_doubt = l.in_doubt_generation;
        // The device's switches, as its changes name them: a refused request names whatever
        // its sender wrote (one with no lease, naming another switch, made the next start
        // refuse the journal as another device's).
        if l.event != "reject" {
            for q in l.queues {
                if !found.switches.contains(&q.switch) {
                    found.switches.insert(q.switch);
                }
            }
        }
    }
    if events == 0 && others > 0 {
        return Err(not_a_journal(others, &first_other));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_contract_fields() {
        let dir = std::env::temp_dir().join(format!("ecn-journal-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let mut j = Journal::open(&dir).unwrap();
        let key = QueueKey { switch: "leaf0".into(), port: "eth1".into(), queue: 3 };
        let s = EcnSetting { kmin_bytes: 1, kmax_bytes: 2, pmax: f64::NAN };
        j.write(&Event::now(EventKind::Reject, 4, 3, vec![QueueEntry::new(&key, &s)]).detail("bad")).unwrap();
        j.write(&Event::now(EventKind::Apply, 5, 5, vec![]).controller(Some("c1"))).unwrap();
        let text = std::fs::read_to_string(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        for k in ["ts", "event", "generation", "queues", "detail"] {
            assert!(lines[0].get(k).is_some(), "{k}");
        }
        assert_eq!(lines[0]["event"], "reject");
        assert_eq!(lines[0]["queues"][0]["switch"], "leaf0");
        assert!(lines[0]["queues"][0]["pmax"].is_null());
        assert!(lines[0]["ts"].as_str().unwrap().ends_with('Z'));
        assert_eq!(lines[1]["controller"], "c1");
    }

    #[test]
    fn a_journal_ending_on_an_unconfirmed_apply_says_so() {
        let path = std::env::temp_dir().join(format!("ecn-journal-pending-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let reopened = || Journal::peek(&path).unwrap();
        assert_eq!((reopened().unconfirmed_at_end(), reopened().last_generation()), (None, 0), "a new journal");
        let mut j = Journal::open(&path).unwrap();
        let Err(e) = Journal::open(&path) else { panic!("a second writer must be refused") };
        assert!(e.to_string().contains("another process holds this journal"), "{e}");
        j.write(&Event::now(EventKind::Apply, 2, 2, vec![])).unwrap();
        assert_eq!(reopened().unconfirmed_at_end(), None);
        j.write(&Event::now(EventKind::Apply, 3, 2, vec![])).unwrap();
        j.write(&Event::now(EventKind::Reject, 3, 2, vec![])).unwrap();
        assert_eq!(reopened().unconfirmed_at_end(), Some((3, 2)));
        j.write(&Event::now(EventKind::Revert, 4, 4, vec![])).unwrap();
        assert_eq!(reopened().unconfirmed_at_end(), None);
        assert_eq!(reopened().last_generation(), 4, "a restart continues after 4");
        // A hand-edited generation that leaves too few numbers for the next changes (and
        // their reverts) is refused, not left to overflow mid-change.
        for g in [u64::MAX, u64::MAX - 2, MAX_GENERATION + 1] {
            std::fs::write(&path, format!("{{\"event\":\"apply\",\"generation\":{g},\"confirmed_generation\":1}}\n"))
                .unwrap();
            let Err(e) = Journal::open(&path) else { panic!("a journal at generation {g} must be refused") };
            assert!(e.to_string().contains(&format!("line 1: generation {g} is beyond")), "{e}");
        }
        std::fs::write(
            &path,
            format!("{{\"event\":\"apply\",\"generation\":{MAX_GENERATION},\"confirmed_generation\":1}}\n"),
        )
        .unwrap();
        assert_eq!(reopened().last_generation(), MAX_GENERATION);
        std::fs::remove_file(&path).unwrap();
    }

    /// A whole line without the fields every event carries is corrupt or from another version,
    /// not torn: skipping it would hide an unconfirmed apply.
    #[test]
    fn a_whole_line_that_is_no_event_is_refused_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let confirmed = r#"{"ts":"t","event":"confirm","generation":2,"confirmed_generation":2}"#;
        for (bad, why) in [
            (r#"{"ts":"t","event":"apply","generation":3}"#, "missing field `confirmed_generation`"),
            (r#"{"ts":"t","event":"apply","generation":3,"confirmed_generation":null}"#, "invalid type: null"),
            (r#"{"event":"apply","generation":"3","confirmed_generation":2}"#, "invalid type: string"),
        ] {
            let text = format!("{confirmed}\n{bad}\n");
            std::fs::write(&path, &text).unwrap();
            let Err(e) = Journal::open(&path) else { panic!("{bad} must be refused") };
            let e = e.to_string();
            assert!(e.starts_with("line 2: a whole journal line") && e.contains(why), "{e}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "untouched");
        }
        // The same line cut by a crash is still skipped.
        std::fs::write(&path, format!("{confirmed}\n{{\"ts\":\"t\",\"event\":\"apply\",\"generation\":3")).unwrap();
        assert_eq!(Journal::open(&path).unwrap().unconfirmed_at_end(), None);
    }

    /// A device write in doubt is stamped on every line until it is settled, and a journal
    /// whose last line carries the stamp says so when reopened.
    #[test]
    fn a_write_in_doubt_is_stamped_until_settled() {
        let path = std::env::temp_dir().join(format!("ecn-journal-doubt-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let reopened = || Journal::peek(&path).unwrap();
        let mut j = Journal::open(&path).unwrap();
        j.write(&Event::now(EventKind::Apply, 2, 1, vec![])).unwrap();
        j.doubt(Some(2));
        j.write(&Event::now(EventKind::Reject, 1, 1, vec![])).unwrap();
        assert_eq!((reopened().unconfirmed_at_end(), reopened().in_doubt_at_end()), (None, Some(2)));
        j.write(&Event::now(EventKind::Reject, 1, 1, vec![])).unwrap();
        assert_eq!(reopened().in_doubt_at_end(), Some(2), "every line while in doubt");
        j.doubt(None);
        j.write(&Event::now(EventKind::Revert, 1, 1, vec![])).unwrap();
        assert_eq!(reopened().in_doubt_at_end(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let stamps: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["in_doubt_generation"].clone())
            .collect();
        assert_eq!(stamps, [serde_json::Value::Null, 2.into(), 2.into(), serde_json::Value::Null], "{text}");
    }

    /// A torn line's generation, where it survived whole, is not numbered again.
    #[test]
    fn a_torn_line_s_generation_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let confirm = r#"{"ts":"t","event":"confirm","generation":2,"confirmed_generation":2}"#;
        for (torn, last) in [
            (r#"{"ts":"t","event":"apply","generation":3,"confirmed_gen"#, 3),
            (r#"{"ts":"t","event":"apply","generation":3"#, 2),
            (r#"{"ts":"t","event":"apply","generation":31,"#, 31),
            (r#"{"ts":"t","event":"apply","gen"#, 2),
        ] {
            std::fs::write(&path, format!("{confirm}\n{torn}")).unwrap();
            assert_eq!(Journal::open(&path).unwrap().last_generation(), last, "{torn}");
        }
    }

    #[test]
    fn a_torn_last_line_does_not_swallow_the_next_event() {
        let path = std::env::temp_dir().join(format!("ecn-journal-torn-{}", std::process::id()));
        let apply = r#"{"event":"apply","generation":2,"confirmed_generation":1}"#;
        std::fs::write(&path, format!("{apply}\n{{\"event\":\"con")).unwrap();
        Journal::open(&path).unwrap().write(&Event::now(EventKind::Confirm, 2, 2, vec![])).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["event"], "confirm", "{text}");
        assert_eq!(text.lines().count(), 3, "the fragment stays a line of its own: {text}");
    }

    /// A revert whose line cannot be written (a full disk) is owed: written before the next
    /// line, and until it is, no other line goes in (an apply after it would hide it).
    // A full disk is /dev/full, which only Linux has.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_line_of_what_happened_is_owed_until_it_can_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut j = Journal::open(&path).unwrap();
        j.write(&Event::now(EventKind::Apply, 2, 1, vec![])).unwrap();
        j.simulate_full_disk(true);
        assert!(j.write_done(&Event::now(EventKind::Revert, 3, 3, vec![])).is_err());
        assert!(j.write(&Event::now(EventKind::Apply, 4, 3, vec![])).is_err(), "no line past an owed one");
        assert_eq!(j.owed(), vec![3]);
        j.simulate_full_disk(false);
        j.write(&Event::now(EventKind::Apply, 4, 3, vec![])).unwrap();
        assert!(j.owed().is_empty());
        let text = std::fs::read_to_string(&path).unwrap();
        // A failed write may leave part of its line: the next starts on a new one (blank here).
        let events: Vec<(String, u64)> = text
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| (v["event"].as_str().unwrap().to_string(), v["generation"].as_u64().unwrap()))
            .collect();
        let want = [("apply", 2), ("revert", 3), ("apply", 4)].map(|(e, g)| (e.to_string(), g));
        assert_eq!(events, want, "{text}");
    }

    /// Another file given as the journal (a decision log, a text file) is refused and left as
    /// it was; a journal whose one line is a first event torn by a crash is a journal.
    #[test]
    fn a_file_that_is_no_journal_is_refused_untouched() {
        let path = std::env::temp_dir().join(format!("ecn-journal-foreign-{}", std::process::id()));
        let decisions = "{\"ts_ms\":1,\"queue\":\"leaf0/eth1/3\",\"mode\":\"shadow\"}\n{\"ts_ms\":2,\"queue\":\"x";
        let one_decision = "{\"ts_ms\":1,\"queue\":\"leaf0/eth1/3\",\"mode\":\"shadow\"}\n";
        for (text, why) in [
            (decisions, "none of its lines is a journal event"),
            (one_decision, "its one line is not a journal event"),
            ("# services\nssh 22/tcp\n", "none of its lines is a journal event"),
            ("one line\n", "its one line is not a journal event"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Journal::open(&path).expect_err("refused").to_string();
            assert!(e.contains(why) && e.contains("by mistake"), "{e}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "untouched");
        }
        // What crashes leave of a journal's first writes: a cut line (twice, for two crashes),
        // a lone brace, the zeros of a write lost with the power. Blank lines are nothing.
        let torn = [
            "{\"ts\":\"2026-12-05T10:00:00Z\",\"event\":\"app",
            "{\"ts\":\"2026\n{\"ts\":\"2026-12",
            "{",
            "\0\0\0\0",
            "\n\n",
        ];
        for text in torn {
            std::fs::write(&path, text).unwrap();
            let j = Journal::open(&path).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(j.last_generation(), 0);
        }
        std::fs::remove_file(&path).unwrap();
    }

    /// A line cut inside a multi-byte character is skipped like any torn line, not a reason to
    /// refuse the whole journal (and with it every restart).
    #[test]
    fn a_line_torn_inside_a_character_is_skipped() {
        let path = std::env::temp_dir().join(format!("ecn-journal-utf8-{}", std::process::id()));
        let apply = r#"{"event":"apply","generation":3,"confirmed_generation":2}"#;
        let mut bytes = format!("{apply}\n{{\"event\":\"confirm\",\"detail\":\"caf").into_bytes();
        bytes.push(0xC3); // the first byte of "é"
        bytes.push(b'\n');
        std::fs::write(&path, bytes).unwrap();
        let j = Journal::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(j.unconfirmed_at_end(), Some((3, 2)));
    }

    /// After a write that failed (here: on a handle that cannot write), the next line starts on
    /// a line of its own, so that a fragment the failure left cannot swallow it.
    #[test]
    fn a_line_after_a_failed_write_starts_afresh() {
        let path = std::env::temp_dir().join(format!("ecn-journal-failed-{}", std::process::id()));
        std::fs::write(&path, "{\"event\":\"apply\"}\n{\"event\":\"con").unwrap();
        let mut j = Journal::none();
        j.file = Some((File::open(&path).unwrap(), path.clone()));
        assert!(j.write(&Event::now(EventKind::Apply, 2, 1, vec![])).is_err());
        j.file = Some((std::fs::OpenOptions::new().append(true).open(&path).unwrap(), path.clone()));
        j.write(&Event::now(EventKind::Apply, 3, 1, vec![])).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["generation"], 3, "{text}");
    }
}
