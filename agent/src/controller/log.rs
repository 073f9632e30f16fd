//! The controller's decision log: JSON lines, one per decision (PRODUCT.md "JSON outputs").

use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

/// Append-only JSON-lines writer, shared by every actuator's control loop; each line is
/// written whole and flushed, so a crash loses nothing written.
///
/// The log grows by a line per queue per round (about 550 bytes), so it is meant to be rotated:
/// on SIGHUP ([`DecisionLog::reopen_on_hangup`]) it opens its path afresh, which is what
/// logrotate's `postrotate` step expects after it renamed the file.
#[derive(Clone)]
pub struct DecisionLog {
    out: Option<Arc<Mutex<Sink>>>,
}

/// The file lines go to, and the path it was opened from.
struct Sink {
    path: PathBuf,
    writer: BufWriter<File>,
}

/// A log cut short by a full disk or a crash gets its partial last line ended: the next run's
/// first decision was glued to it, and neither line could be read.
fn open_append(path: &Path) -> std::io::Result<BufWriter<File>> {
    refuse_other_files(path)?;
    Ok(BufWriter::new(crate::line_files::open_append(path)?))
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
        let out = match path {
            Some(p) => Some(Arc::new(Mutex::new(Sink { path: p.to_path_buf(), writer: open_append(p)? }))),
            None => None,
        };
        Ok(DecisionLog { out })
    }

    /// Whether decisions go anywhere (callers skip building them otherwise).
    pub fn enabled(&self) -> bool {
        self.out.is_some()
    }

    /// Write one decision.
    pub fn write(&self, d: &Decision<'_>) -> std::io::Result<()> {
        if let Some(out) = &self.out {
            let mut line = serde_json::to_vec(d)?;
            line.push(b'\n');
            let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
            out.writer.write_all(&line)?;
            out.writer.flush()?;
        }
        Ok(())
    }

    /// Open the path afresh (after a rotation renamed the file): later lines go to a new file
    /// there. When it cannot be opened, lines keep going to the old file, and the error says why.
    pub fn reopen(&self) -> std::io::Result<()> {
        if let Some(out) = &self.out {
            let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
            let fresh = open_append(&out.path)?;
            // Lines are flushed as written; this only makes sure before the old file closes.
            out.writer.flush()?;
            out.writer = fresh;
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
                let path = out.lock().unwrap_or_else(|e| e.into_inner()).path.clone();
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

/// Unix time in milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
