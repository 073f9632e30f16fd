//! A link end's transmitter: its eight egress queues, the PFC pause state its peer sets, and
//! the choice of the next queue to serve (strict priority for queue 0, round-robin among data
//! priorities).

use crate::ecn::EcnSetting;
use crate::topology::NodeId;
use crate::units::BitsPerSec;
use std::collections::VecDeque;

/// One end of a link: a transmitter with its queues.
#[derive(Debug)]
pub(crate) struct Port {
    pub node: NodeId,
    pub rate: BitsPerSec,
    pub delay: u64,
    /// The transmitter is busy until this time.
    pub busy_until: u64,
    /// Earliest pending `PortReady` event, `u64::MAX` if none.
    pub ready_at: u64,
    /// Egress queues by priority (switch ports; hosts use queue 0 for ACKs). Change them
    /// through [`Port::enqueue`] and [`Port::dequeue`], which keep `backlog` in step.
    pub queues: [VecDeque<u32>; 8],
    /// Bit p set: `queues[p]` is non-empty.
    pub backlog: u8,
    /// Bytes waiting per priority (the depth ECN marking looks at).
    pub queued_bytes: [u64; 8],
    /// Priorities paused by the peer's PFC.
    pub paused: u8,
    /// Round-robin position among data priorities.
    pub rr_last: u8,
    /// ECN profile per priority.
    pub ecn: [EcnSetting; 8],
    /// Bit p set: priority p CE-marks every data packet whatever its profile says (an
    /// injected fault, [`Simulator::set_marking_fault`](super::Simulator::set_marking_fault)).
    pub mark_all: u8,
    /// Bit p set: priority p marks no packet whatever its profile says (an injected fault).
    pub mark_none: u8,
    /// Bytes sent before the end of the arrival window.
    pub window_tx_bytes: u64,
    /// When each priority's current pause began (`u64::MAX`: not paused), for the
    /// fabric-wide paused time.
    pub pause_began: [u64; 8],
}

impl Port {
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
