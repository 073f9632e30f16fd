//! DCQCN as the HPCC simulator implements it (REFERENCE.md §2, the "Mellanox ConnectX" variant),
//! plus the DCQCN-paper variant.
//!
//! [`DcqcnSender`] is the reaction point of one flow. It is a plain state machine: the host owns
//! the event queue and calls in when a CNP arrives or a timer fires; the methods return the
//! timers to schedule. The α timer (every `ALPHA_RESUME_INTERVAL`, 1 µs in the HPCC column) is
//! evaluated lazily instead of firing as events: between two observations α only decays, so it
//! is caught up slot by slot when it is read. This keeps the event count per flow independent of
//! the α period, with the same arithmetic as a timer firing each slot.

use crate::units::{BitsPerSec, Bytes, Nanos};
use serde::{Deserialize, Serialize};

/// Which notification point / reaction point behaviour to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DcqcnVariant {
    /// HPCC simulator: every data packet is ACKed and the ACK of a CE-marked packet carries
    /// the CNP flag; no byte counter.
    #[default]
    Hpcc,
    /// DCQCN paper: at most one CNP per flow per `cnp_interval`, optional byte counter.
    Paper,
}

/// Every DCQCN knob of REFERENCE.md §2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcqcnParams {
    /// Notification-point behaviour.
    pub variant: DcqcnVariant,
    /// α update period (`ALPHA_RESUME_INTERVAL`).
    pub alpha_resume_interval: Nanos,
    /// Rate-decrease check period (`RATE_DECREASE_INTERVAL`).
    pub rate_decrease_interval: Nanos,
    /// Rate-increase timer period (`RP_TIMER`).
    pub rp_timer: Nanos,
    /// EWMA gain g of α (`EWMA_GAIN`).
    pub ewma_gain: f64,
    /// Number of fast-recovery steps F (`FAST_RECOVERY_TIMES`).
    pub fast_recovery_times: u32,
    /// Additive-increase step (`RATE_AI`).
    pub rate_ai: BitsPerSec,
    /// Hyper-increase step (`RATE_HAI`).
    pub rate_hai: BitsPerSec,
    /// Floor of the current rate (`MIN_RATE`).
    pub min_rate: BitsPerSec,
    /// Set RT ← RC on every decrease, not only after an increase (`CLAMP_TARGET_RATE`).
    pub clamp_target_rate: bool,
    /// Factor applied to RC on the first CNP (`RATE_ON_FIRST_CNP`).
    pub rate_on_first_cnp: f64,
    /// Paper variant: minimum gap between two CNPs of one flow at the receiver.
    pub cnp_interval: Nanos,
    /// Paper variant: advance the increase stage every this many bytes sent (`BYTE_COUNTER`).
    pub byte_counter: Option<Bytes>,
}

/// The shortest DCQCN timer period accepted (the reference's shortest, the alpha update
/// of HPCC's configs, is 1 µs).
pub const MIN_TIMER: Nanos = Nanos(1_000);

impl DcqcnParams {
    /// The HPCC paper's "dcqcn" column, with the bandwidth-scaled steps computed for `line`.
    pub fn hpcc(line: BitsPerSec) -> Self {
        let bw_gbps = line.as_gbps();
        DcqcnParams {
            variant: DcqcnVariant::Hpcc,
            alpha_resume_interval: Nanos::from_micros(1),
            rate_decrease_interval: Nanos::from_micros(4),
            rp_timer: Nanos::from_micros(300),
            ewma_gain: 1.0 / 256.0,
            fast_recovery_times: 1,
            rate_ai: BitsPerSec((5.0 * bw_gbps / 25.0 * 1e6).round() as u64),
            rate_hai: BitsPerSec((50.0 * bw_gbps / 25.0 * 1e6).round() as u64),
            min_rate: BitsPerSec(1_000_000_000),
            clamp_target_rate: false,
            rate_on_first_cnp: 1.0,
            cnp_interval: Nanos::from_micros(50),
            byte_counter: None,
        }
    }

