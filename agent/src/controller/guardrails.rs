//! Guardrails: what stands between a policy's proposal and a switch.
//!
//! Every proposal passes through [`Guardrails::check`], whatever produced it. In order:
//! 1. a non-finite or invalid proposal, telemetry that is stale, missing or invalid, or a
//!    setting in effect that is not valid (a NaN Pmax read back from the actuator), falls back
//!    to the queue's baseline setting (known good), itself clamped as in step 4;
//! 2. a queue changed less than `min_dwell` ago keeps its setting;
//! 3. each threshold moves at most `max_step_ratio` times up or down per step, Pmax at most
//!    `max_pmax_step`;
//! 4. the result is clamped into the actuator's bounds, below the PFC XOFF level, with
//!    Kmin < Kmax, rounded to the granularity;
//! 5. a budget of `max_changes_per_minute` queue changes, shared by every queue of every
//!    target of the process ([`ChangeBudget`]), keeps the rest unchanged. A fallback spends
//!    it too, but is not held back by it: a budget spent on the policy's changes must not
//!    leave a queue whose telemetry went stale on a learned setting for up to a minute. A
//!    fallback the actuator refused ([`QueueContext::fallback_refused`]) waits for room like
//!    any change, so that a device refusing every write is not sent one every round.

use ecn_env::EcnSetting;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The window of the change budget (`max_changes_per_minute`), and how long a fallback the
/// actuator refused waits for room in it ([`QueueContext::fallback_refused`]).
pub const BUDGET_WINDOW: Duration = Duration::from_secs(60);

/// Limits on what a policy may do.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardrailConfig {
    /// Smallest Kmin allowed.
    pub kmin_min_bytes: u64,
    /// Largest Kmax allowed.
    pub kmax_max_bytes: u64,
    /// Pmax range.
    pub pmax_min: f64,
    /// Pmax range.
    pub pmax_max: f64,
    /// Thresholds are multiples of this.
    pub granularity_bytes: u64,
    /// A threshold may be at most multiplied or divided by this per step.
    pub max_step_ratio: f64,
    /// Pmax may move at most this much per step.
    pub max_pmax_step: f64,
    /// Minimum time between two changes of one queue.
    pub min_dwell: Duration,
    /// Most queue changes per minute, all queues together.
    pub max_changes_per_minute: u32,
    /// Telemetry older than this is stale: by arrival, or by how far it lags the fabric.
    pub stale_after: Duration,
}

impl GuardrailConfig {
    /// These limits tightened to an actuator's bounds, or why the result leaves no valid
    /// setting: the bounds come from a remote peer, and the guardrails' clamps assume a
    /// non-empty range.
    pub fn tightened(&self, bounds: Option<&ecn_proto::v1::Bounds>) -> Result<GuardrailConfig, String> {
        let mut g = self.clone();
        if let Some(b) = bounds {
            for (name, v) in [("pmax_min", b.pmax_min), ("pmax_max", b.pmax_max)] {
                if !v.is_finite() {
                    return Err(format!("its bounds' {name} is {v}"));
                }
            }
            g.kmin_min_bytes = g.kmin_min_bytes.max(b.kmin_min_bytes);
            if b.kmax_max_bytes > 0 {
                g.kmax_max_bytes = g.kmax_max_bytes.min(b.kmax_max_bytes);
            }
            g.pmax_min = g.pmax_min.max(b.pmax_min);
            if b.pmax_max > 0.0 {
                g.pmax_max = g.pmax_max.min(b.pmax_max);
            }
            g.granularity_bytes = g.granularity_bytes.max(b.granularity_bytes);
        }
        if g.pmax_min > g.pmax_max {
            return Err(format!("pmax_min {} is above pmax_max {}", g.pmax_min, g.pmax_max));
        }
        // Room for Kmin < Kmax on the granularity grid.
        let room = g.kmin_min_bytes.checked_add(g.granularity_bytes.max(1).saturating_mul(2));
        if room.is_none_or(|r| r > g.kmax_max_bytes) {
            return Err(format!(
                "no valid setting fits: kmin_min_bytes {}, kmax_max_bytes {}, granularity_bytes {}",
                g.kmin_min_bytes, g.kmax_max_bytes, g.granularity_bytes
            ));
        }
        Ok(g)
    }
}

