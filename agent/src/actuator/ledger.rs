//! Generations and commit-confirm: which settings are in effect, which are confirmed, and what
//! a revert or a rollback returns to.
//!
//! Pure bookkeeping, no I/O and no clock reads, so the rules are unit-tested on their own:
//! - generation numbers only grow; every change (apply, revert, rollback) makes a new one,
//!   so a number always names one set of settings (the journal and `expected_generation`
//!   rely on that);
//! - an apply with a deadline is unconfirmed until confirmed; further applies may stack on
//!   top of it, each with its own deadline, but none moves an earlier one: the stack reverts
//!   at the earliest deadline among its generations (a later apply with a longer window used
//!   to extend the earlier change's, and a Confirm after its deadline kept it); a revert
//!   returns to the last confirmed generation, undoing the whole unconfirmed stack;
//! - a revert or a rollback produces a confirmed generation (a known-good state by definition),
//!   so a rollback may only return to a generation that was confirmed itself: never to one
//!   still pending, to one a revert discarded, or to one passed over when a generation above it
//!   was confirmed (its settings alone were never judged).

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
    /// Monotonic instant: the timer, unmoved by steps of the wall clock.
    pub at: Instant,
}

impl Deadline {
    /// The same moment as Unix milliseconds, for the wire and the journal: worked out from the
    /// wall clock now and the time left, so that it stays right across a step of the wall
    /// clock (worked out once, at the apply, it was off by the whole step after one).
    pub fn unix_ms(&self) -> u64 {
        let left = self.at.saturating_duration_since(Instant::now());
        super::journal::unix_ms(std::time::SystemTime::now()) + left.as_millis() as u64
    }
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
    /// Rolling back to a generation that never passed a health check: still pending,
    /// discarded by a revert or rollback before it was confirmed, or confirmed only as part of
    /// a generation above it.
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
    /// Generations applied with a deadline since `confirmed`, oldest first, with their
    /// deadlines.
    unconfirmed: Vec<(u64, Deadline)>,
    history: BTreeMap<u64, Arc<[EcnSetting]>>,
    /// Kept generations never confirmed themselves: discarded by a revert, or passed over
    /// when a generation above them was confirmed.
    never_confirmed: BTreeSet<u64>,
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
            history,
            never_confirmed: BTreeSet::new(),
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

    /// Deadline of the pending unconfirmed stack, if any: the earliest of its generations'.
    pub fn deadline(&self) -> Option<Deadline> {
        self.earliest().map(|(_, d)| d)
    }

    /// The unconfirmed generation whose deadline is the stack's: the one a revert is for.
    pub fn due(&self) -> Option<u64> {
        self.earliest().map(|(g, _)| g)
    }

    fn earliest(&self) -> Option<(u64, Deadline)> {
        self.unconfirmed.iter().copied().min_by_key(|(_, d)| d.at)
    }

