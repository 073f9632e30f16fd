//! Generations and commit-confirm: which settings are in effect, which are confirmed, and what
//! a revert or a rollback returns to.
//!
//! Pure bookkeeping, no I/O and no clock reads, so the rules are unit-tested on their own:
//! - generation numbers only grow; every change (apply, revert, rollback) makes a new one,
//!   so a number always names one set of settings (the journal and `expected_generation`
//!   rely on that);
//! - an apply with a deadline is unconfirmed until confirmed; further applies may stack on
//!   top of it and move the deadline; a revert returns to the last confirmed generation,
//!   undoing the whole unconfirmed stack;
//! - a revert or a rollback produces a confirmed generation (a known-good state by definition),
//!   so a rollback may only return to a generation that was confirmed: never to one still
//!   pending, nor to one a revert discarded, as neither passed a health check.

use ecn_env::EcnSetting;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

/// How many past generations are kept for Rollback. Enough for hours of changes at one
/// apply per second, bounded so that a long-running actuator does not grow without limit.
pub const HISTORY_LIMIT: usize = 4096;

/// When an unconfirmed generation reverts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// Monotonic instant, for the timer.
    pub at: Instant,
    /// The same moment as Unix milliseconds, for the wire and the journal.
    pub unix_ms: u64,
}

/// Why a confirm or rollback cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The generation never existed.
    #[error("generation {asked} does not exist (current is {current})")]
    Unknown {
        /// Asked for.
        asked: u64,
        /// Current generation.
        current: u64,
    },
    /// The generation is older than the kept history.
    #[error("generation {asked} is no longer kept (oldest kept: {oldest})")]
    Forgotten {
        /// Asked for.
        asked: u64,
        /// Oldest generation still kept.
        oldest: u64,
    },
    /// Rolling back to a generation that never passed a health check: still pending, or
    /// discarded by a revert or rollback before it was confirmed.
    #[error("generation {asked} was never confirmed, so it cannot be rolled back to (confirmed is {confirmed})")]
    NeverConfirmed {
        /// Asked for.
        asked: u64,
        /// Confirmed generation.
        confirmed: u64,
    },
    /// Confirming a generation that was reverted, rolled back or is older than the confirmed one.
    #[error("generation {asked} cannot be confirmed: it is not pending (current {current}, confirmed {confirmed})")]
    NotPending {
        /// Asked for.
        asked: u64,
        /// Current generation.
        current: u64,
        /// Confirmed generation.
        confirmed: u64,
    },
}

/// What a successful confirm did.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmed {
    /// The confirmed generation before.
    pub previous: u64,
    /// Queues whose settings differ from the previously confirmed ones: what became permanent.
    pub changed: Vec<(usize, EcnSetting)>,
    /// True if the generation was already confirmed (nothing changed).
    pub already: bool,
}

/// The settings history of one actuator.
#[derive(Debug, Clone)]
pub struct Ledger {
    current: u64,
    confirmed: u64,
    /// Generations applied with a deadline since `confirmed`, oldest first.
    unconfirmed: Vec<u64>,
    deadline: Option<Deadline>,
    history: BTreeMap<u64, Arc<[EcnSetting]>>,
    /// Kept generations that were discarded unconfirmed.
    discarded: BTreeSet<u64>,
}

impl Ledger {
    /// Start at `generation` (confirmed; 1 for a new journal) with the settings found on the
    /// device.
    pub fn starting_at(generation: u64, initial: Vec<EcnSetting>) -> Ledger {
        let mut history = BTreeMap::new();
        history.insert(generation, Arc::from(initial));
        Ledger {
            current: generation,
            confirmed: generation,
            unconfirmed: Vec::new(),
            deadline: None,
            history,
            discarded: BTreeSet::new(),
        }
    }

    /// Generation in effect.
    pub fn current(&self) -> u64 {
        self.current
    }

    /// Last confirmed generation.
    pub fn confirmed(&self) -> u64 {
        self.confirmed
    }

    /// The generation the next change will get.
    pub fn next(&self) -> u64 {
        self.current + 1
    }

    /// Deadline of the pending unconfirmed stack, if any.
    pub fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    /// Settings in effect.
    pub fn current_settings(&self) -> Arc<[EcnSetting]> {
        self.history[&self.current].clone()
    }

    /// Settings of the last confirmed generation.
    pub fn confirmed_settings(&self) -> Arc<[EcnSetting]> {
        self.history[&self.confirmed].clone()
    }

