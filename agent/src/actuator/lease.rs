//! The single-writer role (P4Runtime's election id, as a lease).
//!
//! One controller at a time may change settings. It takes a lease with a time to live and
//! renews it by asking again before it lapses; another controller is refused while the lease
//! is valid. A lapsed lease only frees the role: it does not touch settings, because confirmed
//! settings are known-good and unconfirmed ones revert by their own deadline.

use std::time::{Duration, Instant};

/// Lease time to live when the request gives none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Longest lease accepted: a dead controller must not block others for long.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// The lease held by the current writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Opaque id the writer presents with every change.
    pub id: String,
    /// Who holds it.
    pub controller_id: String,
    /// When it lapses (monotonic).
    pub expires: Instant,
    /// The same moment as Unix milliseconds.
    pub expires_unix_ms: u64,
}

/// The longest `controller_id` an actuator accepts, in bytes: a name, quoted in journal lines
/// and in refusals to other controllers.
pub const MAX_CONTROLLER_ID_BYTES: usize = 128;

/// Why `id` is no controller id: empty, longer than [`MAX_CONTROLLER_ID_BYTES`], or holding
/// control characters (a newline in one forged a line of the actuator's log).
pub fn check_controller_id(id: &str) -> Result<(), String> {
    if id.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if id.len() > MAX_CONTROLLER_ID_BYTES || id.chars().any(char::is_control) {
        return Err(format!(
            "'{}': at most {MAX_CONTROLLER_ID_BYTES} bytes, without control characters",
            super::validate::quoted(id)
        ));
    }
    Ok(())
}

/// Why the role or a change is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Another controller holds a valid lease (`FAILED_PRECONDITION` on AcquireWriter).
    #[error("writer role held by controller '{holder}' for another {remaining_ms} ms")]
    HeldByOther {
        /// The holder's controller id.
        holder: String,
        /// Time left on its lease.
        remaining_ms: u64,
    },
    /// The presented lease is not the valid one (`PERMISSION_DENIED` on changes).
    #[error("{0}")]
    NotHolder(String),
}

/// Who holds the writer role.
#[derive(Debug, Default)]
pub struct LeaseTable {
    current: Option<Lease>,
}

impl LeaseTable {
    /// The id of the last lease granted, lapsed or not; `None` once released.
    pub fn current_id(&self) -> Option<&str> {
        self.current.as_ref().map(|l| l.id.as_str())
    }

    /// Take or renew the role for `controller_id`. The same controller keeps its lease id
    /// (a restarted controller with the same id takes its role back); a new holder gets a
    /// new id from `new_id`.
    pub fn acquire(
        &mut self,
        controller_id: &str,
        ttl: Duration,
        now: Instant,
        now_unix_ms: u64,
        new_id: impl FnOnce() -> String,
    ) -> Result<Lease, LeaseError> {
        let expires = now + ttl;
        let expires_unix_ms = now_unix_ms + ttl.as_millis() as u64;
        match &mut self.current {
            Some(l) if l.controller_id == controller_id => {
                l.expires = expires;
                l.expires_unix_ms = expires_unix_ms;
                Ok(l.clone())
            }
            Some(l) if l.expires > now => Err(LeaseError::HeldByOther {
                holder: l.controller_id.clone(),
                remaining_ms: (l.expires - now).as_millis() as u64,
            }),
            _ => {
                let l = Lease { id: new_id(), controller_id: controller_id.to_string(), expires, expires_unix_ms };
                self.current = Some(l.clone());
                Ok(l)
            }
        }
    }

    /// Give the role up. Returns the controller that held it, if `lease_id` was the lease.
    pub fn release(&mut self, lease_id: &str) -> Option<String> {
        if self.current.as_ref().is_some_and(|l| l.id == lease_id) {
            return self.current.take().map(|l| l.controller_id);
        }
        None
    }

    /// The valid lease with this id, or why there is none.
    pub fn check(&self, lease_id: &str, now: Instant) -> Result<&Lease, LeaseError> {
        match &self.current {
            None => Err(LeaseError::NotHolder("no writer lease is held: call AcquireWriter first".into())),
            Some(l) if l.id != lease_id => Err(LeaseError::NotHolder(if lease_id.is_empty() {
                "no lease_id given: call AcquireWriter first".into()
            } else {
                format!(
                    "lease '{}' is not the writer lease (the role is with controller '{}')",
                    super::validate::quoted(lease_id),
                    l.controller_id
                )
            })),
            Some(l) if l.expires <= now => Err(LeaseError::NotHolder(format!(
                "the writer lease of controller '{}' has expired: renew it with AcquireWriter",
                l.controller_id
            ))),
            Some(l) => Ok(l),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_writer_renew_and_lapse() {
        let mut t = LeaseTable::default();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(5);
        let a = t.acquire("a", ttl, t0, 0, || "L1".into()).unwrap();
        assert_eq!(a.id, "L1");
        let refused = t.acquire("b", ttl, t0 + Duration::from_secs(1), 1000, || "L2".into()).unwrap_err();
        assert!(matches!(refused, LeaseError::HeldByOther { ref holder, remaining_ms: 4000 } if holder == "a"));
        // Renewal keeps the id and moves the expiry.
        let a2 = t.acquire("a", ttl, t0 + Duration::from_secs(4), 4000, || "L3".into()).unwrap();
        assert_eq!((a2.id.as_str(), a2.expires_unix_ms), ("L1", 9000));
        assert!(t.check("L1", t0 + Duration::from_secs(8)).is_ok());
        assert!(t.check("nope", t0).is_err());
        assert!(t.check("", t0).is_err());
        // Lapsed: changes are refused and another controller may take over.
        assert!(t.check("L1", t0 + Duration::from_secs(9)).is_err());
        let b = t.acquire("b", ttl, t0 + Duration::from_secs(9), 9000, || "L4".into()).unwrap();
        assert_eq!(b.id, "L4");
        assert_eq!(t.release("L1"), None);
        assert_eq!(t.release("L4").as_deref(), Some("b"));
        assert!(t.check("L4", t0).is_err());
    }
}
