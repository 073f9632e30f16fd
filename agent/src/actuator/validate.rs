//! Switch-side safety: the checks every Apply passes before anything changes.
//!
//! The controller has its own guardrails, but the actuator never trusts them: a buggy or
//! compromised controller must not be able to put an unsafe setting on a queue. Every message
//! names the queue (`switch/port/queue`) and the field, so an operator reading a refusal in
//! a log or the journal knows exactly what was wrong.

use super::backend::{BackendCaps, Bounds, QueueCap, QueueKey};
use ecn_env::EcnSetting;
use ecn_proto::v1 as pb;
use std::collections::{HashMap, HashSet};

/// A caller's text as messages, logs and the journal quote it: control characters escaped (a
/// newline in a controller id forged a log line) and at most [`QUOTED_CHARS`] characters (a
/// megabyte queue name, echoed in a status message, exceeded gRPC's metadata limit and turned
/// the refusal into `RESOURCE_EXHAUSTED`).
pub fn quoted(text: &str) -> String {
    quoted_at_most(text, QUOTED_CHARS)
}

/// [`quoted`], keeping up to `max_chars` characters.
pub fn quoted_at_most(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == max_chars {
            out.push_str(&format!("…({} bytes)", text.len()));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The most characters of a caller's text [`quoted`] keeps.
pub const QUOTED_CHARS: usize = 64;

/// Check one setting for one queue. Returns the first problem found.
pub fn check_setting(cap: &QueueCap, bounds: &Bounds, s: &EcnSetting) -> Result<(), String> {
    let q = &cap.key;
    if !s.pmax.is_finite() || !(0.0..=1.0).contains(&s.pmax) {
        return Err(format!("queue {q}: pmax ({}) must be a finite number within [0, 1]", s.pmax));
    }
    if s.kmin_bytes >= s.kmax_bytes {
        return Err(format!(
            "queue {q}: kmin_bytes ({}) must be less than kmax_bytes ({})",
            s.kmin_bytes, s.kmax_bytes
        ));
    }
    if s.pmax < bounds.pmax_min || s.pmax > bounds.pmax_max {
        return Err(format!(
            "queue {q}: pmax ({}) is outside the bounds [{}, {}]",
            s.pmax, bounds.pmax_min, bounds.pmax_max
        ));
    }
    if s.kmin_bytes < bounds.kmin_min_bytes {
        return Err(format!("queue {q}: kmin_bytes ({}) is below the bound ({})", s.kmin_bytes, bounds.kmin_min_bytes));
    }
    if s.kmax_bytes > bounds.kmax_max_bytes {
        return Err(format!("queue {q}: kmax_bytes ({}) is above the bound ({})", s.kmax_bytes, bounds.kmax_max_bytes));
    }
    let g = bounds.granularity_bytes.max(1);
    for (field, v) in [("kmin_bytes", s.kmin_bytes), ("kmax_bytes", s.kmax_bytes)] {
        if !v.is_multiple_of(g) {
            return Err(format!("queue {q}: {field} ({v}) must be a multiple of {g} bytes"));
        }
    }
    // ECN must act before PFC does (REFERENCE.md §1): a Kmax at or above the XOFF level lets
    // the ingress pause upstream before the queue ever marks every packet.
    if cap.pfc_xoff_bytes > 0 && s.kmax_bytes >= cap.pfc_xoff_bytes {
        return Err(format!(
            "queue {q}: kmax_bytes ({}) must be below the PFC XOFF level ({})",
            s.kmax_bytes, cap.pfc_xoff_bytes
        ));
    }
    Ok(())
}

/// Look queues up by identity.
#[derive(Debug, Clone)]
pub struct QueueIndex {
    by_key: HashMap<QueueKey, usize>,
}

impl QueueIndex {
    /// Index the queues of a backend.
    pub fn new(caps: &BackendCaps) -> QueueIndex {
        QueueIndex { by_key: caps.queues.iter().enumerate().map(|(i, q)| (q.key.clone(), i)).collect() }
    }

    /// Position of a queue in the capabilities order.
    pub fn get(&self, key: &QueueKey) -> Option<usize> {
        self.by_key.get(key).copied()
    }
}

/// Resolve and check a whole change set from the wire. On success, every change as
/// (queue index, setting); on failure, the message for `INVALID_ARGUMENT`. All-or-nothing:
/// one bad entry refuses the whole set.
pub fn check_changes(
    caps: &BackendCaps,
    index: &QueueIndex,
    changes: &[pb::QueueSetting],
) -> Result<Vec<(usize, EcnSetting)>, String> {
    if changes.is_empty() {
        return Err("changes: no queue settings given".into());
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(changes.len());
    for (i, c) in changes.iter().enumerate() {
        let Some(id) = &c.id else {
            return Err(format!("changes[{i}].id: missing queue identity"));
        };
        let key = QueueKey::from(id);
        let Some(q) = index.get(&key) else {
            let key = quoted(&key.to_string());
            return Err(format!("changes[{i}]: unknown queue {key} (switch/port/queue not on this actuator)"));
        };
        let Some(s) = &c.setting else {
            return Err(format!("queue {key}: setting missing"));
        };
        if !seen.insert(q) {
            return Err(format!("queue {key}: listed more than once"));
        }
        // −0 is 0, and is written and shown as 0.
        let pmax = if s.pmax == 0.0 { 0.0 } else { s.pmax };
        let setting = EcnSetting { kmin_bytes: s.kmin_bytes, kmax_bytes: s.kmax_bytes, pmax };
        check_setting(&caps.queues[q], &caps.bounds, &setting)?;
        out.push((q, setting));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> BackendCaps {
        let q = |port: &str, xoff| QueueCap {
            key: QueueKey { switch: "leaf0".into(), port: port.into(), queue: 3 },
            link_bps: 100_000_000_000,
            pfc_xoff_bytes: xoff,
        };
        BackendCaps {
            backend: "test".into(),
            queues: vec![q("eth1", 4_000_000), q("eth2", 0)],
            buffer_bytes: 32_000_000,
            bounds: Bounds { granularity_bytes: 1000, ..Bounds::for_buffer(32_000_000) },
            min_telemetry_interval_ns: 0,
            telemetry_time_scale: 1.0,
        }
    }

    fn change(port: &str, kmin: u64, kmax: u64, pmax: f64) -> pb::QueueSetting {
        pb::QueueSetting {
            id: Some(pb::QueueId { switch: "leaf0".into(), port: port.into(), queue: 3 }),
            setting: Some(pb::EcnSetting { kmin_bytes: kmin, kmax_bytes: kmax, pmax }),
        }
    }

    fn err(changes: &[pb::QueueSetting]) -> String {
        let c = caps();
        check_changes(&c, &QueueIndex::new(&c), changes).unwrap_err()
    }

    #[test]
    fn accepts_a_good_set() {
        let c = caps();
        let ok = check_changes(&c, &QueueIndex::new(&c), &[change("eth1", 400_000, 1_600_000, 0.2)]).unwrap();
        assert_eq!(ok, vec![(0, EcnSetting { kmin_bytes: 400_000, kmax_bytes: 1_600_000, pmax: 0.2 })]);
    }

    #[test]
    fn every_refusal_names_queue_and_field() {
        let cases: &[(pb::QueueSetting, &str)] = &[
            (change("eth1", 2_000_000, 1_000_000, 0.2), "kmin_bytes"),
            (change("eth1", 1_000_000, 1_000_000, 0.2), "kmin_bytes"),
            (change("eth1", 100_000, 1_000_000, 1.5), "pmax"),
            (change("eth1", 100_000, 1_000_000, -0.1), "pmax"),
            (change("eth1", 100_000, 1_000_000, f64::NAN), "pmax"),
            (change("eth1", 100_000, 1_000_000, f64::INFINITY), "pmax"),
            (change("eth1", 0, 1_000_000, 0.2), "kmin_bytes"),
            (change("eth2", 100_000, 64_000_000, 0.2), "kmax_bytes"),
            (change("eth1", 100_500, 1_000_000, 0.2), "kmin_bytes"),
            (change("eth1", 100_000, 4_000_000, 0.2), "PFC XOFF"),
        ];
        for (c, field) in cases {
            let e = err(std::slice::from_ref(c));
            let port = &c.id.as_ref().unwrap().port;
            assert!(e.contains(&format!("leaf0/{port}/3")), "{e}");
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn one_bad_entry_refuses_the_whole_set() {
        let e = err(&[change("eth1", 400_000, 1_600_000, 0.2), change("eth2", 5, 1, 0.2)]);
        assert!(e.contains("leaf0/eth2/3"), "{e}");
    }

    #[test]
    fn unknown_duplicate_and_empty() {
        let mut unknown = change("eth9", 400_000, 1_600_000, 0.2);
        assert!(err(std::slice::from_ref(&unknown)).contains("unknown queue leaf0/eth9/3"));
        unknown.id.as_mut().unwrap().queue = 4;
        unknown.id.as_mut().unwrap().port = "eth1".into();
        assert!(err(&[unknown]).contains("unknown queue leaf0/eth1/4"));
        let c = change("eth1", 400_000, 1_600_000, 0.2);
        assert!(err(&[c.clone(), c]).contains("more than once"));
        assert!(err(&[]).contains("changes"));
        assert!(err(&[pb::QueueSetting { id: None, setting: None }]).contains("changes[0].id"));
    }

    /// A caller's names are quoted bounded and escaped: a megabyte name in a refusal exceeded
    /// gRPC's metadata limit, a newline forged a log line.
    #[test]
    fn a_callers_text_is_quoted_bounded() {
        let mut huge = change("eth1", 400_000, 1_600_000, 0.2);
        huge.id.as_mut().unwrap().switch = "x".repeat(3_000_000);
        let e = err(&[huge]);
        assert!(e.len() < 300 && e.contains("…(3000007 bytes)"), "{e}");
        assert_eq!(quoted("a\nINFO forged"), "a\\nINFO forged");
        assert_eq!(quoted("leaf0"), "leaf0");
    }

    /// −0 is 0: stored and shown as 0.
    #[test]
    fn a_negative_zero_pmax_is_zero() {
        let caps = caps();
        let index = QueueIndex::new(&caps);
        let mut bounds = caps.clone();
        bounds.bounds.pmax_min = 0.0;
        let c = change("eth1", 400_000, 1_600_000, -0.0);
        let out = check_changes(&bounds, &index, &[c]).unwrap();
        assert!(out[0].1.pmax.is_sign_positive(), "{:?}", out[0].1);
    }
}
