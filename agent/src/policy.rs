//! The `<POLICY>` argument (PRODUCT.md "The CLI contract").
//!
//! Forms: `static:<KMIN>,<KMAX>,<PMAX>`, `baseline:<name>`, `model:<NAME|PATH>` (a learned
//! policy; `model:default` is the shipped checkpoint) and `explore[:SEED[:HOLD[:SHARE[:ANCHOR]]]]`
//! (a safe exploratory behaviour, for recording data).

use crate::error::CliError;
use crate::explore::{Anchor, Explore};
use crate::learned::LearnedModel;
use ecn_env::fabric::EcnPlan;
use ecn_env::{Baseline, BitsPerSec, Bytes, EcnSetting, Nanos};
use std::fmt;
use std::sync::Arc;

/// A parsed `--policy`.
#[derive(Debug, Clone)]
pub enum Policy {
    /// One fixed setting on every data queue.
    Static(EcnSetting),
    /// A REFERENCE.md §5 row, scaled to each port's speed.
    Baseline(Baseline),
    /// A learned checkpoint, deciding from telemetry in closed loop.
    Model(Arc<LearnedModel>),
    /// Seeded exploration of the action template inside the bounds.
    Explore(Explore),
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Policy::Static(a), Policy::Static(b)) => a == b,
            (Policy::Baseline(a), Policy::Baseline(b)) => a == b,
            // One weights file however spelled (`model:default`, a relative or absolute path).
            (Policy::Model(a), Policy::Model(b)) => same_file(&a.path, &b.path),
            (Policy::Explore(a), Policy::Explore(b)) => a == b,
            _ => false,
        }
    }
}

/// Whether two paths name one file (as given where either cannot be resolved).
pub(crate) fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

impl Policy {
    /// The interval a closed-loop policy decides at, and so samples the fabric at: a model's
    /// card's, or for exploration its anchor's (the default control interval without one).
    /// `None` for fixed settings, which run at the scenario's own `sample_interval`.
    pub fn control_interval(&self) -> Option<Nanos> {
        match self {
            Policy::Static(_) | Policy::Baseline(_) => None,
            Policy::Model(m) => Some(m.tuning().control_interval),
            Policy::Explore(e) => Some(e.tuning().control_interval),
        }
    }

    /// Parse the command-line form given to `--policy`.
    pub fn parse(s: &str) -> Result<Policy, CliError> {
        Policy::parse_flag("--policy", s)
    }

