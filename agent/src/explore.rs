//! `explore[:SEED[:HOLD[:SHARE[:ANCHOR]]]]`: a safe exploratory behaviour for recording data to
//! learn from offline.
//!
//! Every queue holds a setting for `hold` decisions ([`DEFAULT_HOLD_DECISIONS`] unless
//! `explore:SEED:HOLD` says otherwise), then moves to another entry of ecn-tuner's action
//! template (the anchor model's, when anchored on one), drawn by a hash of (seed, queue,
//! epoch). SHARE of the draws return to an [`Anchor`] instead: a baseline's template entry, or
//! the decision of a learned policy. With a policy as the anchor the log looks like a
//! production fabric's, its policy deciding most of the time with excursions around it, and
//! that is the data a conservative offline learner can improve on (README "Offline learning").
//! Every setting it proposes is a template entry scaled to the port's speed and clamped into
//! the bounds, so it never leaves what a learned policy could choose; online, the guardrails
//! bound it further. The draws are stateless, so the same seed replays the same behaviour.

use crate::learn::trainer::REFERENCE_BASELINE;
use crate::learned::LearnedModel;
use ecn_env::rng::mix_hash;
use ecn_env::tuning::action::TEMPLATE_RATE_BPS;
use ecn_env::tuning::{ActionTemplate, Bounds, TemplateKind, TuningConfig};
use ecn_env::{Baseline, BitsPerSec, EcnSetting, Nanos};
use std::fmt;
use std::sync::Arc;

/// Decisions a queue keeps one setting before the next draw: long enough for DCQCN to react
/// and for the telemetry to show the effect.
pub const DEFAULT_HOLD_DECISIONS: u64 = 10;

/// Salts the hash that decides whether a draw returns to the anchor.
const ANCHOR_SALT: u64 = 0x5EED_A4C0_0000_0001;

/// Where anchored draws return to.
#[derive(Debug, Clone)]
pub enum Anchor {
    /// A REFERENCE.md §5 row, as its nearest template entry (what offline learning will label
    /// it as anyway).
    Baseline(Baseline),
    /// A learned policy's decision: exploring around the policy a fabric already runs.
    Model(Arc<LearnedModel>),
}

impl PartialEq for Anchor {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Anchor::Baseline(a), Anchor::Baseline(b)) => a == b,
            // One weights file however spelled, as for `model:` policies.
            (Anchor::Model(a), Anchor::Model(b)) => crate::policy::same_file(&a.path, &b.path),
            _ => false,
        }
    }
}

impl fmt::Display for Anchor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anchor::Baseline(b) => write!(f, "baseline:{}", b.name()),
            Anchor::Model(m) => write!(f, "model:{}", m.spec),
        }
    }
}

/// The exploratory behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct Explore {
    /// The seed of the draws.
    pub seed: u64,
    /// Decisions each draw is held for (at least 1).
    pub hold: u64,
    /// Fraction of draws that return to the anchor (0–1).
    pub anchor_share: f64,
    /// Where those draws go.
    pub anchor: Anchor,
    template: ActionTemplate,
    bounds: Bounds,
    /// The control interval, when set apart from the anchor's ([`Explore::at_interval`]).
    interval: Option<Nanos>,
}

impl Explore {
    /// Explore ecn-tuner's template within the default bounds.
    pub fn new(seed: u64) -> Self {
        Explore::with_hold(seed, DEFAULT_HOLD_DECISIONS)
    }

    /// Explore, holding each draw for `hold` decisions. Offline learning needs the logged
    /// action to vary within a state: with a long hold nearly every logged action is "keep the
    /// current setting", and the data says little about the others.
    pub fn with_hold(seed: u64, hold: u64) -> Self {
        Explore::anchored(seed, hold, 0.0, Anchor::Baseline(REFERENCE_BASELINE))
    }

