//! The `<POLICY>` argument (PRODUCT.md "The CLI contract").
//!
//! Static forms are available today: `static:<KMIN>,<KMAX>,<PMAX>` and `baseline:<name>`.

use crate::error::CliError;
use ecn_env::fabric::EcnPlan;
use ecn_env::{Baseline, BitsPerSec, Bytes, EcnSetting};
use std::fmt;

/// A parsed `--policy`.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// One fixed setting on every data queue.
    Static(EcnSetting),
    /// A REFERENCE.md §5 row, scaled to each port's speed.
    Baseline(Baseline),
}

impl Policy {
    /// Parse the command-line form.
    pub fn parse(s: &str) -> Result<Policy, CliError> {
        let bad = |why: String| CliError::BadInput(format!("--policy '{s}': {why}"));
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
            _ => Err(bad(FORMS.into())),
        }
    }

    /// The setting this policy proposes for a queue on a port of the given speed. Static forms
    /// always propose the same; `None` would mean the policy has no usable answer.
    pub fn propose(&self, link: BitsPerSec) -> Option<EcnSetting> {
        Some(match self {
            Policy::Static(s) => *s,
            Policy::Baseline(b) => b.setting(link),
        })
    }

    /// The initial ECN plan this policy puts on every data queue.
    pub fn plan(&self) -> EcnPlan {
        match self {
            Policy::Static(s) => EcnPlan::Fixed(*s),
            Policy::Baseline(b) => EcnPlan::Baseline(*b),
        }
    }
}

const FORMS: &str = "expected static:<KMIN>,<KMAX>,<PMAX> or baseline:<name>";

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Static(s) => write!(f, "static:{},{},{}", Bytes(s.kmin_bytes), Bytes(s.kmax_bytes), s.pmax),
            Policy::Baseline(b) => write!(f, "baseline:{}", b.name()),
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
    }

    #[test]
    fn rejects_bad_policies_as_bad_input() {
        for s in ["static:2MB,1MB,0.2", "static:1KB,2KB,1.5", "static:1KB", "baseline:nope", "magic", "x:y"] {
            let e = Policy::parse(s).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{s}");
            assert!(e.to_string().contains("--policy"), "{e}");
        }
    }
}
