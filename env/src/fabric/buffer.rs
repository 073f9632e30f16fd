//! A switch's shared buffer and PFC admission, as the HPCC simulator implements them
//! (REFERENCE.md §3).
//!
//! Accounting is by ingress (port, priority): the first `reserve` bytes are private, then
//! bytes go to the shared pool while the dynamic threshold allows, then to the port's
//! headroom. XOFF is due when headroom is in use or shared use reaches the threshold; XON
//! when headroom is empty and shared use has fallen `resume_offset` below the threshold.

use super::PRIORITIES;

/// Per-switch shared-buffer state.
#[derive(Debug, Clone)]
pub struct SharedBuffer {
    /// Total buffer, bytes.
    pub size: u64,
    /// Private bytes per (ingress port, priority).
    pub reserve: u64,
    /// XON hysteresis, bytes.
    pub resume_offset: u64,
    /// Σ headroom over the switch's ports.
    pub total_headroom: u64,
    /// Σ reserve over the switch's ports.
    pub total_reserve: u64,
    /// Bytes of the shared pool in use.
    pub shared_used: u64,
}

/// Per-ingress-port buffer state (only meaningful on switch ports).
#[derive(Debug, Clone, Default)]
pub struct IngressState {
    /// PFC headroom of this port, bytes ([`headroom_bytes`](super::headroom_bytes)).
    pub headroom: u64,
    /// Dynamic-threshold shift α = 1/2^shift.
    pub shift: u32,
    /// Bytes in the buffer that arrived on this port, per priority, excluding headroom.
    pub ingress_bytes: [u64; PRIORITIES],
    /// Headroom bytes in use, per priority.
    pub headroom_bytes: [u64; PRIORITIES],
    /// Priorities for which this port has sent XOFF upstream and not yet XON.
    pub paused_upstream: u8,
}

impl SharedBuffer {
    /// The dynamic PFC threshold of a port with the given shift.
    #[inline]
    pub fn pfc_threshold(&self, shift: u32) -> u64 {
        self.size.saturating_sub(self.total_headroom + self.total_reserve + self.shared_used) >> shift
    }

    #[inline]
    fn shared_of(&self, ing: &IngressState, prio: usize) -> u64 {
        ing.ingress_bytes[prio].saturating_sub(self.reserve)
    }

    /// Would a packet of `size` bytes be admitted? Refused only when headroom is full and the
    /// shared share is at the threshold: with correct headroom this never happens under PFC.
    #[inline]
    pub fn admits(&self, ing: &IngressState, prio: usize, size: u64) -> bool {
        !(size + ing.headroom_bytes[prio] > ing.headroom
            && size + self.shared_of(ing, prio) > self.pfc_threshold(ing.shift))
    }

    /// Account an admitted packet.
    #[inline]
    pub fn enqueue(&mut self, ing: &mut IngressState, prio: usize, size: u64) {
        let new_bytes = ing.ingress_bytes[prio] + size;
        if new_bytes <= self.reserve {
            ing.ingress_bytes[prio] = new_bytes;
        } else if new_bytes - self.reserve > self.pfc_threshold(ing.shift) {
            ing.headroom_bytes[prio] += size;
        } else {
            ing.ingress_bytes[prio] = new_bytes;
            self.shared_used += size.min(new_bytes - self.reserve);
        }
    }

    /// Release a departing packet: headroom first, then shared, then reserve.
    #[inline]
    pub fn dequeue(&mut self, ing: &mut IngressState, prio: usize, size: u64) {
        let from_headroom = ing.headroom_bytes[prio].min(size);
        let from_shared = (size - from_headroom).min(self.shared_of(ing, prio));
        ing.headroom_bytes[prio] -= from_headroom;
        ing.ingress_bytes[prio] -= size - from_headroom;
        self.shared_used -= from_shared;
    }

    /// Should this ingress (port, priority) send XOFF now?
    #[inline]
    pub fn should_pause(&self, ing: &IngressState, prio: usize) -> bool {
        ing.paused_upstream & (1 << prio) == 0
            && (ing.headroom_bytes[prio] > 0 || self.shared_of(ing, prio) >= self.pfc_threshold(ing.shift))
    }