    /// Explore, holding each draw for `hold` decisions, with `anchor_share` of the draws
    /// (clamped to 0–1) returning to `anchor`. Around a learned policy the draws come from that
    /// policy's own template and bounds, so that its decisions and the draws are entries of one
    /// action space (an ACC-style model's template is not ecn-tuner's).
    pub fn anchored(seed: u64, hold: u64, anchor_share: f64, anchor: Anchor) -> Self {
        let (template, bounds) = match &anchor {
            Anchor::Model(m) => (m.tuning().template, m.tuning().bounds),
            Anchor::Baseline(_) => (TemplateKind::Tuner, Bounds::default()),
        };
        Explore {
            seed,
            hold: hold.max(1),
            anchor_share: if anchor_share.is_nan() { 0.0 } else { anchor_share.clamp(0.0, 1.0) },
            anchor,
            template: ActionTemplate::new(template),
            bounds,
            interval: None,
        }
    }

    /// The same exploration, deciding (and so sampling the fabric) every `interval` instead of
    /// at its anchor's control interval: data for a model that will decide at `interval`.
    pub fn at_interval(mut self, interval: Nanos) -> Self {
        self.interval = Some(interval);
        self
    }

    /// The anchor's model, when exploring around a learned policy.
    pub fn model(&self) -> Option<&Arc<LearnedModel>> {
        match &self.anchor {
            Anchor::Model(m) => Some(m),
            Anchor::Baseline(_) => None,
        }
    }

    /// The tuning exploration runs at: its anchor model's (control interval, features), or the
    /// default one around a baseline; at [`Explore::at_interval`]'s interval if one is set.
    pub fn tuning(&self) -> TuningConfig {
        let tuning = self.model().map(|m| m.tuning().clone()).unwrap_or_default();
        TuningConfig { control_interval: self.interval.unwrap_or(tuning.control_interval), ..tuning }
    }

    /// The template entry of `queue` at decision number `decision`; `None` when the draw
    /// returns to the anchor.
    fn draw(&self, queue: usize, decision: u64) -> Option<usize> {
        let epoch = decision / self.hold;
        let key = ((queue as u64) << 40) ^ epoch;
        // A second, independent hash decides anchor or not, so the entry drawn is the one
        // `explore:SEED` without an anchor has always drawn.
        let unit = mix_hash(key, self.seed ^ ANCHOR_SALT) as f64 / (1u64 << 32) as f64;
        if unit < self.anchor_share {
            return None;
        }
        Some(mix_hash(key, self.seed) as usize % self.template.len())
    }

    /// The baseline anchor's template entry.
    fn baseline_entry(&self) -> usize {
        let b = match &self.anchor {
            Anchor::Baseline(b) => *b,
            Anchor::Model(_) => REFERENCE_BASELINE,
        };
        let link = BitsPerSec(TEMPLATE_RATE_BPS);
        self.template.nearest(&b.setting(link), link)
    }

    /// The template action of `queue` at decision number `decision`. `model_choice` is the
    /// anchor model's action for this queue, when there is one; without it an anchored draw
    /// goes to the reference baseline's entry.
    pub fn action(&self, queue: usize, decision: u64, model_choice: Option<usize>) -> usize {
        match self.draw(queue, decision) {
            Some(a) => a,
            None => match (&self.anchor, model_choice) {
                (Anchor::Model(_), Some(a)) => a,
                _ => self.baseline_entry(),
            },
        }
    }

