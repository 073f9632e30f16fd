//! The event queue: a timing wheel for the near future and a heap for the far future.
//!
//! Almost every event a packet causes (arrival after a link, the transmitter going idle)
//! happens within a few microseconds, so those go into a wheel of one-nanosecond slots with a
//! bitmap of non-empty slots: O(1) to schedule, a few word scans to find the next. Timers that
//! fire later (DCQCN's 300 µs increase timer, flow starts, telemetry ticks) wait in a binary
//! heap and move into the wheel when they come within its horizon.
//!
//! Events at the same instant run in the order they were scheduled, as in ns-3, so a run is a
//! pure function of its inputs: the heap breaks ties by a sequence number, and far events move
//! into the wheel before anything scheduled later can reach the same slot.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

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
    /// An injected PFC frame arrives at `port` for `prio` (fault injection).
    InjectedPfc {
        /// Receiving port.
        port: u32,
        /// Priority.
        prio: u8,
        /// XOFF if true, XON otherwise.
        pause: bool,
    },
}

/// Slots in the wheel (one per nanosecond): its horizon.
const WHEEL: usize = 1 << 13;
const MASK: u64 = WHEEL as u64 - 1;

#[derive(Debug, Clone, Copy)]
struct Far {
    time: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Far {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Far {}
impl PartialOrd for Far {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Far {
    // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time.cmp(&self.time).then_with(|| o.seq.cmp(&self.seq))
    }
}

/// Pending events ordered by (time, scheduling order).
#[derive(Debug)]
pub struct EventQueue {
    /// Events at times in `[now, now + WHEEL)`, slot = time mod WHEEL.
    slots: Vec<VecDeque<Event>>,
    /// Bit i set: slot i is non-empty.
    occupied: Vec<u64>,
    near_len: usize,
    far: BinaryHeap<Far>,
    next_seq: u64,
    /// The wheel's origin: no pending event is earlier.
    now: u64,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            slots: (0..WHEEL).map(|_| VecDeque::new()).collect(),
            occupied: vec![0; WHEEL / 64],
            near_len: 0,
            far: BinaryHeap::new(),
            next_seq: 0,
            now: 0,
        }
    }
}

impl EventQueue {
    /// Schedule `event` at absolute time `time` (ns). Times before the last popped event are
    /// treated as "now".
    #[inline]
    pub fn push(&mut self, time: u64, event: Event) {
        let time = time.max(self.now);
        if time - self.now < WHEEL as u64 {
            self.push_near(time, event);
        } else {
            self.far.push(Far { time, seq: self.next_seq, event });
            self.next_seq += 1;
        }
    }

    #[inline]
    fn push_near(&mut self, time: u64, event: Event) {
        let slot = (time & MASK) as usize;
        self.slots[slot].push_back(event);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.near_len += 1;
    }