impl Default for GuardrailConfig {
    fn default() -> Self {
        GuardrailConfig {
            kmin_min_bytes: 1_000,
            kmax_max_bytes: 64_000_000,
            pmax_min: 0.0,
            pmax_max: 1.0,
            granularity_bytes: 1,
            max_step_ratio: 2.0,
            max_pmax_step: 0.25,
            min_dwell: Duration::from_secs(1),
            max_changes_per_minute: 600,
            stale_after: Duration::from_secs(3),
        }
    }
}

/// Why a guardrail changed or blocked a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Clamp {
    /// Telemetry stale or missing: baseline.
    StaleTelemetry,
    /// Telemetry invalid (NaN, negative, inconsistent): baseline.
    InvalidTelemetry,
    /// The policy's output was not a finite, valid setting: baseline.
    InvalidProposal,
    /// The setting in effect is not valid (e.g. a NaN Pmax read back): baseline.
    InvalidCurrent,
    /// Changed too recently: kept.
    Dwell,
    /// Moved further than one step allows: limited.
    Step,
    /// Outside the bounds or above the XOFF level: clamped.
    Bounds,
    /// Change budget exhausted: kept.
    RateLimit,
}

impl Clamp {
    /// Every guardrail.
    pub const ALL: [Clamp; 8] = [
        Clamp::StaleTelemetry,
        Clamp::InvalidTelemetry,
        Clamp::InvalidProposal,
        Clamp::InvalidCurrent,
        Clamp::Dwell,
        Clamp::Step,
        Clamp::Bounds,
        Clamp::RateLimit,
    ];

    /// Label for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Clamp::StaleTelemetry => "stale_telemetry",
            Clamp::InvalidTelemetry => "invalid_telemetry",
            Clamp::InvalidProposal => "invalid_proposal",
            Clamp::InvalidCurrent => "invalid_current",
            Clamp::Dwell => "dwell",
            Clamp::Step => "step",
            Clamp::Bounds => "bounds",
            Clamp::RateLimit => "rate_limit",
        }
    }
}

/// What the guardrails know about one queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueContext {
    /// Setting in effect.
    pub current: EcnSetting,
    /// Known-good fallback.
    pub baseline: EcnSetting,
    /// PFC XOFF level of the queue, if known: Kmax stays below it.
    pub xoff_bytes: Option<u64>,
    /// When the queue was last changed.
    pub last_change: Option<Instant>,
    /// Telemetry state for this queue.
    pub telemetry: TelemetryHealth,
    /// The actuator refused a fallback of this queue within the last [`BUDGET_WINDOW`]: the
    /// next one waits for room in the budget.
    pub fallback_refused: bool,
}

/// Whether the telemetry behind a decision can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TelemetryHealth {
    /// Fresh and valid.
    Good,
    /// Older than `stale_after`, frozen, or absent.
    Stale,
    /// Present but impossible (NaN, negative, max below average ...).
    Invalid,
}

/// The guardrails' verdict on one proposal.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The setting that may be applied.
    pub setting: EcnSetting,
    /// Every guardrail that intervened.
    pub clamps: Vec<Clamp>,
    /// The change was counted against the budget as it was allowed (see
    /// [`Guardrails::refund`]).
    pub spent: bool,
}

/// Whether a change may go over the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spend {
    /// A policy's change: held back once the budget is spent.
    WithinBudget,
    /// A fallback to the baseline: counted, never held back.
    EvenOverBudget,
}

/// Stateful guardrails (the change budget lives here).
#[derive(Debug)]
pub struct Guardrails {
    cfg: GuardrailConfig,
    budget: ChangeBudget,
}

/// The queue changes of the last minute, shared by the control loops of one process (one per
/// `--target`), so that `max_changes_per_minute` holds for all of them together.
#[derive(Debug, Clone, Default)]
pub struct ChangeBudget(Arc<BudgetState>);

#[derive(Debug, Default)]
struct BudgetState {
    recent: Mutex<VecDeque<Instant>>,
}

