//! The controller's decision log: JSON lines, one per decision (PRODUCT.md "JSON outputs").

use serde::Serialize;
use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One decision about one queue.
#[derive(Debug, Clone, Serialize)]
pub struct Decision<'a> {
    /// Unix milliseconds.
    pub ts: u64,
    /// The actuator the queue belongs to.
    pub target: &'a str,
    /// `shadow` or `enforce`.
    pub mode: &'a str,
    /// `switch/port/queue`.
    pub queue: String,
    /// What the controller saw.
    pub observation: serde_json::Value,
    /// What the policy proposed (`null` when it produced nothing usable).
    pub proposed: Option<serde_json::Value>,
    /// What the guardrails allow.
    pub after_guardrails: serde_json::Value,
    /// Whether it was written to the actuator.
    pub applied: bool,
    /// Why: policy, guardrail interventions, health verdicts.
    pub reason: String,
}

/// Append-only JSON-lines writer, shared by every actuator's control loop. Lines are written
/// whole, in order, by a thread of their own: a reader that stays but stops reading (`| less`
/// left unread, a hung log shipper behind a FIFO) held the control loop in the middle of a
/// round, its kill switch and SIGTERM with it, once the pipe was full. Now lines wait in memory
/// meanwhile, and a write that waits [`STALL_LIMIT`] (or [`MAX_WAITING_BYTES`] piled up)
/// fails the next one, as a log that cannot be written does: the controller stops
/// cleanly. [`DecisionLog::close`] writes what waits before the process ends.
///
/// The log grows by a line per queue per round (about 550 bytes), so it is meant to be rotated:
/// on SIGHUP ([`DecisionLog::reopen_on_hangup`]) it opens its path afresh, which is what
/// logrotate's `postrotate` step expects after it renamed the file.
#[derive(Clone)]
pub struct DecisionLog {
    out: Option<Arc<Shared>>,
}

/// How long a write may wait before the next one fails: a reader that has stopped (or one so
/// slow that a pipe's page of lines, which is all a pipe frees at a time, takes it longer).
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// How many bytes of lines may wait for a slow reader before a write fails: about 450 000
/// decisions, four rounds of the largest fabric the controller is measured on (100 000
/// queues).
pub const MAX_WAITING_BYTES: usize = 256 << 20;

/// At most this many bytes of waiting lines go to a regular file in one write.
const FILE_BATCH_BYTES: usize = 1 << 20;

/// To a pipe, FIFO or socket, at most this many: a write of up to `PIPE_BUF` bytes is never
/// interleaved with another process's (two controllers logging into one FIFO).
const PIPE_BATCH_BYTES: usize = libc::PIPE_BUF;

/// What the control loops and the writer thread share.
struct Shared {
    path: PathBuf,
    queue: Mutex<Queue>,
    /// Signalled when a line is queued, written, or the log closes.
    changed: Condvar,
    /// A file opened afresh (SIGHUP) that the writer thread takes before its next write: a
    /// reopen never waits for a write a stalled reader holds up.
    reopened: Mutex<Option<Sink>>,
}

/// A file lines go to, and how many bytes of lines one write may hold.
struct Sink {
    file: File,
    batch_bytes: usize,
}

impl Sink {
    fn open(path: &Path) -> std::io::Result<Sink> {
        let file = open_append(path)?;
        let batch_bytes = if file.metadata()?.is_file() { FILE_BATCH_BYTES } else { PIPE_BATCH_BYTES };
        Ok(Sink { file, batch_bytes })
    }
}

/// Lines waiting for the writer thread, and how it fares.
#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Since when the batch being written has been written (`None` between batches).
    writing_since: Option<Instant>,
    /// How many lines that batch holds.
    writing: usize,
    /// Lines written so far.
    written: u64,
    /// Why the writer thread stopped: every later write fails with it.
    failed: Option<(std::io::ErrorKind, String)>,
    closed: bool,
}