    /// The setting of `queue` (on a port of speed `link`) at decision number `decision`.
    /// `model_choice` is the anchor model's proposal; an anchored draw without one is `None`
    /// (no history yet: the caller's guardrails fall back).
    pub fn setting(
        &self,
        queue: usize,
        decision: u64,
        link: BitsPerSec,
        model_choice: Option<EcnSetting>,
    ) -> Option<EcnSetting> {
        match (self.draw(queue, decision), &self.anchor) {
            (Some(a), _) => self.template.setting(a, link, &self.bounds),
            (None, Anchor::Model(_)) => model_choice,
            (None, Anchor::Baseline(_)) => self.template.setting(self.baseline_entry(), link, &self.bounds),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explores_the_whole_template_in_bounds_and_holds_each_draw() {
        let e = Explore::new(7);
        let link = BitsPerSec(100_000_000_000);
        let mut seen = std::collections::HashSet::new();
        for q in 0..32 {
            for d in 0..400 {
                let s = e.setting(q, d, link, None).expect("a baseline anchor always proposes");
                assert!(Bounds::default().contains(&s), "{s:?}");
                assert_eq!(
                    e.action(q, d, None),
                    e.action(q, d - d % DEFAULT_HOLD_DECISIONS, None),
                    "held for a whole epoch"
                );
                seen.insert(e.action(q, d, None));
            }
        }
        assert_eq!(seen.len(), ActionTemplate::new(TemplateKind::Tuner).len());
        assert_eq!(Explore::new(7).action(3, 55, None), e.action(3, 55, None));
        let step = DEFAULT_HOLD_DECISIONS;
        assert!((0..50).any(|d| Explore::new(8).action(3, d * step, None) != e.action(3, d * step, None)));
        let every = Explore::with_hold(7, 1);
        assert!(
            (0..50).filter(|&d| every.action(3, d, None) != every.action(3, d + 1, None)).count() > 40,
            "redrawn every decision"
        );
    }

    #[test]
    fn an_anchor_share_returns_to_the_reference_entry_that_often_and_changes_nothing_else() {
        let plain = Explore::with_hold(7, 1);
        let anchored = Explore::anchored(7, 1, 0.5, Anchor::Baseline(REFERENCE_BASELINE));
        let template = ActionTemplate::new(TemplateKind::Tuner);
        let link = BitsPerSec(TEMPLATE_RATE_BPS);
        let anchor = template.nearest(&REFERENCE_BASELINE.setting(link), link);
        let draws = 20_000;
        let at_anchor = (0..draws).filter(|&d| anchored.action(5, d, None) == anchor).count() as f64 / draws as f64;
        // Half the draws, plus a uniform draw's 1-in-54 chance of landing there anyway.
        assert!((at_anchor - (0.5 + 0.5 / 54.0)).abs() < 0.02, "{at_anchor}");
        let a = |d| anchored.action(5, d, None);
        assert!((0..draws).all(|d| a(d) == anchor || a(d) == plain.action(5, d, None)));
        // A model anchor's choice is taken exactly at the anchored draws; without a choice
        // (no history yet) the setting is left to the guardrails.
        let model = Arc::new(LearnedModel::load("default", "model:").expect("shipped model"));
        let around = Explore::anchored(7, 1, 0.5, Anchor::Model(model));
        let choice = (anchor + 1) % template.len();
        for d in 0..200 {
            match anchored.draw(5, d) {
                None => {
                    assert_eq!(around.action(5, d, Some(choice)), choice);
                    assert_eq!(around.setting(5, d, link, None), None);
                }
                Some(a) => assert_eq!(around.action(5, d, Some(choice)), a),
            }
        }
        let share = |s| Explore::anchored(7, 1, s, Anchor::Baseline(REFERENCE_BASELINE));
        assert_eq!(share(0.0), plain);
        assert_eq!(share(f64::NAN).anchor_share, 0.0);
    }

    /// Around an ACC-style model, the draws are entries of the model's own template (72
    /// settings, not ecn-tuner's 54), so the closed loop reads every action in one space.
    #[test]
    fn around_a_model_the_draws_come_from_its_template() {
        let model = Arc::new(LearnedModel::load("acc-baseline", "model:").expect("shipped model"));
        assert_eq!(model.tuning().template, TemplateKind::Acc);
        let around = Explore::anchored(7, 1, 0.0, Anchor::Model(model));
        let seen: std::collections::HashSet<usize> = (0..20_000).map(|d| around.action(3, d, None)).collect();
        assert_eq!(seen.len(), ActionTemplate::new(TemplateKind::Acc).len());
        let link = BitsPerSec(TEMPLATE_RATE_BPS);
        let acc = ActionTemplate::new(TemplateKind::Acc);
        for d in 0..100 {
            let a = around.action(3, d, None);
            assert_eq!(around.setting(3, d, link, None), acc.setting(a, link, &around.bounds));
        }
    }
}