    /// Parse the command-line form given to `flag`, which errors name.
    pub fn parse_flag(flag: &str, s: &str) -> Result<Policy, CliError> {
        let bad = |why: String| CliError::BadInput(format!("{flag} '{s}': {why}"));
        if s == "explore" {
            return Ok(Policy::Explore(Explore::new(0)));
        }
        let (kind, arg) = s.split_once(':').ok_or_else(|| bad(FORMS.into()))?;
        match kind {
            "static" => {
                let parts: Vec<&str> = arg.split(',').map(str::trim).collect();
                let [kmin, kmax, pmax] = parts[..] else {
                    return Err(bad("expected static:<KMIN>,<KMAX>,<PMAX>, e.g. static:400KB,1600KB,0.2".into()));
                };
                let kmin: Bytes = kmin.parse().map_err(|e| bad(format!("KMIN: {e}")))?;
                let kmax: Bytes = kmax.parse().map_err(|e| bad(format!("KMAX: {e}")))?;
                let pmax: f64 = pmax.parse().map_err(|_| bad(format!("PMAX '{pmax}' is not a number")))?;
                Ok(Policy::Static(EcnSetting::new(kmin, kmax, pmax).map_err(|e| bad(e.to_string()))?))
            }
            "baseline" => Baseline::from_name(arg).map(Policy::Baseline).ok_or_else(|| {
                let names: Vec<&str> = Baseline::ALL.iter().map(|b| b.name()).collect();
                bad(format!("unknown baseline (one of: {})", names.join(", ")))
            }),
            "model" if !arg.is_empty() => {
                Ok(Policy::Model(Arc::new(LearnedModel::load(arg, &format!("{flag} model:"))?)))
            }
            "explore" => {
                let mut parts = arg.splitn(4, ':');
                let seed = parts.next().unwrap_or_default();
                let seed = seed.parse().map_err(|_| bad(format!("SEED '{seed}' is not a non-negative integer")))?;
                let hold = match parts.next() {
                    None => return Ok(Policy::Explore(Explore::new(seed))),
                    Some(h) => match h.parse::<u64>() {
                        Ok(h) if h >= 1 => h,
                        _ => return Err(bad(format!("HOLD '{h}' is not a whole number of decisions ≥ 1"))),
                    },
                };
                let share = match parts.next() {
                    None => 0.0,
                    Some(a) => match a.parse::<f64>() {
                        Ok(a) if (0.0..=1.0).contains(&a) => a,
                        _ => return Err(bad(format!("SHARE '{a}' is not a fraction between 0 and 1"))),
                    },
                };
                let anchor = match parts.next() {
                    None => Anchor::Baseline(crate::learn::trainer::REFERENCE_BASELINE),
                    Some(a) if matches!(a.split_once(':'), Some(("baseline" | "model", _))) => {
                        let parsed = Policy::parse_flag(flag, a).map_err(|e| match e {
                            CliError::BadInput(why) => bad(format!("ANCHOR: {why}")),
                            other => other,
                        })?;
                        match parsed {
                            Policy::Baseline(b) => Anchor::Baseline(b),
                            Policy::Model(m) => Anchor::Model(m),
                            other => return Err(bad(format!("ANCHOR '{a}' parsed as {other}"))),
                        }
                    }
                    Some(a) => return Err(bad(format!("ANCHOR '{a}' must be baseline:<name> or model:<NAME|PATH>"))),
                };
                Ok(Policy::Explore(Explore::anchored(seed, hold, share, anchor)))
            }
            _ => Err(bad(FORMS.into())),
        }
    }

    /// The setting a static form proposes for a queue on a port of the given speed; `None`
    /// for a learned policy, which decides from observations ([`LearnedModel::propose`]),
    /// and for exploration, which depends on the queue and the decision
    /// ([`Explore::setting`]).
    pub fn propose(&self, link: BitsPerSec) -> Option<EcnSetting> {
        match self {
            Policy::Static(s) => Some(*s),
            Policy::Baseline(b) => Some(b.setting(link)),
            Policy::Model(_) | Policy::Explore(_) => None,
        }
    }

    /// The initial ECN plan this policy puts on every data queue. A learned policy starts
    /// from its fallback baseline until its first decision.
    pub fn plan(&self) -> EcnPlan {
        match self {
            Policy::Static(s) => EcnPlan::Fixed(*s),
            Policy::Baseline(b) => EcnPlan::Baseline(*b),
            Policy::Model(_) | Policy::Explore(_) => crate::learn::trainer::LEARNED_START,
        }
    }

    /// The learned model this policy consults, if any: a model, or exploration around one.
    pub fn model(&self) -> Option<&Arc<LearnedModel>> {
        match self {
            Policy::Model(m) => Some(m),
            Policy::Explore(e) => e.model(),
            _ => None,
        }
    }
}

