//! Actions: a discrete template of (Kmin, Kmax, Pmax) settings, scaled to each port's speed
//! and clamped into configurable bounds.
//!
//! Why a template of absolute settings rather than relative moves: one decision can reach
//! any setting, so a policy reacts to an incast within one control interval instead of
//! walking there step by step; the Q-network learns "which setting suits this state", which
//! generalizes across queues; and the guardrails of the online controller (maximum change per
//! step, dwell time) already provide the smoothness that relative moves would give.

use crate::ecn::EcnSetting;
use crate::units::BitsPerSec;
use serde::{Deserialize, Serialize};

/// The speed at which template thresholds are stated. Ports of another speed scale them by
/// `rate / 100 Gb/s`, as REFERENCE.md §5 scales its baselines.
pub const TEMPLATE_RATE_BPS: u64 = 100_000_000_000;

/// Hard limits no action may leave, in bytes at the port's own speed and as a probability.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    /// Smallest Kmin.
    pub kmin_min_bytes: u64,
    /// Largest Kmax.
    pub kmax_max_bytes: u64,
    /// Smallest Pmax.
    pub pmax_min: f64,
    /// Largest Pmax.
    pub pmax_max: f64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { kmin_min_bytes: 1_000, kmax_max_bytes: 16_000_000, pmax_min: 0.001, pmax_max: 1.0 }
    }
}

impl Bounds {
    /// Put `s` inside the bounds, keeping Kmin < Kmax. Non-finite Pmax becomes the lower
    /// bound.
    pub fn clamp(&self, s: EcnSetting) -> EcnSetting {
        let kmax_max = self.kmax_max_bytes.max(self.kmin_min_bytes + 1);
        let kmin = s.kmin_bytes.clamp(self.kmin_min_bytes, kmax_max - 1);
        let kmax = s.kmax_bytes.clamp(kmin + 1, kmax_max);
        let pmax = if s.pmax.is_finite() { s.pmax.clamp(self.pmax_min, self.pmax_max) } else { self.pmax_min };
        EcnSetting { kmin_bytes: kmin, kmax_bytes: kmax, pmax }
    }

    /// Whether any setting fits: finite, Kmin's floor below Kmax's ceiling, and
    /// 0 < `pmax_min` ≤ `pmax_max` ≤ 1. [`Bounds::clamp`] assumes this.
    pub fn check(&self) -> Result<(), String> {
        if self.kmin_min_bytes >= self.kmax_max_bytes {
            return Err(format!(
                "kmin_min_bytes {} must be below kmax_max_bytes {}",
                self.kmin_min_bytes, self.kmax_max_bytes
            ));
        }
        if !(self.pmax_min > 0.0 && self.pmax_min <= self.pmax_max && self.pmax_max <= 1.0) {
            return Err(format!(
                "pmax_min {} and pmax_max {} must satisfy 0 < pmax_min <= pmax_max <= 1",
                self.pmax_min, self.pmax_max
            ));
        }
        Ok(())
    }

    /// True if `s` is inside the bounds.
    pub fn contains(&self, s: &EcnSetting) -> bool {
        s.kmin_bytes >= self.kmin_min_bytes
            && s.kmin_bytes < s.kmax_bytes
            && s.kmax_bytes <= self.kmax_max_bytes
            && s.pmax.is_finite()
            && s.pmax >= self.pmax_min
            && s.pmax <= self.pmax_max
    }
}

/// Which template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TemplateKind {
    /// ecn-tuner's template: Kmin {2, 8, 32} KB × Kmax {40 … 1280} KB (doubling) × Pmax {0.1,
    /// 0.3, 1.0}, at 100 Gb/s. Its range covers the Huawei 100GE rows of REFERENCE.md §5 (the
    /// best static rows at 100G) and extends toward the low thresholds that keep small flows
    /// fast; hpcc-alibaba at 100G (400 KB / 1.6 MB), nvidia-default and dctcp-style lie above it.
    Tuner,
    /// ACC's template (REFERENCE.md §6): thresholds on the grid E(n) = 20 KB·2ⁿ, n = 0..9,
    /// with Kmax one to three grid steps above Kmin, and Pmax in {1%, 10%, 20%}.
    Acc,
}

/// A discrete action space of ECN settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionTemplate {
    kind: TemplateKind,
    settings: Vec<EcnSetting>,
}