    /// Mark generations never confirmed themselves, those still kept (one the history
    /// forgot needs no mark, and would never be unmarked).
    fn mark_never_confirmed(&mut self, generations: impl IntoIterator<Item = u64>) {
        let kept: Vec<u64> = generations.into_iter().filter(|g| self.history.contains_key(g)).collect();
        self.never_confirmed.extend(kept);
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
    /// unconfirmed stack (whose deadline stays the earliest of its generations'); without, it
    /// is confirmed at once, with everything beneath it in effect.
    pub fn commit(&mut self, settings: Vec<EcnSetting>, deadline: Option<Deadline>) -> u64 {
        let g = self.push(settings);
        match deadline {
            Some(d) => self.unconfirmed.push((g, d)),
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
        if !self.unconfirmed.iter().any(|&(g, _)| g == generation) {
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
        let passed_over: Vec<u64> = self.unconfirmed.iter().map(|&(g, _)| g).filter(|&g| g < generation).collect();
        self.mark_never_confirmed(passed_over);
        self.unconfirmed.retain(|&(g, _)| g > generation);
        Ok(Confirmed { previous, changed, already: false })
    }

    /// The settings of `generation` if a rollback may return to it: kept, and confirmed once.
    pub fn known_good(&self, generation: u64) -> Result<Arc<[EcnSetting]>, LedgerError> {
        let settings = self.settings_of(generation)?;
        if self.unconfirmed.iter().any(|&(g, _)| g == generation) || self.never_confirmed.contains(&generation) {
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
        let discarded: Vec<u64> = self.unconfirmed.drain(..).map(|(g, _)| g).collect();
        self.mark_never_confirmed(discarded);
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
            self.never_confirmed.remove(&oldest);
        }
        self.current
    }

    /// Confirm `g`, the current generation; the unconfirmed beneath it were never confirmed
    /// themselves.
    fn settle(&mut self, g: u64) {
        self.confirmed = g;
        let beneath: Vec<u64> = self.unconfirmed.drain(..).map(|(g, _)| g).collect();
        self.mark_never_confirmed(beneath);
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

    /// A deadline's Unix time is the wall clock now plus the time left, whenever asked: one
    /// 10 s ahead reads 10 s ahead now, and one passed reads now, not the past.
    #[test]
    fn a_deadlines_unix_time_is_now_plus_the_time_left() {
        let now_ms = || crate::actuator::journal::unix_ms(std::time::SystemTime::now());
        let ahead = Deadline { at: Instant::now() + std::time::Duration::from_secs(10) };
        let (before, said, after) = (now_ms(), ahead.unix_ms(), now_ms());
        assert!(before + 9_900 <= said && said <= after + 10_000, "{before} {said} {after}");
        let passed = Deadline { at: Instant::now() };
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (before, said, after) = (now_ms(), passed.unix_ms(), now_ms());
        assert!(before <= said && said <= after, "{before} {said} {after}");
    }

    fn dl() -> Option<Deadline> {
        Some(Deadline { at: Instant::now() })
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
        // A stack settled by a confirmed apply: only the apply on top was confirmed, not the
        // settings of the generations beneath it on their own (a rollback used to accept them).
        let g5 = l.commit(l.staged(&[(0, s(500))]), dl());
        let g6 = l.commit(l.staged(&[(0, s(600))]), None);
        assert_eq!(l.known_good(g5), Err(LedgerError::NeverConfirmed { asked: g5, confirmed: g6 }));
        // Nor those beneath a generation confirmed above them.
        let g7 = l.commit(l.staged(&[(0, s(700))]), dl());
        let g8 = l.commit(l.staged(&[(0, s(800))]), dl());
        l.confirm(g8).unwrap();
        assert_eq!(l.known_good(g7), Err(LedgerError::NeverConfirmed { asked: g7, confirmed: g8 }));
        assert_eq!(&*l.known_good(g6).unwrap(), &[s(600)]);
    }

    /// A later apply does not move an earlier one's deadline: the stack reverts at the earliest
    /// (a 1 h apply on top of a 500 ms one kept it open for an hour, and a late Confirm kept
    /// it). Once the earlier is confirmed, the later's own deadline is the stack's.
    #[test]
    fn the_stack_reverts_at_its_earliest_deadline() {
        let now = Instant::now();
        let at = |ms: u64| Deadline { at: now + std::time::Duration::from_millis(ms) };
        let mut l = Ledger::starting_at(1, vec![s(100)]);
        let g2 = l.commit(l.staged(&[(0, s(200))]), Some(at(500)));
        l.commit(l.staged(&[(0, s(300))]), Some(at(3_600_000)));
        assert_eq!(l.deadline(), Some(at(500)));
        l.confirm(g2).unwrap();
        assert_eq!(l.deadline(), Some(at(3_600_000)));
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

    /// Generations the history forgot are not marked never confirmed when passed over: the
    /// marks stay within the history (they grew with every apply stacked past its bound).
    #[test]
    fn marks_stay_within_the_history() {
        let mut l = Ledger::starting_at(1, vec![s(100)]);
        for i in 0..(HISTORY_LIMIT as u64 + 10) {
            l.commit(vec![s(200 + i)], dl());
        }
        l.commit(vec![s(1)], None);
        assert!(l.never_confirmed.len() < HISTORY_LIMIT, "{}", l.never_confirmed.len());
        assert!(l.never_confirmed.iter().all(|g| l.history.contains_key(g)));
    }
}
