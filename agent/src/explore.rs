//! `explore[:SEED]`: a safe exploratory behaviour for recording data to learn from offline.
//!
//! Every queue holds a setting for `hold` decisions ([`DEFAULT_HOLD_DECISIONS`] unless
//! `explore:SEED:HOLD` says otherwise), then moves to another entry of ecn-tuner's action
//! template, drawn by a hash of (seed, queue, epoch). Every setting it
//! proposes is a template entry scaled to the port's speed and clamped into the bounds, so it
//! never leaves what a learned policy could choose; online, the guardrails bound it further.
//! It is stateless, so the same seed replays the same behaviour.

use ecn_env::rng::mix_hash;
use ecn_env::tuning::{ActionTemplate, Bounds, TemplateKind};
use ecn_env::{BitsPerSec, EcnSetting};

/// Decisions a queue keeps one setting before the next draw: long enough for DCQCN to react
/// and for the telemetry to show the effect.
pub const DEFAULT_HOLD_DECISIONS: u64 = 10;

/// The exploratory behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct Explore {
    /// The seed of the draws.
    pub seed: u64,
    /// Decisions each draw is held for (at least 1).
    pub hold: u64,
    template: ActionTemplate,
    bounds: Bounds,
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
        Explore {
            seed,
            hold: hold.max(1),
            template: ActionTemplate::new(TemplateKind::Tuner),
            bounds: Bounds::default(),
        }
    }

    /// The template action of `queue` at decision number `decision`.
    pub fn action(&self, queue: usize, decision: u64) -> usize {
        let epoch = decision / self.hold;
        let key = ((queue as u64) << 40) ^ epoch;
        mix_hash(key, self.seed) as usize % self.template.len()
    }

    /// The setting of `queue` (on a port of speed `link`) at decision number `decision`.
    pub fn setting(&self, queue: usize, decision: u64, link: BitsPerSec) -> EcnSetting {
        self.template.setting(self.action(queue, decision), link, &self.bounds).expect("action is in range")
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
                let s = e.setting(q, d, link);
                assert!(Bounds::default().contains(&s), "{s:?}");
                assert_eq!(e.action(q, d), e.action(q, d - d % DEFAULT_HOLD_DECISIONS), "held for a whole epoch");
                seen.insert(e.action(q, d));
            }
        }
        assert_eq!(seen.len(), ActionTemplate::new(TemplateKind::Tuner).len());
        assert_eq!(Explore::new(7).action(3, 55), e.action(3, 55));
        let step = DEFAULT_HOLD_DECISIONS;
        assert!((0..50).any(|d| Explore::new(8).action(3, d * step) != e.action(3, d * step)));
        let every = Explore::with_hold(7, 1);
        assert!(
            (0..50).filter(|&d| every.action(3, d) != every.action(3, d + 1)).count() > 40,
            "redrawn every decision"
        );
    }
}