    /// The DCQCN paper's column (40G testbed values).
    pub fn paper() -> Self {
        DcqcnParams {
            variant: DcqcnVariant::Paper,
            alpha_resume_interval: Nanos::from_micros(55),
            rate_decrease_interval: Nanos::from_micros(50),
            rp_timer: Nanos::from_micros(55),
            ewma_gain: 1.0 / 256.0,
            fast_recovery_times: 5,
            rate_ai: BitsPerSec(40_000_000),
            rate_hai: BitsPerSec(200_000_000),
            // The paper gives no floor; 100 Mb/s keeps a flow from stalling for ever.
            min_rate: BitsPerSec(100_000_000),
            clamp_target_rate: true,
            rate_on_first_cnp: 1.0,
            cnp_interval: Nanos::from_micros(50),
            byte_counter: Some(Bytes(10_000_000)),
        }
    }

    /// Check that every value is usable on NICs of `nic_rate`.
    pub fn validate(&self, nic_rate: BitsPerSec) -> Result<(), String> {
        // Each timer fires per flow; at nanosecond periods a run would do little but fire them.
        let timers = [
            ("alpha_resume_interval", self.alpha_resume_interval),
            ("rate_decrease_interval", self.rate_decrease_interval),
            ("rp_timer", self.rp_timer),
        ];
        for (k, v) in timers {
            if v < MIN_TIMER {
                return Err(format!("{k} ({v}) is below the minimum, {MIN_TIMER}"));
            }
        }
        if self.min_rate.0 == 0 {
            return Err("min_rate must be greater than 0".into());
        }
        if !(self.ewma_gain > 0.0 && self.ewma_gain <= 1.0) {
            return Err(format!("ewma_gain ({}) must be within (0, 1]", self.ewma_gain));
        }
        if !(self.rate_on_first_cnp > 0.0 && self.rate_on_first_cnp <= 1.0) {
            return Err(format!("rate_on_first_cnp ({}) must be within (0, 1]", self.rate_on_first_cnp));
        }
        // A floor above the line rate would leave DCQCN unable to slow a sender at all.
        if self.min_rate > nic_rate {
            return Err(format!("min_rate ({}) must not exceed the NIC rate ({nic_rate})", self.min_rate));
        }
        if self.byte_counter == Some(Bytes(0)) {
            return Err("byte_counter must be greater than 0 (omit it to disable)".into());
        }
        Ok(())
    }
}

/// Reaction-point state of one flow (REFERENCE.md §2, "Per-flow state at the sender").
#[derive(Debug, Clone)]
pub struct DcqcnSender {
    /// Current rate RC, bits/s.
    pub rate_bps: f64,
    /// Target rate RT, bits/s.
    pub target_bps: f64,
    alpha: f64,
    /// Timer-driven increase stage.
    stage: u32,
    /// Byte-counter-driven increase stage (paper variant only).
    byte_stage: u32,
    bytes_since_stage: u64,
    line_bps: f64,
    /// Time of the first CNP: the α slots and decrease checks are aligned to it.
    first_cnp_at: Option<u64>,
    alpha_slots_done: u64,
    alpha_cnp_arrived: bool,
    decrease_cnp_arrived: bool,
    decrease_check_pending: bool,
    /// Generation of the rate-increase timer; a fired timer with an older generation is stale.
    pub increase_timer_gen: u32,
}

impl DcqcnSender {
    /// A flow starting at line rate, target rate equal to line rate, α = 1.
    pub fn new(line: BitsPerSec) -> Self {
        let line_bps = line.0 as f64;
        DcqcnSender {
            rate_bps: line_bps,
            target_bps: line_bps,
            alpha: 1.0,
            stage: 0,
            byte_stage: 0,
            bytes_since_stage: 0,
            line_bps,
            first_cnp_at: None,
            alpha_slots_done: 0,
            alpha_cnp_arrived: false,
            decrease_cnp_arrived: false,
            decrease_check_pending: false,
            increase_timer_gen: 0,
        }
    }