    /// Time of the earliest pending event in the wheel, if any.
    fn next_near_time(&self) -> Option<u64> {
        if self.near_len == 0 {
            return None;
        }
        let start = (self.now & MASK) as usize;
        let words = WHEEL / 64;
        let (w0, b0) = (start / 64, start % 64);
        // First word: bits at or after the current slot.
        let first = self.occupied[w0] & (!0u64 << b0);
        if first != 0 {
            let slot = w0 * 64 + first.trailing_zeros() as usize;
            return Some(self.now + (slot - start) as u64);
        }
        for k in 1..=words {
            let w = (w0 + k) % words;
            let mut bits = self.occupied[w];
            if k == words {
                bits &= (1u64 << b0).wrapping_sub(1);
            }
            if bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                let dist = (slot + WHEEL - start) % WHEEL;
                return Some(self.now + dist as u64);
            }
        }
        None
    }

    /// Remove and return the earliest event if it is due at or before `limit`.
    #[inline]
    pub fn pop_until(&mut self, limit: u64) -> Option<(u64, Event)> {
        let t = match self.next_near_time() {
            Some(t) => t,
            None => {
                // The wheel is empty: jump to the far future.
                let t = self.far.peek()?.time;
                if t > limit {
                    return None;
                }
                self.advance(t);
                t
            }
        };
        if t > limit {
            return None;
        }
        if t != self.now {
            self.advance(t);
        }
        let slot = (t & MASK) as usize;
        let ev = self.slots[slot].pop_front().expect("occupied slot");
        if self.slots[slot].is_empty() {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.near_len -= 1;
        Some((t, ev))
    }

    /// Move the origin to `t` and pull far events that are now within the horizon.
    fn advance(&mut self, t: u64) {
        self.now = t;
        while let Some(f) = self.far.peek() {
            if f.time - self.now >= WHEEL as u64 {
                break;
            }
            let f = self.far.pop().expect("peeked");
            self.push_near(f.time, f.event);
        }
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.near_len + self.far.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut EventQueue) -> Vec<(u64, Event)> {
        std::iter::from_fn(|| q.pop_until(u64::MAX)).collect()
    }

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = EventQueue::default();
        q.push(5, Event::Rto(1));
        q.push(3, Event::Rto(2));
        q.push(5, Event::Rto(3));
        q.push(3, Event::Rto(4));
        assert_eq!(drain(&mut q), vec![(3, Event::Rto(2)), (3, Event::Rto(4)), (5, Event::Rto(1)), (5, Event::Rto(3))]);
    }

    #[test]
    fn far_events_keep_fifo_with_near_ones() {
        let mut q = EventQueue::default();
        let t = 3 * WHEEL as u64 + 17;
        q.push(t, Event::Rto(1)); // far when scheduled
        q.push(t - WHEEL as u64 + 5, Event::Rto(2));
        // Popping Rto(2) brings t within the horizon; a later push at t must follow Rto(1).
        assert_eq!(q.pop_until(u64::MAX), Some((t - WHEEL as u64 + 5, Event::Rto(2))));
        q.push(t, Event::Rto(3));
        assert_eq!(drain(&mut q), vec![(t, Event::Rto(1)), (t, Event::Rto(3))]);
    }

    #[test]
    fn matches_a_sorted_reference_on_random_schedules() {
        let mut rng = crate::rng::Rng::new(5, 0);
        let mut q = EventQueue::default();
        let mut reference: Vec<(u64, u64)> = Vec::new();
        let mut now = 0;
        let mut seq = 0;
        let mut popped = Vec::new();
        for _ in 0..20_000 {
            if rng.below(3) > 0 {
                let horizon = if rng.below(10) == 0 { 100_000 } else { 3_000 };
                let t = now + rng.below(horizon);
                q.push(t, Event::Rto(seq as u32));
                reference.push((t, seq));
                seq += 1;
            } else if let Some((t, ev)) = q.pop_until(u64::MAX) {
                now = t;
                popped.push((t, ev));
            }
        }
        popped.extend(drain(&mut q));
        reference.sort();
        let want: Vec<(u64, Event)> = reference.into_iter().map(|(t, s)| (t, Event::Rto(s as u32))).collect();
        assert_eq!(popped.len(), want.len());
        // Pops interleaved with pushes: every popped sequence must be non-decreasing in time,
        // and the multiset of events must match.
        assert!(popped.windows(2).all(|w| w[0].0 <= w[1].0));
        let mut a = popped.clone();
        a.sort_by_key(|(t, e)| (*t, format!("{e:?}")));
        let mut b = want.clone();
        b.sort_by_key(|(t, e)| (*t, format!("{e:?}")));
        assert_eq!(a, b);
    }

    #[test]
    fn respects_the_limit() {
        let mut q = EventQueue::default();
        q.push(10, Event::Sample);
        q.push(100_000, Event::Sample);
        assert_eq!(q.pop_until(9), None);
        assert_eq!(q.pop_until(10), Some((10, Event::Sample)));
        assert_eq!(q.pop_until(99_999), None);
        assert_eq!(q.pop_until(100_000), Some((100_000, Event::Sample)));
        assert!(q.is_empty());
    }
}
