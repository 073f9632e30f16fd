//! ECN marking settings (REFERENCE.md §1) and the static baselines people use (§5).

use crate::units::{BitsPerSec, Bytes};
use serde::{Deserialize, Serialize};

/// The RED-style marking profile of one egress queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EcnSetting {
    /// Below or at this depth nothing is marked.
    pub kmin_bytes: u64,
    /// At or above this depth every packet is marked.
    pub kmax_bytes: u64,
    /// Marking probability reached just below `kmax_bytes`, in [0, 1].
    pub pmax: f64,
}

impl std::fmt::Display for EcnSetting {
    /// As a `static:` policy writes it (`100KB,800KB,0.3`): thresholds in whole KB where exact,
    /// else in bytes; Pmax to three decimals, or to as many as it takes to tell it from its
    /// three-decimal rounding (a clamp from 0.0009).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kb = |bytes: u64| {
            if bytes.is_multiple_of(1000) {
                format!("{}KB", bytes / 1000)
            } else {
                format!("{bytes}B")
            }
        };
        // Within 10⁻⁷ is the same: a Pmax that went through float32 (0.10000000149) is 0.1.
        let short = (self.pmax * 1000.0).round() / 1000.0;
        let pmax = if (short - self.pmax).abs() < 1e-7 { short.to_string() } else { format!("{:.6}", self.pmax) };
        write!(f, "{},{},{pmax}", kb(self.kmin_bytes), kb(self.kmax_bytes))
    }
}

impl From<&ecn_datasets::QueueSample> for EcnSetting {
    /// The setting in effect during a telemetry sample.
    fn from(s: &ecn_datasets::QueueSample) -> Self {
        EcnSetting { kmin_bytes: s.kmin_bytes, kmax_bytes: s.kmax_bytes, pmax: s.pmax }
    }
}

/// Why an ECN setting is not acceptable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EcnError {
    /// Kmin must be below Kmax.
    #[error("kmin ({kmin}) must be less than kmax ({kmax})")]
    KminNotBelowKmax {
        /// Offending Kmin.
        kmin: Bytes,
        /// Offending Kmax.
        kmax: Bytes,
    },
    /// Pmax must be a probability.
    #[error("pmax ({0}) must be within [0, 1]")]
    PmaxOutOfRange(f64),
}

impl EcnSetting {
    /// A setting, validated.
    pub fn new(kmin: Bytes, kmax: Bytes, pmax: f64) -> Result<Self, EcnError> {
        let s = EcnSetting { kmin_bytes: kmin.0, kmax_bytes: kmax.0, pmax };
        s.validate()?;
        Ok(s)
    }

    /// Check Kmin < Kmax and 0 ≤ Pmax ≤ 1.
    pub fn validate(&self) -> Result<(), EcnError> {
        if !(self.pmax.is_finite() && (0.0..=1.0).contains(&self.pmax)) {
            return Err(EcnError::PmaxOutOfRange(self.pmax));
        }
        if self.kmin_bytes >= self.kmax_bytes {
            return Err(EcnError::KminNotBelowKmax { kmin: Bytes(self.kmin_bytes), kmax: Bytes(self.kmax_bytes) });
        }
        Ok(())
    }

    /// Marking probability at queue depth `q` bytes (REFERENCE.md §1):
    /// 0 at or below Kmin, Pmax·(q−Kmin)/(Kmax−Kmin) in between, 1 at or above Kmax.
    #[inline]
    pub fn mark_probability(&self, q: u64) -> f64 {
        if q <= self.kmin_bytes {
            0.0
        } else if q >= self.kmax_bytes {
            1.0
        } else {
            self.pmax * (q - self.kmin_bytes) as f64 / (self.kmax_bytes - self.kmin_bytes) as f64
        }
    }

    /// Decide whether a packet leaving a queue of depth `q` is CE-marked, drawing from `rng`
    /// only inside the ramp (so runs with the same marks draw the same numbers).
    #[inline]
    pub fn should_mark(&self, q: u64, rng: &mut crate::rng::Rng) -> bool {
        let p = self.mark_probability(q);
        p >= 1.0 || (p > 0.0 && rng.uniform() < p)
    }
}

/// A named static setting of REFERENCE.md §5, scaled to the link speed where the source says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Baseline {
    /// DCQCN paper, 40G: 5 KB / 200 KB / 1%.
    DcqcnPaper,
    /// HPCC simulator / Alibaba production: 100 KB·bw/25G / 400 KB·bw/25G / 20%.
    HpccAlibaba,
    /// Huawei AI Fabric guide, latency profile (100GE 7/500 KB/30%; 25GE 7/150 KB/30%).
    HuaweiLatency,
    /// Huawei AI Fabric guide, throughput profile (100GE 7/750 KB/10%; 25GE 7/200 KB/10%).
    HuaweiThroughput,
    /// Cumulus/NVUE default RoCE profile: 150 KB / 1500 KB / 100%.
    NvidiaDefault,
    /// DCTCP rule of thumb: K = 30 KB·bw/10G, step marking.
    DctcpStyle,
}

