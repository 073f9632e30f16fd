//! The event queue: a timing wheel for the near future and a heap for the far future.
//!
//! Almost every event a packet causes (arrival after a link, the transmitter going idle)
//! happens within a few microseconds, so those go into a wheel of one-nanosecond slots with a
//! bitmap of non-empty slots: O(1) to schedule, a few word scans to find the next. Timers that
//! fire later (DCQCN's 300 µs increase timer, flow starts, telemetry ticks) wait in a binary
//! heap and move into the wheel when they come within its horizon.
//!
//! Each slot is a FIFO list threaded through one pool of nodes, with freed nodes reused first.
//! The slots' list ends take 64 KB and the live nodes stay few and warm, so scheduling and
//! popping hit the cache: a queue per slot spread the wheel over about 800 KB and made the
//! two the simulator's hottest functions.
//!
//! Events at the same instant run in the order they were scheduled, as in ns-3, so a run is a
//! pure function of its inputs: the heap breaks ties by a sequence number, and far events move
//! into the wheel before anything scheduled later can reach the same slot.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens. Payloads are indices into the simulator's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Flow `.0` (index into the flow table) starts.
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

/// "No node": the end of a list.
const NIL: u32 = u32::MAX;

/// One scheduled event in a slot's list.
#[derive(Debug, Clone, Copy)]
struct Node {
    event: Event,
    /// The next node of the same slot (or of the free list), or `NIL`.
    next: u32,
}

/// First and last node of one slot's list; both `NIL` when the slot is empty.
#[derive(Debug, Clone, Copy)]
struct Slot {
    head: u32,
    tail: u32,
}

const EMPTY_SLOT: Slot = Slot { head: NIL, tail: NIL };

/// Pending events ordered by (time, scheduling order).
#[derive(Debug)]
pub struct EventQueue {
    /// Events at times in `[now, now + WHEEL)`, slot = time mod WHEEL.
    slots: Vec<Slot>,
    /// Every node, live or free.
    nodes: Vec<Node>,
    /// The most recently freed node (the free list is a stack, so reuse stays in cache).
    free: u32,
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
            slots: vec![EMPTY_SLOT; WHEEL],
            nodes: Vec::new(),
            free: NIL,
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
        let node = Node { event, next: NIL };
        let idx = if self.free != NIL {
            let idx = self.free;
            self.free = self.nodes[idx as usize].next;
            self.nodes[idx as usize] = node;
            idx
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        let slot = (time & MASK) as usize;
        let s = &mut self.slots[slot];
        if s.tail == NIL {
            s.head = idx;
            self.occupied[slot / 64] |= 1 << (slot % 64);
        } else {
            self.nodes[s.tail as usize].next = idx;
        }
        s.tail = idx;
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
        let s = &mut self.slots[slot];
        let idx = s.head;
        let Node { event, next } = self.nodes[idx as usize];
        s.head = next;
        if next == NIL {
            s.tail = NIL;
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.nodes[idx as usize].next = self.free;
        self.free = idx;
        self.near_len -= 1;
        Some((t, event))
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
    fn matches_a_time_then_fifo_reference_on_random_schedules() {
        // The reference is a heap on (time, scheduling order). Pushes land at or after the
        // last pop, as in the simulator, so every pop must match it exactly: same time, and
        // among events at one instant, the one scheduled first.
        use std::cmp::Reverse;
        let mut rng = crate::rng::Rng::new(5, 0);
        let mut q = EventQueue::default();
        let mut reference = BinaryHeap::new();
        let mut now = 0;
        let mut pops = 0;
        for seq in 0..40_000u32 {
            if rng.below(3) > 0 {
                // Mostly near, some far, and many at one instant to exercise the FIFO.
                let t = match rng.below(10) {
                    0 => now + rng.below(100_000),
                    1..=3 => now + rng.below(4),
                    _ => now + rng.below(3_000),
                };
                q.push(t, Event::Rto(seq));
                reference.push(Reverse((t, seq)));
            } else {
                let want = reference.pop().map(|Reverse((t, s))| (t, Event::Rto(s)));
                let got = q.pop_until(u64::MAX);
                assert_eq!(got, want);
                if let Some((t, _)) = got {
                    now = t;
                    pops += 1;
                }
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some(Reverse((t, s))) = reference.pop() {
            assert_eq!(q.pop_until(u64::MAX), Some((t, Event::Rto(s))));
        }
        assert!(q.is_empty() && pops > 10_000);
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
