//! The controller's decision log: JSON lines, one per decision (PRODUCT.md "JSON outputs").

use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
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
#[derive(Clone)]
pub struct DecisionLog {
    out: Option<Arc<Mutex<BufWriter<File>>>>,
}

impl DecisionLog {
    /// Log to `path` (appending), or nowhere.
    pub fn open(path: Option<&Path>) -> std::io::Result<Self> {
        let out = match path {
            Some(p) => Some(Arc::new(Mutex::new(BufWriter::new(
                std::fs::OpenOptions::new().create(true).append(true).open(p)?,
            )))),
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
            out.write_all(&line)?;
            out.flush()?;
        }
        Ok(())
    }
}

/// Unix time in milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