impl ChangeBudget {
    fn recent(&self) -> MutexGuard<'_, VecDeque<Instant>> {
        self.0.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Guardrails {
    /// Guardrails with the given limits and a change budget of their own.
    pub fn new(cfg: GuardrailConfig) -> Self {
        Guardrails::sharing(cfg, ChangeBudget::default())
    }

    /// Guardrails with the given limits, spending `budget` with whoever else holds it.
    pub fn sharing(cfg: GuardrailConfig, budget: ChangeBudget) -> Self {
        Guardrails { cfg, budget }
    }

    /// Check one proposal. `now` is injected so that tests control time. A change it allows is
    /// counted against the budget at once, in the same step as the check, so that two loops
    /// sharing the budget cannot both take its last room; call [`Guardrails::refund`] for a
    /// verdict that is not applied after all.
    pub fn check(&mut self, proposed: Option<EcnSetting>, q: &QueueContext, now: Instant) -> Verdict {
        let mut clamps = Vec::new();
        let fallback = match (q.telemetry, proposed) {
            (TelemetryHealth::Stale, _) => Some(Clamp::StaleTelemetry),
            (TelemetryHealth::Invalid, _) => Some(Clamp::InvalidTelemetry),
            (_, None) => Some(Clamp::InvalidProposal),
            (_, Some(p)) if p.validate().is_err() || !p.pmax.is_finite() => Some(Clamp::InvalidProposal),
            // Steps are measured from the current setting, which must be a number to measure from.
            _ if q.current.validate().is_err() => Some(Clamp::InvalidCurrent),
            _ => None,
        };
        if let Some(why) = fallback {
            clamps.push(why);
            let setting = self.clamp_bounds(q.baseline, q.xoff_bytes, &mut clamps);
            let how = if q.fallback_refused { Spend::WithinBudget } else { Spend::EvenOverBudget };
            return self.spend(setting, q, now, clamps, how);
        }
        let proposed = proposed.expect("checked above");
        if proposed == q.current {
            return Verdict { setting: proposed, clamps, spent: false };
        }
        if let Some(t) = q.last_change {
            if now.saturating_duration_since(t) < self.cfg.min_dwell {
                clamps.push(Clamp::Dwell);
                return Verdict { setting: q.current, clamps, spent: false };
            }
        }
        let stepped = self.limit_step(proposed, q.current, &mut clamps);
        let bounded = self.clamp_bounds(stepped, q.xoff_bytes, &mut clamps);
        self.spend(bounded, q, now, clamps, Spend::WithinBudget)
    }

    /// `baseline` inside the bounds and below `xoff`: what a fallback or the kill switch
    /// writes, so that the actuator cannot refuse it.
    pub fn safe_baseline(&self, baseline: EcnSetting, xoff: Option<u64>) -> EcnSetting {
        self.clamp_bounds(baseline, xoff, &mut Vec::new())
    }

    /// Give back the budget a verdict spent (`now` as given to [`Guardrails::check`]): its
    /// change is not applied after all.
    pub fn refund(&mut self, v: &Verdict, now: Instant) {
        if !v.spent {
            return;
        }
        let mut recent = self.budget.recent();
        if let Some(i) = recent.iter().rposition(|t| *t == now) {
            recent.remove(i);
        }
    }

    fn spend(
        &mut self,
        setting: EcnSetting,
        q: &QueueContext,
        now: Instant,
        mut clamps: Vec<Clamp>,
        how: Spend,
    ) -> Verdict {
        if setting == q.current {
            return Verdict { setting, clamps, spent: false };
        }
        let mut recent = self.budget.recent();
        while recent.front().is_some_and(|t| now.saturating_duration_since(*t) >= BUDGET_WINDOW) {
            recent.pop_front();
        }
        if recent.len() as u32 >= self.cfg.max_changes_per_minute && how == Spend::WithinBudget {
            clamps.push(Clamp::RateLimit);
            return Verdict { setting: q.current, clamps, spent: false };
        }
        recent.push_back(now);
        Verdict { setting, clamps, spent: true }
    }

    fn limit_step(&self, p: EcnSetting, cur: EcnSetting, clamps: &mut Vec<Clamp>) -> EcnSetting {
        let r = self.cfg.max_step_ratio.max(1.0);
        let g = self.cfg.granularity_bytes.max(1);
        let step = |want: u64, have: u64| -> u64 {
            let (lo, hi) = ((have as f64 / r).ceil() as u64, (have as f64 * r).floor() as u64);
            // The limits on the granularity grid, inward, so that rounding into the bounds
            // cannot carry a threshold past the ratio; where the grid has no point within
            // them, the bounds' rounding decides.
            let (grid_lo, grid_hi) = (lo.div_ceil(g) * g, hi / g * g);
            let (lo, hi) = if grid_lo <= grid_hi { (grid_lo, grid_hi) } else { (lo, hi) };
            want.clamp(lo.max(1), hi.max(1))
        };
        let (pmax_lo, pmax_hi) = (cur.pmax - self.cfg.max_pmax_step, cur.pmax + self.cfg.max_pmax_step);
        let pmax = if (pmax_lo..=pmax_hi).contains(&p.pmax) {
            p.pmax
        } else {
            // A limit is a sum in binary floating point (0.05 + 0.25 = 0.30000000000000004),
            // which would reach logs, the journal and the switch as such: to 10⁻⁹.
            (p.pmax.clamp(pmax_lo, pmax_hi) * 1e9).round() / 1e9
        };
        let out = EcnSetting {
            kmin_bytes: step(p.kmin_bytes, cur.kmin_bytes),
            kmax_bytes: step(p.kmax_bytes, cur.kmax_bytes),
            pmax,
        };
        if out != p {
            clamps.push(Clamp::Step);
        }
        out
    }

    fn clamp_bounds(&self, s: EcnSetting, xoff: Option<u64>, clamps: &mut Vec<Clamp>) -> EcnSetting {
        let g = self.cfg.granularity_bytes.max(1);
        let round_down = |x: u64| x / g * g;
        let round_up = |x: u64| x.div_ceil(g) * g;
        // Kmax strictly below XOFF (and the configured maximum), on the granularity grid.
        let mut kmax_cap = self.cfg.kmax_max_bytes;
        if let Some(x) = xoff.filter(|&x| x > 0) {
            kmax_cap = kmax_cap.min(x.saturating_sub(1));
        }
        let kmax_cap = round_down(kmax_cap).max(round_up(self.cfg.kmin_min_bytes) + g);
        let kmin_floor = round_up(self.cfg.kmin_min_bytes);
        let kmax = round_down(s.kmax_bytes.min(kmax_cap)).max(kmin_floor + g);
        let kmin = round_down(s.kmin_bytes).clamp(kmin_floor, kmax - g);
        let pmax =
            if s.pmax.is_finite() { s.pmax.clamp(self.cfg.pmax_min, self.cfg.pmax_max) } else { self.cfg.pmax_min };
        let out = EcnSetting { kmin_bytes: kmin, kmax_bytes: kmax, pmax };
        if out != s {
            clamps.push(Clamp::Bounds);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(kmin: u64, kmax: u64, pmax: f64) -> EcnSetting {
        EcnSetting { kmin_bytes: kmin, kmax_bytes: kmax, pmax }
    }

    fn ctx(current: EcnSetting) -> QueueContext {
        QueueContext {
            current,
            baseline: s(400_000, 1_600_000, 0.2),
            xoff_bytes: Some(4_000_000),
            last_change: None,
            telemetry: TelemetryHealth::Good,
            fallback_refused: false,
        }
    }

    #[test]
    fn steps_are_limited() {
        let mut g = Guardrails::new(GuardrailConfig::default());
        let v = g.check(Some(s(10_000, 100_000, 0.9)), &ctx(s(400_000, 1_600_000, 0.2)), Instant::now());
        assert_eq!(v.setting, s(200_000, 800_000, 0.45));
        assert_eq!(v.clamps, vec![Clamp::Step]);
    }

    /// A proposal that differs from the current setting in one field only is a change: Kmax
    /// alone, Kmin alone or Pmax alone. The property test below never proposes a field equal to
    /// the current one, so a check that compared some fields only went unnoticed.
    #[test]
    fn a_change_of_one_field_is_a_change() {
        let cur = s(400_000, 1_600_000, 0.2);
        for want in [s(400_000, 1_200_000, 0.2), s(300_000, 1_600_000, 0.2), s(400_000, 1_600_000, 0.3)] {
            let mut g = Guardrails::new(GuardrailConfig::default());
            let v = g.check(Some(want), &ctx(cur), Instant::now());
            assert_eq!((v.setting, v.spent), (want, true), "{:?}", v.clamps);
        }
        let mut g = Guardrails::new(GuardrailConfig::default());
        let v = g.check(Some(cur), &ctx(cur), Instant::now());
        assert_eq!((v.setting, v.spent, v.clamps), (cur, false, vec![]));
    }

    /// On a coarse grid the step limit is honoured on the grid, not broken by rounding into
    /// the bounds afterwards: 3000 B may go down to 1500 B at most, so 2000 B, not 1000 B.
    #[test]
    fn steps_are_limited_on_the_granularity_grid() {
        let cfg = GuardrailConfig { granularity_bytes: 1000, ..Default::default() };
        let mut g = Guardrails::new(cfg);
        let v = g.check(Some(s(1_000, 2_000, 0.2)), &ctx(s(3_000, 5_000, 0.2)), Instant::now());
        assert_eq!(v.setting, s(2_000, 3_000, 0.2), "{:?}", v.clamps);
        let v = g.check(Some(s(90_000, 190_000, 0.2)), &ctx(s(3_000, 5_000, 0.2)), Instant::now());
        assert_eq!(v.setting, s(6_000, 10_000, 0.2));
    }

    /// Two control loops (two targets) spend one budget: the limit is per process.
    #[test]
    fn guardrails_sharing_a_budget_share_its_limit() {
        let cfg = GuardrailConfig { max_changes_per_minute: 1, ..Default::default() };
        let budget = ChangeBudget::default();
        let (mut a, mut b) = (Guardrails::sharing(cfg.clone(), budget.clone()), Guardrails::sharing(cfg, budget));
        let (now, q, want) = (Instant::now(), ctx(s(400_000, 1_600_000, 0.2)), s(300_000, 1_600_000, 0.2));
        let spent = a.check(Some(want), &q, now);
        assert_eq!(spent.setting, want);
        let v = b.check(Some(want), &q, now);
        assert_eq!((v.setting, &v.clamps), (q.current, &vec![Clamp::RateLimit]));
        // Not applied after all: the room is back, for either loop.
        a.refund(&spent, now);
        a.refund(&v, now);
        assert_eq!(b.check(Some(want), &q, now).setting, want);
        // Guardrails of their own do not.
        let mut c = Guardrails::new(GuardrailConfig { max_changes_per_minute: 1, ..Default::default() });
        assert_eq!(c.check(Some(want), &q, now).setting, want);
    }

    #[test]
    fn bad_inputs_fall_back_to_baseline() {
        let mut g = Guardrails::new(GuardrailConfig::default());
        let cur = s(50_000, 100_000, 0.5);
        for (prop, tel, why) in [
            (Some(s(1, 2, f64::NAN)), TelemetryHealth::Good, Clamp::InvalidProposal),
            (None, TelemetryHealth::Good, Clamp::InvalidProposal),
            (Some(s(60_000, 120_000, 0.5)), TelemetryHealth::Stale, Clamp::StaleTelemetry),
            (Some(s(60_000, 120_000, 0.5)), TelemetryHealth::Invalid, Clamp::InvalidTelemetry),
        ] {
            let mut q = ctx(cur);
            q.telemetry = tel;
            let v = g.check(prop, &q, Instant::now());
            assert_eq!(v.setting, q.baseline);
            assert_eq!(v.clamps, vec![why]);
        }
    }

    #[test]
    fn dwell_and_rate_limit_keep_the_current_setting() {
        let cfg = GuardrailConfig { max_changes_per_minute: 1, ..Default::default() };
        let mut g = Guardrails::new(cfg);
        let now = Instant::now();
        let mut q = ctx(s(400_000, 1_600_000, 0.2));
        q.last_change = Some(now);
        let v = g.check(Some(s(300_000, 1_600_000, 0.2)), &q, now);
        assert_eq!((v.setting, v.clamps), (q.current, vec![Clamp::Dwell]));
        q.last_change = None;
        assert!(g.check(Some(s(300_000, 1_600_000, 0.2)), &q, now).spent);
        let v = g.check(Some(s(300_000, 1_600_000, 0.2)), &q, now);
        assert_eq!((v.setting, v.clamps), (q.current, vec![Clamp::RateLimit]));
        let v = g.check(Some(s(300_000, 1_600_000, 0.2)), &q, now + Duration::from_secs(61));
        assert_eq!(v.setting, s(300_000, 1_600_000, 0.2));
    }

    /// A queue whose telemetry goes stale falls back to the baseline even when the policy's
    /// changes have spent the budget (it was held on its learned setting, up to a minute),
    /// and the fallback counts: the policy's next change waits for room. A fallback the
    /// actuator refused waits for room too (else a device refusing every write got one every
    /// round).
    #[test]
    fn a_fallback_is_not_held_back_by_the_budget_unless_one_was_refused() {
        let mut g = Guardrails::new(GuardrailConfig { max_changes_per_minute: 1, ..Default::default() });
        let now = Instant::now();
        let q = ctx(s(300_000, 1_600_000, 0.2));
        assert!(g.check(Some(s(200_000, 1_600_000, 0.2)), &q, now).spent);
        let stale = QueueContext { telemetry: TelemetryHealth::Stale, ..q.clone() };
        let v = g.check(Some(s(200_000, 1_600_000, 0.2)), &stale, now);
        assert_eq!((v.setting, &v.clamps, v.spent), (q.baseline, &vec![Clamp::StaleTelemetry], true));
        let fresh = ctx(q.baseline);
        g.refund(&v, now);
        assert!(g.check(Some(s(300_000, 1_600_000, 0.2)), &fresh, now).clamps.contains(&Clamp::RateLimit));
        let v = g.check(Some(s(300_000, 1_600_000, 0.2)), &stale, now + Duration::from_secs(1));
        assert_eq!(v.setting, q.baseline);
        let v = g.check(Some(s(300_000, 1_600_000, 0.2)), &fresh, now + Duration::from_secs(1));
        assert_eq!((v.setting, v.clamps), (fresh.current, vec![Clamp::RateLimit]));
        let refused = QueueContext { fallback_refused: true, ..stale };
        let v = g.check(Some(s(300_000, 1_600_000, 0.2)), &refused, now + Duration::from_secs(1));
        assert_eq!((v.setting, v.clamps), (refused.current, vec![Clamp::StaleTelemetry, Clamp::RateLimit]));
    }

    proptest::proptest! {
        /// Whatever a policy outputs (NaN, zero, huge, inverted) and whatever the state, the
        /// verdict is a valid setting inside the bounds and below the XOFF level.
        #[test]
        fn verdicts_never_leave_the_bounds(
            kmin in proptest::prelude::any::<u64>(),
            kmax in proptest::prelude::any::<u64>(),
            pmax in proptest::prelude::any::<f64>(),
            cur_kmin in 1_000u64..10_000_000,
            cur_span in 1_000u64..10_000_000,
            xoff in proptest::option::of(10_000u64..100_000_000),
            tel in 0u8..3,
            granularity in 1u64..4096,
        ) {
            let cfg = GuardrailConfig { granularity_bytes: granularity, ..Default::default() };
            let mut g = Guardrails::new(cfg.clone());
            let mut q = ctx(s(cur_kmin, cur_kmin + cur_span, 0.3));
            q.xoff_bytes = xoff;
            q.telemetry = [TelemetryHealth::Good, TelemetryHealth::Stale, TelemetryHealth::Invalid][tel as usize];
            let v = g.check(Some(s(kmin, kmax, pmax)), &q, Instant::now());
            let out = v.setting;
            if out != q.current {
                proptest::prop_assert!(out.validate().is_ok(), "{out:?}");
                proptest::prop_assert!(out.kmin_bytes >= cfg.kmin_min_bytes && out.kmax_bytes <= cfg.kmax_max_bytes);
                proptest::prop_assert!(out.kmin_bytes.is_multiple_of(granularity) && out.kmax_bytes.is_multiple_of(granularity));
                if let Some(x) = xoff {
                    proptest::prop_assert!(out.kmax_bytes < x.max(cfg.kmin_min_bytes + 2 * granularity), "{out:?} xoff {x}");
                }
            }
            // From a current setting on the grid, a step that no bound or Kmin < Kmax forces
            // stays within the ratio of 2, rounding to the grid included.
            let grid = |x: u64| x.div_ceil(granularity) * granularity;
            let mut on_grid = ctx(s(grid(cur_kmin), grid(cur_kmin + cur_span) + granularity, 0.3));
            on_grid.xoff_bytes = xoff;
            // Proposals near the current setting, up or down, where the step limit bites.
            let (ck, cx) = (on_grid.current.kmin_bytes, on_grid.current.kmax_bytes);
            let v = g.check(Some(s(kmin % (4 * ck + 1), kmax % (4 * cx + 1), 0.3)), &on_grid, Instant::now());
            let cap = xoff.map_or(cfg.kmax_max_bytes, |x| cfg.kmax_max_bytes.min(x - 1)) / granularity * granularity;
            let (new, old) = (v.setting, on_grid.current);
            let free = new.kmin_bytes > grid(cfg.kmin_min_bytes) && new.kmax_bytes < cap
                && new.kmin_bytes + granularity < new.kmax_bytes;
            if free && v.clamps.iter().all(|c| matches!(c, Clamp::Step | Clamp::Bounds)) {
                for (n, o) in [(new.kmin_bytes, old.kmin_bytes), (new.kmax_bytes, old.kmax_bytes)] {
                    proptest::prop_assert!(n * 2 >= o && n <= o * 2, "{new:?} from {old:?}: {:?}", v.clamps);
                }
            }
        }
    }

    /// A Pmax held at the step limit is the decimal it means, not the sum's binary residue.
    #[test]
    fn a_pmax_at_the_step_limit_is_a_round_number() {
        let mut g = Guardrails::new(GuardrailConfig::default());
        let q = ctx(s(400_000, 1_600_000, 0.05));
        let v = g.check(Some(s(400_000, 1_600_000, 1.0)), &q, Instant::now());
        assert_eq!(v.setting.pmax, 0.3, "{v:?}");
        assert_eq!(v.clamps, vec![Clamp::Step]);
    }

    #[test]
    fn a_nan_current_pmax_falls_back_to_the_baseline() {
        let mut g = Guardrails::new(GuardrailConfig::default());
        let q = ctx(s(400_000, 1_600_000, f64::NAN));
        let v = g.check(Some(s(300_000, 1_200_000, 0.3)), &q, Instant::now());
        assert_eq!((v.setting, v.clamps), (q.baseline, vec![Clamp::InvalidCurrent]));
    }

    #[test]
    fn bounds_that_leave_no_valid_setting_are_refused() {
        let b = |pmax_min: f64, pmax_max: f64, kmin_min_bytes: u64| ecn_proto::v1::Bounds {
            kmin_min_bytes,
            kmax_max_bytes: 10_000_000,
            pmax_min,
            pmax_max,
            granularity_bytes: 1,
        };
        let cfg = GuardrailConfig::default();
        let ok = cfg.tightened(Some(&b(0.1, 0.5, 2_000))).unwrap();
        assert_eq!((ok.pmax_min, ok.pmax_max, ok.kmin_min_bytes, ok.kmax_max_bytes), (0.1, 0.5, 2_000, 10_000_000));
        let inverted = cfg.tightened(Some(&b(0.9, 0.5, 2_000))).unwrap_err();
        assert_eq!(inverted, "pmax_min 0.9 is above pmax_max 0.5");
        assert_eq!(cfg.tightened(Some(&b(f64::NAN, 0.5, 2_000))).unwrap_err(), "its bounds' pmax_min is NaN");
        assert!(cfg.tightened(Some(&b(0.0, 1.0, u64::MAX))).unwrap_err().contains("no valid setting fits"));
    }

    #[test]
    fn kmax_stays_below_xoff() {
        let mut g = Guardrails::new(GuardrailConfig { max_step_ratio: 100.0, ..Default::default() });
        let v = g.check(Some(s(3_000_000, 8_000_000, 0.2)), &ctx(s(2_000_000, 3_000_000, 0.2)), Instant::now());
        assert!(v.setting.kmax_bytes < 4_000_000 && v.setting.kmin_bytes < v.setting.kmax_bytes, "{v:?}");
        assert!(v.clamps.contains(&Clamp::Bounds));
    }
}