    /// α as of `now`, after every α slot that ended at or before `now`.
    pub fn alpha(&mut self, now: Nanos, p: &DcqcnParams) -> f64 {
        self.catch_up_alpha(now.0, p);
        self.alpha
    }

    fn catch_up_alpha(&mut self, now: u64, p: &DcqcnParams) {
        let Some(t0) = self.first_cnp_at else { return };
        let slots = (now - t0) / p.alpha_resume_interval.0;
        if slots <= self.alpha_slots_done {
            return;
        }
        let g = p.ewma_gain;
        // The first pending slot sees the CNP flag; later ones saw none.
        self.alpha = (1.0 - g) * self.alpha + if self.alpha_cnp_arrived { g } else { 0.0 };
        self.alpha_cnp_arrived = false;
        let quiet = slots - self.alpha_slots_done - 1;
        if quiet > 0 {
            self.alpha *= (1.0 - g).powi(quiet.min(i32::MAX as u64) as i32);
        }
        self.alpha_slots_done = slots;
    }

    /// A CNP (or a CNP-flagged ACK) arrived. Returns the time of a rate-decrease check to
    /// schedule, if none is pending.
    pub fn on_cnp(&mut self, now: Nanos, p: &DcqcnParams) -> Option<Nanos> {
        self.catch_up_alpha(now.0, p);
        self.alpha_cnp_arrived = true;
        self.decrease_cnp_arrived = true;
        match self.first_cnp_at {
            None => {
                // First CNP: α = 1, rate scaled by RATE_ON_FIRST_CNP, timers start.
                self.first_cnp_at = Some(now.0);
                self.alpha = 1.0;
                self.alpha_cnp_arrived = false;
                self.rate_bps *= p.rate_on_first_cnp;
                self.target_bps = self.rate_bps;
                self.decrease_check_pending = true;
                // The reference adds 1 ns so that the check runs after the α update of the
                // same instant.
                Some(Nanos(now.0 + p.rate_decrease_interval.0 + 1))
            }
            Some(t0) if !self.decrease_check_pending => {
                // The reference's decrease timer ticks every interval from the first CNP; a tick
                // with no CNP does nothing, so only the next tick after this CNP matters.
                let period = p.rate_decrease_interval.0;
                let base = t0 + 1;
                let k = if now.0 < base { 1 } else { (now.0 - base) / period + 1 };
                self.decrease_check_pending = true;
                Some(Nanos(base + k * period))
            }
            Some(_) => None,
        }
    }

    /// The rate-decrease check fires. Returns the time of the rate-increase timer to schedule
    /// (with generation [`Self::increase_timer_gen`]) when the rate was cut.
    pub fn on_decrease_check(&mut self, now: Nanos, p: &DcqcnParams) -> Option<Nanos> {
        self.decrease_check_pending = false;
        if !self.decrease_cnp_arrived {
            return None;
        }
        self.catch_up_alpha(now.0, p);
        if p.clamp_target_rate || self.stage != 0 {
            self.target_bps = self.rate_bps;
        }
        self.rate_bps = (self.rate_bps * (1.0 - self.alpha / 2.0)).max(p.min_rate.0 as f64);
        self.stage = 0;
        self.byte_stage = 0;
        self.bytes_since_stage = 0;
        self.decrease_cnp_arrived = false;
        self.increase_timer_gen = self.increase_timer_gen.wrapping_add(1);
        Some(Nanos(now.0 + p.rp_timer.0))
    }

    /// The rate-increase timer fires. Returns when it fires next.
    ///
    /// The stage is examined *before* it is incremented, as in the reference's
    /// `RateIncEventTimerMlx`: with F = 1 the first expiry after a cut is fast recovery, the
    /// second additive increase, later ones hyper increase.
    pub fn on_increase_timer(&mut self, now: Nanos, p: &DcqcnParams) -> Nanos {
        self.increase(p);
        self.stage = self.stage.saturating_add(1);
        Nanos(now.0 + p.rp_timer.0)
    }