    /// Should this ingress (port, priority) send XON now?
    #[inline]
    pub fn should_resume(&self, ing: &IngressState, prio: usize) -> bool {
        if ing.paused_upstream & (1 << prio) == 0 || ing.headroom_bytes[prio] != 0 {
            return false;
        }
        let shared = self.shared_of(ing, prio);
        shared == 0 || shared + self.resume_offset <= self.pfc_threshold(ing.shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer() -> SharedBuffer {
        SharedBuffer {
            size: 1_000_000,
            reserve: 4096,
            resume_offset: 3072,
            total_headroom: 2 * 37_500,
            total_reserve: 2 * 4096,
            shared_used: 0,
        }
    }

    #[test]
    fn threshold_follows_reference_formula() {
        let b = buffer();
        assert_eq!(b.pfc_threshold(3), (1_000_000 - 75_000 - 8192) >> 3);
    }

    #[test]
    fn fill_pause_drain_resume_and_conserve_bytes() {
        let mut b = buffer();
        let mut ing = IngressState { headroom: 37_500, shift: 3, ..Default::default() };
        let mut sent = 0u64;
        while !b.should_pause(&ing, 3) {
            assert!(b.admits(&ing, 3, 1036));
            b.enqueue(&mut ing, 3, 1036);
            sent += 1036;
        }
        ing.paused_upstream |= 1 << 3;
        // In-flight packets after XOFF land in headroom; the headroom absorbs them.
        for _ in 0..30 {
            assert!(b.admits(&ing, 3, 1036));
            b.enqueue(&mut ing, 3, 1036);
            sent += 1036;
        }
        assert!(ing.headroom_bytes[3] > 0);
        let mut resumed = false;
        while sent > 0 {
            b.dequeue(&mut ing, 3, 1036);
            sent -= 1036;
            if b.should_resume(&ing, 3) {
                ing.paused_upstream &= !(1 << 3);
                resumed = true;
            }
        }
        assert!(resumed);
        assert_eq!((ing.ingress_bytes[3], ing.headroom_bytes[3], b.shared_used), (0, 0, 0));
    }

    /// The dynamic threshold's steady state (Choudhury and Hahne): one congested ingress with
    /// α = 1/2^shift pauses once its shared bytes s reach α·(free − s), i.e. at α/(1+α) of the
    /// buffer left after headroom and reserve, 1/9 of it for NIC-speed ports (shift 3) and 1/3
    /// for 400G ports on 100G NICs (shift 1, REFERENCE.md §3). It resumes once s + 3 KB fits
    /// under the threshold again: s ≤ (free − 3072/α)·α/(1+α).
    #[test]
    fn one_congested_ingress_pauses_at_its_share_of_the_free_buffer() {
        const PKT: u64 = 1036;
        for shift in [3u32, 1] {
            let mut b = buffer();
            let free = (b.size - b.total_headroom - b.total_reserve) as f64;
            let alpha = 1.0 / f64::from(1u32 << shift);
            let mut ing = IngressState { headroom: 37_500, shift, ..Default::default() };
            while !b.should_pause(&ing, 3) {
                b.enqueue(&mut ing, 3, PKT);
            }
            let paused_at = b.shared_used as f64;
            let expected = free * alpha / (1.0 + alpha);
            assert!(
                (paused_at - expected).abs() <= PKT as f64,
                "shift {shift}: XOFF at {paused_at} B, expected {expected}"
            );
            ing.paused_upstream |= 1 << 3;
            while !b.should_resume(&ing, 3) {
                b.dequeue(&mut ing, 3, PKT);
            }
            let resumed_at = b.shared_used as f64;
            let expected = (free - b.resume_offset as f64 / alpha) * alpha / (1.0 + alpha);
            assert!(
                (resumed_at - expected).abs() <= PKT as f64,
                "shift {shift}: XON at {resumed_at} B, expected {expected}"
            );
        }
    }

    #[test]
    fn full_headroom_drops() {
        let mut b = buffer();
        let mut ing = IngressState { headroom: 5000, shift: 3, ..Default::default() };
        let mut admitted = 0;
        while b.admits(&ing, 3, 1036) {
            b.enqueue(&mut ing, 3, 1036);
            admitted += 1;
            assert!(admitted < 10_000);
        }
        assert!(ing.headroom_bytes[3] + 1036 > 5000);
    }
}