    /// Settings of any kept generation.
    pub fn settings_of(&self, generation: u64) -> Result<Arc<[EcnSetting]>, LedgerError> {
        if let Some(s) = self.history.get(&generation) {
            return Ok(s.clone());
        }
        if generation == 0 || generation > self.current {
            return Err(LedgerError::Unknown { asked: generation, current: self.current });
        }
        let oldest = self.history.keys().next().copied().unwrap_or(self.current);
        Err(LedgerError::Forgotten { asked: generation, oldest })
    }

    /// The current settings with `changes` laid over them (a full set, ready for a backend).
    pub fn staged(&self, changes: &[(usize, EcnSetting)]) -> Vec<EcnSetting> {
        let mut s = self.current_settings().to_vec();
        for &(q, setting) in changes {
            s[q] = setting;
        }
        s
    }

    /// Record an applied full set as the next generation. With a deadline it joins the
    /// unconfirmed stack (and the deadline replaces any earlier one); without, it is confirmed
    /// at once, together with everything beneath it.
    pub fn commit(&mut self, settings: Vec<EcnSetting>, deadline: Option<Deadline>) -> u64 {
        let g = self.push(settings);
        match deadline {
            Some(d) => {
                self.unconfirmed.push(g);
                self.deadline = Some(d);
            }
            None => self.settle(g),
        }
        g
    }

    /// Confirm `generation`: the current one, or one in the unconfirmed stack beneath it (the
    /// stack above stays pending, now reverting to `generation`). Confirming the confirmed
    /// generation again is a no-op.
    pub fn confirm(&mut self, generation: u64) -> Result<Confirmed, LedgerError> {
        if generation == self.confirmed {
            return Ok(Confirmed { previous: self.confirmed, changed: Vec::new(), already: true });
        }
        if !self.unconfirmed.contains(&generation) {
            if generation == 0 || generation > self.current {
                return Err(LedgerError::Unknown { asked: generation, current: self.current });
            }
            return Err(LedgerError::NotPending {
                asked: generation,
                current: self.current,
                confirmed: self.confirmed,
            });
        }
        let new = self.settings_of(generation)?;
        let old = self.confirmed_settings();
        let changed = diff(&old, &new);
        let previous = self.confirmed;
        self.confirmed = generation;
        self.unconfirmed.retain(|&g| g > generation);
        if self.unconfirmed.is_empty() {
            self.deadline = None;
        }
        Ok(Confirmed { previous, changed, already: false })
    }

    /// The settings of `generation` if a rollback may return to it: kept, and confirmed once.
    pub fn known_good(&self, generation: u64) -> Result<Arc<[EcnSetting]>, LedgerError> {
        let settings = self.settings_of(generation)?;
        if self.unconfirmed.contains(&generation) || self.discarded.contains(&generation) {
            return Err(LedgerError::NeverConfirmed { asked: generation, confirmed: self.confirmed });
        }
        Ok(settings)
    }

    /// Return to the settings of `target` (default: the last confirmed generation; see
    /// [`Ledger::known_good`]) as a new, confirmed generation; the unconfirmed stack is
    /// discarded. Returns the new generation and the queues it changed back.
    pub fn restore(&mut self, target: Option<u64>) -> Result<(u64, Vec<(usize, EcnSetting)>), LedgerError> {
        let target = target.unwrap_or(self.confirmed);
        let settings = self.known_good(target)?;
        let changed = diff(&self.current_settings(), &settings);
        self.discarded.extend(self.unconfirmed.drain(..));
        let g = self.push(settings.to_vec());
        self.settle(g);
        Ok((g, changed))
    }

    fn push(&mut self, settings: Vec<EcnSetting>) -> u64 {
        self.current += 1;
        self.history.insert(self.current, Arc::from(settings));
        // Forget the oldest generations, never the confirmed one (a revert needs it) nor the
        // current one.
        while self.history.len() > HISTORY_LIMIT {
            let Some(oldest) = self.history.keys().copied().find(|g| *g != self.confirmed && *g != self.current) else {
                break;
            };
            self.history.remove(&oldest);
            self.discarded.remove(&oldest);
        }
        self.current
    }

    fn settle(&mut self, g: u64) {
        self.confirmed = g;
        self.unconfirmed.clear();
        self.deadline = None;
    }
}