    /// Account bytes sent, for the paper variant's byte counter.
    pub fn on_bytes_sent(&mut self, bytes: u64, p: &DcqcnParams) {
        let Some(bc) = p.byte_counter else { return };
        if self.first_cnp_at.is_none() {
            return;
        }
        self.bytes_since_stage += bytes;
        while self.bytes_since_stage >= bc.0 {
            self.bytes_since_stage -= bc.0;
            self.increase(p);
            self.byte_stage = self.byte_stage.saturating_add(1);
        }
    }

    fn increase(&mut self, p: &DcqcnParams) {
        let f = p.fast_recovery_times;
        // Without a byte counter its stage never moves and the timer stage decides alone.
        let (lo, hi) = if p.byte_counter.is_some() {
            (self.stage.min(self.byte_stage), self.stage.max(self.byte_stage))
        } else {
            (self.stage, self.stage)
        };
        if hi < f {
            // Fast recovery.
        } else if lo > f {
            self.target_bps = (self.target_bps + p.rate_hai.0 as f64).min(self.line_bps);
        } else {
            self.target_bps = (self.target_bps + p.rate_ai.0 as f64).min(self.line_bps);
        }
        self.rate_bps = self.rate_bps / 2.0 + self.target_bps / 2.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: BitsPerSec = BitsPerSec::from_gbps(100);

    #[test]
    fn hpcc_defaults_match_reference_table() {
        let p = DcqcnParams::hpcc(G100);
        assert_eq!(p.rate_ai, BitsPerSec(20_000_000));
        assert_eq!(p.rate_hai, BitsPerSec(200_000_000));
        assert_eq!(p.min_rate, BitsPerSec(1_000_000_000));
        assert_eq!(p.rp_timer, Nanos::from_micros(300));
        p.validate(G100).unwrap();
        DcqcnParams::paper().validate(G100).unwrap();
        let e = p.validate(BitsPerSec(500_000_000)).unwrap_err();
        assert!(e.contains("min_rate"), "{e}");
    }

    #[test]
    fn first_cnp_then_decrease_uses_decayed_alpha() {
        let p = DcqcnParams::hpcc(G100);
        let mut s = DcqcnSender::new(G100);
        let check = s.on_cnp(Nanos(1000), &p).unwrap();
        assert_eq!(check, Nanos(1000 + 4000 + 1));
        assert_eq!(s.rate_bps, 100e9); // RATE_ON_FIRST_CNP = 1
                                       // Four α slots pass without a CNP: α = (1-g)^4.
        let inc = s.on_decrease_check(check, &p).unwrap();
        let alpha = (1.0f64 - 1.0 / 256.0).powi(4);
        assert!((s.rate_bps - 100e9 * (1.0 - alpha / 2.0)).abs() < 1.0);
        assert_eq!(inc, Nanos(check.0 + 300_000));
    }

    #[test]
    fn lazy_alpha_equals_per_slot_updates() {
        let p = DcqcnParams::hpcc(G100);
        let g = p.ewma_gain;
        let mut s = DcqcnSender::new(G100);
        s.on_cnp(Nanos(0), &p);
        // CNPs in slots 3 and 10 (arriving mid-slot).
        s.on_cnp(Nanos(2_500), &p);
        s.on_cnp(Nanos(9_500), &p);
        let lazy = s.alpha(Nanos(20_000), &p);
        let mut a = 1.0f64;
        for slot in 1..=20u64 {
            let cnp = slot == 3 || slot == 10;
            a = (1.0 - g) * a + if cnp { g } else { 0.0 };
        }
        assert!((lazy - a).abs() < 1e-12, "{lazy} vs {a}");
    }

    #[test]
    fn increase_stage_is_checked_before_increment() {
        // F = 1: fast recovery, then additive, then hyper.
        let p = DcqcnParams::hpcc(G100);
        let mut s = DcqcnSender::new(G100);
        let check = s.on_cnp(Nanos(0), &p).unwrap();
        s.on_decrease_check(check, &p).unwrap();
        // Below line rate so that the increases are visible.
        s.target_bps = 60e9;
        let (rc, rt) = (s.rate_bps, s.target_bps);
        s.on_increase_timer(Nanos(0), &p);
        assert_eq!(s.target_bps, rt, "first expiry is fast recovery");
        assert!((s.rate_bps - (rc + rt) / 2.0).abs() < 1e-3);
        s.on_increase_timer(Nanos(0), &p);
        assert!((s.target_bps - (rt + 20e6)).abs() < 1e-3, "second expiry is additive");
        s.on_increase_timer(Nanos(0), &p);
        assert!((s.target_bps - (rt + 20e6 + 200e6)).abs() < 1e-3, "third expiry is hyper");
    }

    #[test]
    fn rate_never_below_min_rate() {
        let p = DcqcnParams::hpcc(G100);
        let mut s = DcqcnSender::new(G100);
        let mut t = 0;
        for _ in 0..200 {
            if let Some(c) = s.on_cnp(Nanos(t), &p) {
                s.on_decrease_check(c, &p);
                t = c.0;
            }
            t += 1;
        }
        assert!(s.rate_bps >= 1e9);
    }

    /// REFERENCE.md §2 "Byte counter", with the DCQCN paper's rule for combining it with the
    /// timer: fast recovery while both stages are below F, hyper increase once both are above
    /// it, additive increase otherwise.
    #[test]
    fn the_byte_counter_advances_its_own_stage() {
        let p = DcqcnParams::paper();
        let (f, ai, hai) = (p.fast_recovery_times, p.rate_ai.0 as f64, p.rate_hai.0 as f64);
        let line = BitsPerSec::from_gbps(40);
        let mut s = DcqcnSender::new(line);
        s.on_bytes_sent(50_000_000, &p);
        assert_eq!((s.rate_bps, s.target_bps), (40e9, 40e9), "a flow never cut has nothing to recover");
        let check = s.on_cnp(Nanos(0), &p).unwrap();
        s.on_decrease_check(check, &p).unwrap();
        // Below line rate so that every increase is visible.
        s.target_bps = 30e9;
        let (rc, rt) = (s.rate_bps, s.target_bps);
        s.on_bytes_sent(9_999_999, &p);
        assert_eq!(s.rate_bps, rc, "one byte short of the counter");
        s.on_bytes_sent(1, &p);
        assert_eq!(s.target_bps, rt, "fast recovery leaves the target");
        assert!((s.rate_bps - (rc + rt) / 2.0).abs() < 1e-3);
        // The counter's stage reaches F; with the timer's still at 0 the next step is additive.
        s.on_bytes_sent(u64::from(f - 1) * 10_000_000, &p);
        assert_eq!(s.target_bps, rt);
        s.on_bytes_sent(10_000_000, &p);
        assert!((s.target_bps - (rt + ai)).abs() < 1e-3, "one stage past F is additive");
        // The timer's stage catches up: additive until it too is past F, then hyper.
        for _ in 0..=f {
            s.on_increase_timer(Nanos(0), &p);
        }
        let additive = rt + ai * f64::from(f + 2);
        assert!((s.target_bps - additive).abs() < 1e-3, "{} vs {additive}", s.target_bps);
        s.on_bytes_sent(10_000_000, &p);
        assert!((s.target_bps - (additive + hai)).abs() < 1e-3, "both stages past F: hyper");
        // A rate cut restarts both stages, and the bytes counted towards the next one.
        s.on_bytes_sent(5_000_000, &p);
        let check = s.on_cnp(Nanos(100_000), &p).unwrap();
        s.on_decrease_check(check, &p).unwrap();
        let (rc, rt) = (s.rate_bps, s.target_bps);
        s.on_bytes_sent(5_000_000, &p);
        assert_eq!(s.rate_bps, rc, "the counter restarted at the cut");
        s.on_bytes_sent(5_000_000, &p);
        assert_eq!(s.target_bps, rt, "fast recovery again after the cut");
        assert!((s.rate_bps - (rc + rt) / 2.0).abs() < 1e-3);
    }
}