impl Queue {
    fn error(&self) -> Option<std::io::Error> {
        if let Some((kind, why)) = &self.failed {
            return Some(std::io::Error::new(*kind, why.clone()));
        }
        let stalled = self.writing_since.map(|t| t.elapsed()).filter(|d| *d >= STALL_LIMIT);
        if let Some(d) = stalled {
            return Some(std::io::Error::other(format!(
                "a write has waited {} s (its reader has stopped reading?); {} decisions wait",
                d.as_secs(),
                self.lines.len() + self.writing
            )));
        }
        (self.bytes > MAX_WAITING_BYTES).then(|| {
            std::io::Error::other(format!(
                "{} MiB of decisions wait for a reader that does not keep up",
                self.bytes >> 20
            ))
        })
    }
}

/// A log cut short by a full disk or a crash gets its partial last line ended: the next run's
/// first decision was glued to it, and neither line could be read.
fn open_append(path: &Path) -> std::io::Result<File> {
    // The process's own output is the user's to point where they like (`>> run.log` behind a
    // script's own lines): written as it is.
    if !crate::line_files::is_own_output(path) {
        refuse_other_files(path)?;
    }
    crate::line_files::open_append(path)
}

/// A file that is there whose first line is no decision (a journal, a token file, telemetry
/// given by mistake) is refused, untouched: decisions appended to it spoiled it (a token file
/// then stopped the actuator that read it). Blank lines are passed over, and a decision cut
/// short by a crash or a full disk (`{"ts":` and a number, where a journal's `ts` is text)
/// counts as one.
fn refuse_other_files(path: &Path) -> std::io::Result<()> {
    // Not opened unless a regular file: opening a pipe to read waits for a writer.
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    if !meta.is_file() || meta.len() == 0 {
        return Ok(());
    }
    let file = std::io::BufReader::new(File::open(path)?);
    let first = crate::line_files::lines_at_most(file, 1 << 20)
        .find(|l| l.as_ref().map_or(true, |l| !l.trim_ascii().is_empty()));
    let decision = |line: &[u8]| {
        let line = line.trim_ascii();
        let cut = line.strip_prefix(br#"{"ts":"#).is_some_and(|rest| rest.first().is_some_and(u8::is_ascii_digit));
        cut || serde_json::from_slice::<serde_json::Value>(line)
            .is_ok_and(|v| ["queue", "reason", "applied"].iter().all(|k| v.get(k).is_some()))
    };
    match first {
        None => Ok(()),
        Some(Ok(line)) if decision(&line) => Ok(()),
        Some(_) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a decision log (its first line is no decision): a path given by mistake? nothing was written to it",
        )),
    }
}

impl DecisionLog {
    /// Log to `path` (appending), or nowhere.
    pub fn open(path: Option<&Path>) -> std::io::Result<Self> {
        let Some(path) = path else { return Ok(DecisionLog { out: None }) };
        let shared = Arc::new(Shared {
            path: path.to_path_buf(),
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            reopened: Mutex::new(None),
        });
        let (writer, sink) = (shared.clone(), Sink::open(path)?);
        std::thread::Builder::new().name("decision-log".into()).spawn(move || writer.write_lines(sink))?;
        Ok(DecisionLog { out: Some(shared) })
    }

    /// Whether decisions go anywhere (callers skip building them otherwise).
    pub fn enabled(&self) -> bool {
        self.out.is_some()
    }

    /// Queue one decision to be written. Fails once the log has failed or stalled.
    pub fn write(&self, d: &Decision<'_>) -> std::io::Result<()> {
        if let Some(out) = &self.out {
            let mut line = serde_json::to_vec(d)?;
            line.push(b'\n');
            let mut q = out.lock_queue();
            if let Some(e) = q.error() {
                return Err(e);
            }
            q.bytes += line.len();
            q.lines.push_back(line);
            out.changed.notify_all();
        }
        Ok(())
    }