const FORMS: &str =
    "expected static:<KMIN>,<KMAX>,<PMAX>, baseline:<name>, model:<default|PATH> or explore[:SEED[:HOLD[:SHARE[:ANCHOR]]]]";

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Static(s) => write!(f, "static:{},{},{}", Bytes(s.kmin_bytes), Bytes(s.kmax_bytes), s.pmax),
            Policy::Baseline(b) => write!(f, "baseline:{}", b.name()),
            Policy::Model(m) => write!(f, "model:{}", m.spec),
            Policy::Explore(e) if e.anchor != Anchor::Baseline(crate::learn::trainer::REFERENCE_BASELINE) => {
                write!(f, "explore:{}:{}:{}:{}", e.seed, e.hold, e.anchor_share, e.anchor)
            }
            Policy::Explore(e) if e.anchor_share > 0.0 => write!(f, "explore:{}:{}:{}", e.seed, e.hold, e.anchor_share),
            Policy::Explore(e) if e.hold == crate::explore::DEFAULT_HOLD_DECISIONS => write!(f, "explore:{}", e.seed),
            Policy::Explore(e) => write!(f, "explore:{}:{}", e.seed, e.hold),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_static_and_baseline() {
        let p = Policy::parse("static:400KB,1600KB,0.2").unwrap();
        assert_eq!(p, Policy::Static(EcnSetting { kmin_bytes: 400_000, kmax_bytes: 1_600_000, pmax: 0.2 }));
        assert_eq!(p.to_string(), "static:400KB,1600KB,0.2");
        assert_eq!(Policy::parse("baseline:hpcc-alibaba").unwrap(), Policy::Baseline(Baseline::HpccAlibaba));
        assert_eq!(Policy::parse("explore").unwrap().to_string(), "explore:0");
        assert_eq!(Policy::parse("explore:9").unwrap(), Policy::Explore(Explore::new(9)));
        assert_eq!(Policy::parse("explore:9:2").unwrap().to_string(), "explore:9:2");
        assert_eq!(Policy::parse("explore:9:2:0.5").unwrap().to_string(), "explore:9:2:0.5");
        assert!(Policy::parse("explore:9:2:1.5").is_err() && Policy::parse("explore:9:2:x").is_err());
        let around = Policy::parse("explore:9:1:0.8:model:default").unwrap();
        assert_eq!(around.to_string(), "explore:9:1:0.8:model:default");
        assert!(around.model().is_some());
        // One model however spelled, as an anchor too (`eval --reference` ran it twice).
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/checkpoints/default.safetensors");
        assert_eq!(around, Policy::parse(&format!("explore:9:1:0.8:model:{file}")).unwrap());
        assert_ne!(around, Policy::parse("explore:9:1:0.8:model:acc-baseline").unwrap());
        assert_eq!(
            Policy::parse("explore:9:1:0.8:baseline:dcqcn-paper").unwrap().to_string(),
            "explore:9:1:0.8:baseline:dcqcn-paper"
        );
        assert!(Policy::parse("explore:9:1:0.8:static:1KB,2KB,0.1").is_err());
    }

    #[test]
    fn anchor_errors_quote_the_whole_policy() {
        for s in ["explore:9:1:0.8:static:1KB,2KB", "explore:9:1:0.8:baseline:nope"] {
            let e = Policy::parse(s).unwrap_err().to_string();
            assert!(e.contains(&format!("'{s}'")) && e.contains("ANCHOR"), "{e}");
        }
    }

    #[test]
    fn a_model_path_may_leave_off_the_suffix_and_errors_name_the_flag() {
        let shipped = ecn_models::default_model_path("default");
        let stem = shipped.with_extension("");
        let p = Policy::parse(&format!("model:{}", stem.display())).unwrap();
        assert_eq!(p.model().unwrap().path, shipped);
        let e = LearnedModel::load("no-such-model", "--model ").unwrap_err().to_string();
        assert!(e.starts_with("--model no-such-model: "), "{e}");
    }

    #[test]
    fn rejects_bad_policies_as_bad_input() {
        for s in [
            "static:2MB,1MB,0.2",
            "static:1KB,2KB,1.5",
            "static:1KB",
            "baseline:nope",
            "magic",
            "x:y",
            "model:",
            "model:/no/such/model.safetensors",
            "explore:-1",
            "explore:1:0",
            "explore:1:x",
        ] {
            let e = Policy::parse(s).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{s}");
            assert!(e.to_string().contains("--policy"), "{e}");
        }
    }
}
