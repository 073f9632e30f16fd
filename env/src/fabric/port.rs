//! A link end's transmitter: its eight egress queues, the PFC pause state its peer sets, and
//! the choice of the next queue to serve (strict priority for queue 0, round-robin among data
//! priorities).

use super::PRIORITIES;
use crate::ecn::EcnSetting;
use crate::topology::NodeId;
use crate::units::{BitsPerSec, Nanos};
use std::collections::VecDeque;

/// One end of a link: a transmitter with its queues.
#[derive(Debug)]
pub(crate) struct Port {
    pub node: NodeId,
    pub rate: BitsPerSec,
    /// Propagation delay of the link this port sends onto.
    pub delay: Nanos,
    /// The transmitter is busy until this time.
    pub busy_until: u64,
    /// Earliest pending `PortReady` event, `u64::MAX` if none.
    pub ready_at: u64,
    /// Egress queues by priority (switch ports; hosts use queue 0 for ACKs). Change them
    /// through [`Port::enqueue`] and [`Port::dequeue`], which keep `backlog` in step.
    pub queues: [VecDeque<u32>; PRIORITIES],
    /// Bit p set: `queues[p]` is non-empty.
    pub backlog: u8,
    /// Bytes waiting per priority (the depth ECN marking looks at).
    pub queued_bytes: [u64; PRIORITIES],
    /// Priorities paused by the peer's PFC.
    pub paused: u8,
    /// Round-robin position among data priorities.
    pub rr_last: u8,
    /// ECN profile per priority.
    pub ecn: [EcnSetting; PRIORITIES],
    /// Bit p set: priority p CE-marks every data packet whatever its profile says (an
    /// injected fault, [`Simulator::set_marking_fault`](super::Simulator::set_marking_fault)).
    pub mark_all: u8,
    /// Bit p set: priority p marks no packet whatever its profile says (an injected fault).
    pub mark_none: u8,
    /// Bytes sent before the end of the arrival window.
    pub window_tx_bytes: u64,
    /// When each priority's current pause began (`u64::MAX`: not paused), for the
    /// fabric-wide paused time.
    pub pause_began: [u64; PRIORITIES],
}

impl Port {
    /// An idle transmitter of `node` onto a link of `rate` and `delay`, every priority
    /// marking by `ecn`.
    pub fn new(node: NodeId, rate: BitsPerSec, delay: Nanos, ecn: EcnSetting) -> Port {
        Port {
            node,
            rate,
            delay,
            busy_until: 0,
            ready_at: u64::MAX,
            queues: Default::default(),
            backlog: 0,
            queued_bytes: [0; PRIORITIES],
            paused: 0,
            rr_last: 0,
            ecn: [ecn; PRIORITIES],
            mark_all: 0,
            mark_none: 0,
            window_tx_bytes: 0,
            pause_began: [u64::MAX; PRIORITIES],
        }
    }

    /// Append a packet to priority `prio`.
    #[inline]
    pub fn enqueue(&mut self, prio: usize, pkt: u32) {
        self.queues[prio].push_back(pkt);
        self.backlog |= 1 << prio;
    }

    /// Take the head of priority `prio`.
    #[inline]
    pub fn dequeue(&mut self, prio: usize) -> Option<u32> {
        self.dequeue_at(prio, 0)
    }

    /// Take the packet at position `index` of priority `prio`.
    #[inline]
    pub fn dequeue_at(&mut self, prio: usize, index: usize) -> Option<u32> {
        let pkt = if index == 0 { self.queues[prio].pop_front() } else { self.queues[prio].remove(index) };
        if self.queues[prio].is_empty() {
            self.backlog &= !(1 << prio);
        }
        pkt
    }

    /// The next queue to serve: 0 if it has packets (strict priority), else the next
    /// non-empty, non-paused data priority after the last one served (round-robin).
    #[inline]
    pub fn next_queue(&self) -> Option<usize> {
        if self.backlog & 1 != 0 {
            return Some(0);
        }
        let eligible = self.backlog & !self.paused & 0xFE;
        if eligible == 0 {
            return None;
        }
        let from = (self.rr_last as u32 + 1) % 8;
        Some(((from + eligible.rotate_right(from).trailing_zeros()) % 8) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port() -> Port {
        Port::new(
            0,
            BitsPerSec(100_000_000_000),
            Nanos(1000),
            EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.01 },
        )
    }

    /// Serve the port as `switch_try_send` does, `n` times; the priorities served, in order.
    fn serve(p: &mut Port, n: usize) -> Vec<usize> {
        let mut order = Vec::new();
        for _ in 0..n {
            let Some(prio) = p.next_queue() else { break };
            if prio != 0 {
                p.rr_last = prio as u8;
            }
            p.dequeue(prio).expect("next_queue names a non-empty queue");
            order.push(prio);
        }
        order
    }

    #[test]
    fn control_queue_goes_first_even_with_every_data_priority_paused() {
        // REFERENCE.md §3: queue 0 (PAUSE, CNP, ACK) has strict priority.
        let mut p = port();
        for pkt in 0..3 {
            p.enqueue(3, pkt);
            p.enqueue(0, 10 + pkt);
        }
        p.rr_last = 2;
        assert_eq!(serve(&mut p, 3), [0, 0, 0]);
        p.enqueue(0, 20);
        p.paused = 0xFE;
        assert_eq!(serve(&mut p, 8), [0], "paused data waits, control does not");
        p.paused = 0;
        assert_eq!(serve(&mut p, 8), [3, 3, 3]);
        assert_eq!(p.backlog, 0);
    }

    #[test]
    fn data_priorities_take_turns_and_a_paused_one_is_skipped() {
        let mut p = port();
        for pkt in 0..4 {
            for prio in [1, 3, 6] {
                p.enqueue(prio, pkt);
            }
        }
        p.rr_last = 3;
        // Round-robin from the one after the last served, wrapping past 7 to 1 (never 0).
        assert_eq!(serve(&mut p, 6), [6, 1, 3, 6, 1, 3]);
        p.paused = 1 << 1;
        assert_eq!(serve(&mut p, 8), [6, 3, 6, 3], "priority 1 is paused");
        assert_eq!(p.next_queue(), None, "only a paused priority has packets");
        p.paused = 0;
        assert_eq!(serve(&mut p, 8), [1, 1]);
        assert_eq!(p.next_queue(), None);
    }
}