    /// Write what waits, for as long as lines are taken (up to `patience` without one), and
    /// stop the writer thread. An error says what was lost.
    pub fn close(&self, patience: Duration) -> std::io::Result<()> {
        let Some(out) = &self.out else { return Ok(()) };
        let mut q = out.lock_queue();
        q.closed = true;
        out.changed.notify_all();
        loop {
            if let Some((kind, why)) = &q.failed {
                return Err(std::io::Error::new(*kind, why.clone()));
            }
            let left = q.lines.len() + q.writing;
            if left == 0 {
                return Ok(());
            }
            let written = q.written;
            let (next, waited) = out.changed.wait_timeout(q, patience).unwrap_or_else(|e| e.into_inner());
            q = next;
            if waited.timed_out() && q.written == written {
                return Err(std::io::Error::other(format!(
                    "{left} decisions not written: the log took none for {} s",
                    patience.as_secs_f64()
                )));
            }
        }
    }

    /// Open the path afresh (after a rotation renamed the file): the lines after the write
    /// under way go to a new file there. When it cannot be opened, lines keep going to the old
    /// file, and the error says why.
    pub fn reopen(&self) -> std::io::Result<()> {
        if let Some(out) = &self.out {
            let fresh = Sink::open(&out.path)?;
            *out.reopened.lock().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
            out.changed.notify_all();
        }
        Ok(())
    }

    /// Reopen the log at every SIGHUP from now on. Without a log, SIGHUP is only logged: it
    /// no longer ends the controller the way the default action would, mid-change and without
    /// rolling back. Must be called inside the runtime.
    pub fn reopen_on_hangup(&self) -> std::io::Result<()> {
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let log = self.clone();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let Some(out) = &log.out else {
                    tracing::info!("SIGHUP: no decision log to reopen");
                    continue;
                };
                let path = out.path.clone();
                match log.reopen() {
                    Ok(()) => tracing::info!(path = %path.display(), "SIGHUP: decision log reopened"),
                    Err(e) => tracing::warn!(
                        path = %path.display(),
                        "SIGHUP: cannot reopen the decision log ({e}); lines keep going to the old file"
                    ),
                }
            }
        });
        Ok(())
    }
}

impl Shared {
    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer thread: every queued line, in order, to `sink` (or the file a SIGHUP opened
    /// since), until the log is closed and empty or a write fails.
    fn write_lines(&self, mut sink: Sink) {
        loop {
            {
                let mut q = self.lock_queue();
                while q.lines.is_empty() {
                    if q.closed {
                        return;
                    }
                    q = self.changed.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            }
            if let Some(fresh) = self.reopened.lock().unwrap_or_else(|e| e.into_inner()).take() {
                sink = fresh;
            }
            // The lines waiting, as many as one write may hold, in one write: a round of
            // many queues is not a system call per line.
            let (batch, lines) = {
                let mut q = self.lock_queue();
                let (mut batch, mut lines) = (Vec::new(), 0usize);
                while let Some(line) = q.lines.front() {
                    if !batch.is_empty() && batch.len() + line.len() > sink.batch_bytes {
                        break;
                    }
                    batch.extend_from_slice(line);
                    q.lines.pop_front();
                    lines += 1;
                }
                (q.writing_since, q.writing) = (Some(Instant::now()), lines);
                (batch, lines)
            };
            let written = crate::line_files::write_all_waiting(&sink.file, &batch);
            let mut q = self.lock_queue();
            (q.writing_since, q.writing) = (None, 0);
            q.bytes -= batch.len();
            q.written += lines as u64;
            if let Err(e) = written {
                q.failed = Some((e.kind(), e.to_string()));
                q.lines.clear();
                q.bytes = 0;
            }
            self.changed.notify_all();
            if q.failed.is_some() {
                return;
            }
        }
    }
}

/// Unix time in milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(n: usize) -> Decision<'static> {
        Decision {
            ts: n as u64,
            target: "t",
            mode: "shadow",
            queue: format!("s/p/{n}"),
            observation: serde_json::json!({"pad": "x".repeat(500)}),
            proposed: None,
            after_guardrails: serde_json::Value::Null,
            applied: false,
            reason: "policy".into(),
        }
    }