impl ActionTemplate {
    /// Build a template.
    pub fn new(kind: TemplateKind) -> Self {
        let mut settings = Vec::new();
        match kind {
            TemplateKind::Tuner => {
                for kmin_kb in [2u64, 8, 32] {
                    for kmax_kb in [40u64, 80, 160, 320, 640, 1280] {
                        for pmax in [0.1, 0.3, 1.0] {
                            settings.push(EcnSetting { kmin_bytes: kmin_kb * 1000, kmax_bytes: kmax_kb * 1000, pmax });
                        }
                    }
                }
            }
            TemplateKind::Acc => {
                let grid = |n: u32| 20_000u64 << n;
                for i in 0..9 {
                    for j in (i + 1)..=(i + 3).min(9) {
                        for pmax in [0.01, 0.1, 0.2] {
                            settings.push(EcnSetting { kmin_bytes: grid(i), kmax_bytes: grid(j), pmax });
                        }
                    }
                }
            }
        }
        ActionTemplate { kind, settings }
    }

    /// Which template this is.
    pub fn kind(&self) -> TemplateKind {
        self.kind
    }

    /// Number of actions.
    pub fn len(&self) -> usize {
        self.settings.len()
    }

    /// Never true: every template has actions.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
    }

    /// The settings at 100 Gb/s, in action order.
    pub fn settings(&self) -> &[EcnSetting] {
        &self.settings
    }

    /// The setting of `action` on a port of speed `link`, inside `bounds`. An out-of-range
    /// index is `None`.
    pub fn setting(&self, action: usize, link: BitsPerSec, bounds: &Bounds) -> Option<EcnSetting> {
        let s = self.settings.get(action)?;
        let scale = link.0 as f64 / TEMPLATE_RATE_BPS as f64;
        let scaled = EcnSetting {
            kmin_bytes: (s.kmin_bytes as f64 * scale).round() as u64,
            kmax_bytes: (s.kmax_bytes as f64 * scale).round() as u64,
            pmax: s.pmax,
        };
        Some(bounds.clamp(scaled))
    }

    /// The action whose setting (at speed `link`) is nearest to `s` on a log scale: used to
    /// label logged settings with actions, and to start episodes from a known setting.
    pub fn nearest(&self, s: &EcnSetting, link: BitsPerSec) -> usize {
        let scale = link.0 as f64 / TEMPLATE_RATE_BPS as f64;
        let d = |t: &EcnSetting| {
            let l = |a: u64, b: f64| ((a.max(1) as f64) / (b * scale).max(1.0)).ln().powi(2);
            l(s.kmin_bytes, t.kmin_bytes as f64)
                + l(s.kmax_bytes, t.kmax_bytes as f64)
                + (s.pmax.max(1e-3) / t.pmax).ln().powi(2)
        };
        (0..self.settings.len()).min_by(|&a, &b| d(&self.settings[a]).total_cmp(&d(&self.settings[b]))).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn templates_are_valid_settings() {
        for kind in [TemplateKind::Tuner, TemplateKind::Acc] {
            let t = ActionTemplate::new(kind);
            assert!(t.len() >= 24, "{kind:?}: {}", t.len());
            for s in t.settings() {
                s.validate().unwrap();
            }
        }
        assert_eq!(ActionTemplate::new(TemplateKind::Tuner).len(), 54);
        assert_eq!(ActionTemplate::new(TemplateKind::Acc).len(), 72);
    }

    #[test]
    fn nearest_finds_the_template_entry_itself() {
        let t = ActionTemplate::new(TemplateKind::Tuner);
        for (i, s) in t.settings().iter().enumerate() {
            assert_eq!(t.nearest(s, BitsPerSec(TEMPLATE_RATE_BPS)), i);
        }
    }

    proptest! {
        #[test]
        fn every_action_stays_in_bounds(
            action in 0usize..80,
            gbps in 1u64..800,
            kmin_min in 1u64..50_000,
            span in 2u64..20_000_000,
            pmin in 0.0f64..0.5,
            pspan in 0.0f64..0.5,
        ) {
            let bounds = Bounds { kmin_min_bytes: kmin_min, kmax_max_bytes: kmin_min + span, pmax_min: pmin, pmax_max: pmin + pspan };
            for kind in [TemplateKind::Tuner, TemplateKind::Acc] {
                let t = ActionTemplate::new(kind);
                match t.setting(action, BitsPerSec(gbps * 1_000_000_000), &bounds) {
                    Some(s) => prop_assert!(bounds.contains(&s), "{s:?} outside {bounds:?}"),
                    None => prop_assert!(action >= t.len()),
                }
            }
        }
    }
}