/// Queues whose setting differs between two full sets, with the setting in `to`.
pub fn diff(from: &[EcnSetting], to: &[EcnSetting]) -> Vec<(usize, EcnSetting)> {
    from.iter().zip(to).enumerate().filter(|(_, (a, b))| a != b).map(|(i, (_, b))| (i, *b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(k: u64) -> EcnSetting {
        EcnSetting { kmin_bytes: k, kmax_bytes: k * 4, pmax: 0.2 }
    }

    fn dl() -> Option<Deadline> {
        Some(Deadline { at: Instant::now(), unix_ms: 1 })
    }

    #[test]
    fn confirmed_apply_and_rollback_make_new_generations() {
        let mut l = Ledger::starting_at(1, vec![s(100), s(100)]);
        let g2 = l.commit(l.staged(&[(0, s(200))]), None);
        assert_eq!((g2, l.current(), l.confirmed()), (2, 2, 2));
        let (g3, changed) = l.restore(Some(1)).unwrap();
        assert_eq!((g3, l.confirmed()), (3, 3));
        assert_eq!(changed, vec![(0, s(100))]);
        assert_eq!(&*l.current_settings(), &[s(100), s(100)]);
        assert_eq!(l.restore(Some(9)), Err(LedgerError::Unknown { asked: 9, current: 3 }));
    }

    #[test]
    fn unconfirmed_stack_reverts_to_the_last_confirmed() {
        let mut l = Ledger::starting_at(1, vec![s(100), s(100)]);
        let g2 = l.commit(l.staged(&[(0, s(200))]), dl());
        let g3 = l.commit(l.staged(&[(1, s(300))]), dl());
        assert_eq!((g2, g3, l.confirmed()), (2, 3, 1));
        assert!(l.deadline().is_some());
        let (g4, changed) = l.restore(None).unwrap();
        assert_eq!(g4, 4);
        assert_eq!(changed, vec![(0, s(100)), (1, s(100))]);
        assert!(l.deadline().is_none());
        // The reverted generations can no longer be confirmed.
        assert!(matches!(l.confirm(3), Err(LedgerError::NotPending { .. })));
    }

    #[test]
    fn a_rollback_returns_only_to_a_generation_once_confirmed() {
        let mut l = Ledger::starting_at(1, vec![s(100)]);
        let g2 = l.commit(l.staged(&[(0, s(200))]), None);
        let g3 = l.commit(l.staged(&[(0, s(300))]), dl());
        let never = Err(LedgerError::NeverConfirmed { asked: g3, confirmed: 2 });
        assert_eq!(l.known_good(g3), never, "pending");
        assert_eq!(l.restore(Some(g3)).map(|_| ()), never.map(|_: Arc<[EcnSetting]>| ()));
        let (g4, _) = l.restore(None).unwrap();
        assert_eq!(l.restore(Some(g3)).map(|_| ()), Err(LedgerError::NeverConfirmed { asked: g3, confirmed: g4 }));
        assert_eq!(&*l.known_good(g2).unwrap(), &[s(200)], "confirmed before");
        assert_eq!(&*l.known_good(g4).unwrap(), &[s(200)]);
        // A stack settled by a confirmed apply was confirmed with it.
        let g5 = l.commit(l.staged(&[(0, s(500))]), dl());
        l.commit(l.staged(&[(0, s(600))]), None);
        assert_eq!(&*l.known_good(g5).unwrap(), &[s(500)]);
    }

    #[test]
    fn confirming_part_of_the_stack() {
        let mut l = Ledger::starting_at(1, vec![s(100)]);
        l.commit(l.staged(&[(0, s(200))]), dl());
        l.commit(l.staged(&[(0, s(300))]), dl());
        let c = l.confirm(2).unwrap();
        assert_eq!((c.previous, c.changed.clone(), c.already), (1, vec![(0, s(200))], false));
        assert!(l.deadline().is_some(), "generation 3 is still unconfirmed");
        let (_, back) = l.restore(None).unwrap();
        assert_eq!(back, vec![(0, s(200))]);
        assert!(l.confirm(l.current()).unwrap().already);
        assert!(matches!(l.confirm(99), Err(LedgerError::Unknown { .. })));
    }

    #[test]
    fn a_confirmed_apply_settles_the_stack() {
        let mut l = Ledger::starting_at(1, vec![s(100)]);
        l.commit(l.staged(&[(0, s(200))]), dl());
        l.commit(l.staged(&[(0, s(300))]), None);
        assert_eq!((l.current(), l.confirmed(), l.deadline().is_some()), (3, 3, false));
    }

    #[test]
    fn history_is_bounded_but_keeps_the_confirmed_generation() {
        let mut l = Ledger::starting_at(1, vec![s(100)]);
        for i in 0..(HISTORY_LIMIT as u64 + 10) {
            l.commit(vec![s(200 + i)], dl());
        }
        assert_eq!(l.confirmed(), 1);
        assert!(l.settings_of(1).is_ok(), "the confirmed generation is never forgotten");
        assert!(matches!(l.settings_of(2), Err(LedgerError::Forgotten { .. })));
        assert_eq!(l.restore(None).unwrap().1, vec![(0, s(100))]);
    }
}