    /// A reader that stays but reads nothing: writes go on without waiting for it (the pipe
    /// filled, and the control loop waited in the middle of a round), the close gives up
    /// saying what was lost, and a reader that reads gets every line, in order.
    #[test]
    fn a_reader_that_stops_reading_holds_no_write() {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let fifo = crate::line_files::make_fifo(dir.path());
        let reader = crate::line_files::fifo_reader(&fifo);
        let log = DecisionLog::open(Some(&fifo)).unwrap();
        // 1 000 lines of 600-odd bytes: ten times what a pipe holds.
        for n in 0..1000 {
            log.write(&decision(n)).unwrap();
        }
        let e = log.close(Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("decisions not written"), "{e}");
        // The reader catches up: every line arrives, in order.
        let mut reader = std::io::BufReader::new(reader);
        let (mut n, mut line) = (0, String::new());
        while n < 1000 {
            // A line read in part before the pipe ran dry is kept: the rest follows.
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                    assert_eq!(v["ts"], n as u64);
                    (n, line) = (n + 1, String::new());
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(n, 1000);
    }

    /// A SIGHUP's reopen while a write waits on a reader that stopped returns at once: it
    /// waited for that write, with the stop behind it.
    #[test]
    fn a_reopen_does_not_wait_for_a_stalled_write() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = crate::line_files::make_fifo(dir.path());
        let _reader = crate::line_files::fifo_reader(&fifo);
        let log = DecisionLog::open(Some(&fifo)).unwrap();
        for n in 0..1000 {
            log.write(&decision(n)).unwrap();
        }
        let out = log.out.as_ref().unwrap();
        while out.lock_queue().writing_since.is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        let (tx, rx) = std::sync::mpsc::channel();
        let reopening = log.clone();
        std::thread::spawn(move || tx.send(reopening.reopen().is_ok()).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(true), "the reopen waited for the stalled write");
    }

    /// A log that has taken no line for the stall limit, or has too much waiting, fails the
    /// next write: the controller stops as for a log it cannot write.
    #[test]
    fn a_stalled_or_swamped_log_fails_the_next_write() {
        let mut q = Queue { writing_since: Some(Instant::now()), ..Default::default() };
        assert!(q.error().is_none());
        q.writing_since = Instant::now().checked_sub(STALL_LIMIT);
        assert!(q.error().unwrap().to_string().contains("a write has waited 30 s"));
        let q = Queue { bytes: MAX_WAITING_BYTES + 1, ..Default::default() };
        assert!(q.error().unwrap().to_string().contains("does not keep up"));
    }

    #[test]
    fn only_a_decision_log_is_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let decision = r#"{"ts":1,"queue":"s/p/3","reason":"policy","applied":false}"#;
        for (name, text, ok) in [
            ("new.jsonl", None, true),
            ("empty.jsonl", Some(String::new()), true),
            ("log.jsonl", Some(format!("{decision}\n")), true),
            ("torn.jsonl", Some(r#"{"ts":1,"que"#.to_string()), true),
            ("torn-then-more.jsonl", Some(format!("{{\"ts\":1,\"que\n{decision}\n")), true),
            ("blank-first.jsonl", Some(format!("\n{decision}\n")), true),
            ("token", Some("s3cr3t\n".to_string()), false),
            ("journal.jsonl", Some("{\"event\":\"start\",\"generation\":0}\n".to_string()), false),
            ("telemetry.csv", Some("ts_ns,switch,port\n1,s,p\n".to_string()), false),
        ] {
            let path = dir.path().join(name);
            if let Some(text) = &text {
                std::fs::write(&path, text).unwrap();
            }
            let opened = DecisionLog::open(Some(&path));
            assert_eq!(opened.is_ok(), ok, "{name}");
            if !ok {
                assert_eq!(std::fs::read_to_string(&path).unwrap(), *text.as_ref().unwrap(), "{name} untouched");
            }
        }
    }
}
