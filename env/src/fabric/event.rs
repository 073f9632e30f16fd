//! The event queue: a binary min-heap of compact, copyable events.
//!
//! Events at the same instant run in the order they were scheduled (a sequence number breaks
//! ties), as in ns-3, so a run is a pure function of its inputs.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens. Payloads are indices into the simulator's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Flow `0` (index into the flow table) starts.
    FlowStart(u32),
    /// Packet `pkt` finishes arriving at port `port` (serialization and propagation done).
    Arrive {
        /// Receiving port.
        port: u32,
        /// Packet index in the pool.
        pkt: u32,
    },
    /// Port's transmitter went idle: it may start the next packet.
    PortReady(u32),
    /// A NIC's pacing timer: a rate-limited flow may be eligible to send.
    NicWake(u32),
    /// DCQCN rate-decrease check of a flow.
    DecreaseCheck(u32),
    /// DCQCN rate-increase timer of a flow, valid while `gen` matches the flow's timer.
    IncreaseTimer {
        /// Flow index.
        flow: u32,
        /// Timer generation.
        gen: u32,
    },
    /// Retransmission-timeout check of a flow.
    Rto(u32),
    /// Close the telemetry interval.
    Sample,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    time: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time.cmp(&self.time).then_with(|| o.seq.cmp(&self.seq))
    }
}

/// Pending events ordered by (time, scheduling order).
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Entry>,
    next_seq: u64,
}

impl EventQueue {
    /// Schedule `event` at absolute time `time` (ns).
    #[inline]
    pub fn push(&mut self, time: u64, event: Event) {
        self.heap.push(Entry { time, seq: self.next_seq, event });
        self.next_seq += 1;
    }

    /// Time of the earliest event.
    #[inline]
    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.time)
    }

    /// Remove and return the earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        self.heap.pop().map(|e| (e.time, e.event))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = EventQueue::default();
        q.push(5, Event::Rto(1));
        q.push(3, Event::Rto(2));
        q.push(5, Event::Rto(3));
        q.push(3, Event::Rto(4));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(3, Event::Rto(2)), (3, Event::Rto(4)), (5, Event::Rto(1)), (5, Event::Rto(3))]
        );
    }
}