impl Baseline {
    /// Every baseline, in the order of REFERENCE.md §5.
    pub const ALL: [Baseline; 6] = [
        Baseline::DcqcnPaper,
        Baseline::HpccAlibaba,
        Baseline::HuaweiLatency,
        Baseline::HuaweiThroughput,
        Baseline::NvidiaDefault,
        Baseline::DctcpStyle,
    ];

    /// The name used in `baseline:<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Baseline::DcqcnPaper => "dcqcn-paper",
            Baseline::HpccAlibaba => "hpcc-alibaba",
            Baseline::HuaweiLatency => "huawei-latency",
            Baseline::HuaweiThroughput => "huawei-throughput",
            Baseline::NvidiaDefault => "nvidia-default",
            Baseline::DctcpStyle => "dctcp-style",
        }
    }

    /// Look a baseline up by name.
    pub fn from_name(name: &str) -> Option<Baseline> {
        Baseline::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The setting for a queue on a port of the given speed.
    ///
    /// Rows that REFERENCE.md gives per speed scale linearly with bandwidth; the Huawei rows
    /// use the 25GE profile up to 25G, the 100GE profile above (the guide has no 400GE row, so
    /// Kmax scales with bandwidth from the 100GE profile, keeping its "Kmax ≈ 2–3 × BDP" rule).
    pub fn setting(self, link: BitsPerSec) -> EcnSetting {
        let gbps = link.as_gbps();
        let kb = |x: f64| (x * 1000.0).round() as u64;
        let (kmin, kmax, pmax) = match self {
            Baseline::DcqcnPaper => (kb(5.0), kb(200.0), 0.01),
            Baseline::HpccAlibaba => (kb(100.0 * gbps / 25.0), kb(400.0 * gbps / 25.0), 0.2),
            Baseline::HuaweiLatency if gbps <= 25.0 => (kb(7.0), kb(150.0), 0.3),
            Baseline::HuaweiLatency => (kb(7.0), kb(500.0 * (gbps / 100.0).max(1.0)), 0.3),
            Baseline::HuaweiThroughput if gbps <= 25.0 => (kb(7.0), kb(200.0), 0.1),
            Baseline::HuaweiThroughput => (kb(7.0), kb(750.0 * (gbps / 100.0).max(1.0)), 0.1),
            Baseline::NvidiaDefault => (kb(150.0), kb(1500.0), 1.0),
            // Kmin = Kmax is a step; the marking law needs Kmin < Kmax, so the step is one byte wide.
            Baseline::DctcpStyle => {
                let k = kb(30.0 * gbps / 10.0);
                (k, k + 1, 1.0)
            }
        };
        EcnSetting { kmin_bytes: kmin, kmax_bytes: kmax, pmax }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpcc_alibaba_matches_reference_config() {
        // shared/reference/ls16/config.txt: 400/1600 KB at 100G, 1600/6400 KB at 400G.
        let s = Baseline::HpccAlibaba.setting(BitsPerSec::from_gbps(100));
        assert_eq!((s.kmin_bytes, s.kmax_bytes, s.pmax), (400_000, 1_600_000, 0.2));
        let s = Baseline::HpccAlibaba.setting(BitsPerSec::from_gbps(400));
        assert_eq!((s.kmin_bytes, s.kmax_bytes), (1_600_000, 6_400_000));
    }

    #[test]
    fn every_baseline_is_valid_at_every_speed() {
        for b in Baseline::ALL {
            for g in [10, 25, 40, 100, 200, 400] {
                b.setting(BitsPerSec::from_gbps(g)).validate().unwrap();
            }
            assert_eq!(Baseline::from_name(b.name()), Some(b));
        }
    }

    #[test]
    fn marking_law() {
        let s = EcnSetting { kmin_bytes: 100, kmax_bytes: 300, pmax: 0.2 };
        assert_eq!(s.mark_probability(100), 0.0);
        assert!((s.mark_probability(200) - 0.1).abs() < 1e-12);
        assert_eq!(s.mark_probability(300), 1.0);
        assert!(EcnSetting::new(Bytes(5), Bytes(5), 0.1).is_err());
        assert!(EcnSetting::new(Bytes(5), Bytes(6), 1.5).is_err());
    }
}
