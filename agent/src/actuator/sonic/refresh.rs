//! Keeping the poller's reads clear of the moments SONiC refreshes the queue counters.
//!
//! Each of SONiC's flex counter groups has a thread (sairedis `FlexCounter`) that refreshes the
//! group's counters, then waits its `POLL_INTERVAL` less the whole milliseconds the refresh
//! took: every cycle runs long by the fraction of a millisecond it dropped and the thread's
//! wake-up. A poller at the same interval (the default: `--poll-interval` follows SONiC) drifts
//! against the queue group's refreshes by about that much a period, and now and then a refresh
//! comes to a poll. While the two are closer than the refresh's own jitter, a queue's polls see
//! no refresh and then two: a sample of an idle queue beside one at twice its rate (dropped as a
//! reset where the queue runs above 62.5% of line rate, published otherwise). At half a
//! millisecond a cycle, a refresh crosses a poll every two days or so at SONiC's 10 s, every
//! half hour at `counterpoll queue interval 1000`.
//!
//! [`RefreshGuard`] watches a few queues that carry traffic, spread over the polled queues
//! from the first to the last (SONiC's refresh reads a switch's queues one after another, and
//! on a large switch that sweep takes a while: neighbours are refreshed together, queues across
//! the switch span the sweep's length): it reads their byte counters a
//! quarter refresh after each poll and a quarter refresh before the next. A counter that moved
//! between a poll and either look means a refresh within a quarter refresh of the poll: only the
//! queue group writes `SAI_QUEUE_STAT_BYTES` (the packet counter is no such sign: the PFC
//! watchdog's group refreshes it too, every 200 ms where it runs). The timetable then moves to
//! half a refresh past it, and the poll there is a new baseline: the interval across the move
//! holds no, one or two refreshes in a span that is not a period, so it is dropped, never
//! guessed. Between moves every interval holds as many refreshes as it is periods long. It
//! guards a `--poll-interval` that is a whole number of SONiC's queue refreshes; any other is
//! aliased against them anyway, which no timetable undoes.

use std::time::{Duration, Instant};

/// How many queues are watched; one that stops carrying traffic only delays a move a period.
const SENTINELS: usize = 4;

/// One polled queue as a poll read it: its index among the polled queues, its byte counter,
/// and whether that moved since the poll before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueBytes {
    /// Index among the poller's queues.
    pub queue: usize,
    /// `SAI_QUEUE_STAT_BYTES`.
    pub bytes: u64,
    /// Whether it moved since the previous poll (a refresh came with traffic on it).
    pub moved: bool,
}

/// What the guard does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Nothing: no queue to watch (no traffic, a baseline poll) or no guarding.
    Idle,
    /// Look at `at`, a quarter refresh after the poll at `poll`; the next is due at `next_poll`.
    After { poll: Instant, at: Instant, next_poll: Instant },
    /// Look at `at`, a quarter refresh before the next poll.
    Before { at: Instant },
    /// Looked at `at`, before the poll; that poll compares.
    Looked { at: Instant },
}

/// Moves the poll timetable away from SONiC's queue counter refreshes (module docs).
#[derive(Debug)]
pub struct RefreshGuard {
    /// How often SONiC refreshes the queue counters; `None`: the poll interval is not a whole
    /// number of them, and nothing is guarded.
    refresh: Option<Duration>,
    /// The queues watched, with their byte counters at the last poll or look.
    sentinels: Vec<(usize, u64)>,
    look: Look,
}

impl Default for RefreshGuard {
    fn default() -> Self {
        RefreshGuard { refresh: None, sentinels: Vec::new(), look: Look::Idle }
    }
}

impl RefreshGuard {
    /// Takes how often SONiC refreshes the queue counters, as last read, and the poll interval.
    /// A change starts the watch again.
    pub fn retune(&mut self, refresh: Duration, poll: Duration) {
        let refresh = guards(refresh, poll).then_some(refresh);
        if refresh != self.refresh {
            self.refresh = refresh;
            self.clear();
        }
    }

    /// Forgets what it watched: the poll failed, was withheld, or the counters start afresh.
    pub fn clear(&mut self) {
        self.sentinels.clear();
        self.look = Look::Idle;
    }

    /// The queue counters refresh seen closer to a poll than this moves the timetable.
    fn margin(refresh: Duration) -> Duration {
        refresh / 4
    }

    /// When the next look is due.
    pub fn due(&self) -> Option<Instant> {
        match self.look {
            Look::After { at, .. } | Look::Before { at, .. } => Some(at),
            Look::Idle | Look::Looked { .. } => None,
        }
    }

    /// The queues a look reads, in the order [`RefreshGuard::looked`] takes them.
    pub fn watched(&self) -> Vec<usize> {
        self.sentinels.iter().map(|s| s.0).collect()
    }

    /// Takes a poll's byte counters, read at `at`, with the next poll due at `next_poll`.
    /// Returns where the timetable moves to, if a refresh came just before this poll; the
    /// caller then takes the next poll as a baseline. This poll's interval is whole.
    pub fn polled(&mut self, at: Instant, next_poll: Instant, read: &[QueueBytes]) -> Option<Instant> {
        let refresh = self.refresh?;
        if let Look::Looked { at: looked } = self.look {
            // A late poll widens the window past the margin: then it says too little.
            let window = at.saturating_duration_since(looked);
            if window <= 2 * Self::margin(refresh) && self.moved_since(read.iter().map(|q| (q.queue, q.bytes))) {
                self.clear();
                return Some(looked + window / 2 + refresh / 2);
            }
        }
        let moved: Vec<&QueueBytes> = read.iter().filter(|q| q.moved).collect();
        self.sentinels = spread(moved.len(), SENTINELS).map(|i| (moved[i].queue, moved[i].bytes)).collect();
        self.look = if self.sentinels.is_empty() {
            Look::Idle
        } else {
            Look::After { poll: at, at: at + Self::margin(refresh), next_poll }
        };
        None
    }

    /// Takes a look's byte counters of the queues [`RefreshGuard::watched`] named, in order
    /// (`None`: not read), read at `at`. Returns where the timetable moves to, if a refresh
    /// came just after the last poll; the caller then takes the next poll as a baseline.
    pub fn looked(&mut self, at: Instant, bytes: &[Option<u64>]) -> Option<Instant> {
        let refresh = self.refresh?;
        let read = self.sentinels.iter().zip(bytes).filter_map(|(s, p)| Some((s.0, (*p)?))).collect::<Vec<_>>();
        match self.look {
            Look::After { poll, next_poll, .. } => {
                let window = at.saturating_duration_since(poll);
                if window <= 2 * Self::margin(refresh) && self.moved_since(read.iter().copied()) {
                    self.clear();
                    return Some(poll + window / 2 + refresh / 2);
                }
                let before = next_poll.checked_sub(Self::margin(refresh)).filter(|&b| b > at);
                self.look = before.map_or(Look::Idle, |b| Look::Before { at: b });
            }
            Look::Before { .. } => {
                // Only what this look read is compared at the poll: a queue it missed still has
                // the last poll's count, which every refresh since moves.
                self.sentinels = read;
                self.look = if self.sentinels.is_empty() { Look::Idle } else { Look::Looked { at } };
            }
            Look::Idle | Look::Looked { .. } => {}
        }
        None
    }

    /// Whether a watched queue's bytes differ from what was last seen of them.
    fn moved_since(&self, read: impl Iterator<Item = (usize, u64)>) -> bool {
        let read: Vec<(usize, u64)> = read.collect();
        self.sentinels.iter().any(|&(q, was)| read.iter().any(|&(r, now)| r == q && now != was))
    }
}

/// `most` of `0..len` (all of them, if there are no more), spread evenly from the first to the
/// last, in order.
fn spread(len: usize, most: usize) -> impl Iterator<Item = usize> {
    let take = len.min(most);
    (0..take).map(move |k| if take < 2 { 0 } else { k * (len - 1) / (take - 1) })
}

/// Whether a poll every `poll` is guarded against refreshes every `refresh`: it is a whole number
/// of them. Off by a little, the two drift apart by that much a period, faster than any guard
/// should move (2% off: a move every dozen periods), and an interval now and then holds one
/// refresh more or less, as it must.
pub fn guards(refresh: Duration, poll: Duration) -> bool {
    !refresh.is_zero() && poll >= refresh && poll.as_nanos().is_multiple_of(refresh.as_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A switch that refreshes its counters every `cycle` from `first` after `base`, each
    /// refresh `jitter` early or late at random (seeded), with traffic at every one.
    struct Switch {
        base: Instant,
        refreshes: Vec<Instant>,
    }

    impl Switch {
        fn new(first: Duration, cycle: Duration, jitter: Duration, horizon: Duration, seed: u64) -> Switch {
            let base = Instant::now();
            let mut state = seed;
            let mut refreshes = Vec::new();
            let mut at = first;
            while at < horizon {
                // A linear congruential draw in [-jitter, +jitter].
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
                refreshes.push(base + at + jitter.mul_f64(2.0 * unit) - jitter);
                at += cycle;
            }
            Switch { base, refreshes }
        }

        /// The byte counter at `t`: a thousand bytes a refresh.
        fn bytes(&self, t: Instant) -> u64 {
            self.refreshes.partition_point(|&r| r <= t) as u64 * 1_000
        }
    }

    /// Polls `switch` every `poll` for `periods` as the poller does, guarded or not; returns how
    /// many refreshes each sampled interval held, and how often the timetable moved.
    fn run(switch: &Switch, refresh: Duration, poll: Duration, periods: u32, guarded: bool) -> (Vec<u64>, u32) {
        let mut guard = RefreshGuard::default();
        if guarded {
            guard.retune(refresh, poll);
        }
        let (mut next, mut last, mut held, mut moves) = (switch.base, None, Vec::new(), 0);
        for _ in 0..periods {
            while let Some(at) = guard.due().filter(|at| *at < next) {
                if let Some(to) = guard.looked(at, &vec![Some(switch.bytes(at)); guard.watched().len()]) {
                    (next, last, moves) = (to, None, moves + 1);
                }
            }
            let bytes = switch.bytes(next);
            let moved = last.is_some_and(|l| l != bytes);
            if let Some(l) = last {
                held.push((bytes - l) / 1_000);
            }
            last = Some(bytes);
            let read = [QueueBytes { queue: 7, bytes, moved }];
            match guard.polled(next, next + poll, &read) {
                Some(to) => (next, last, moves) = (to, None, moves + 1),
                None => next += poll,
            }
        }
        (held, moves)
    }

    /// SONiC's refresh drifting against polls at its interval (later, as its cycle runs long;
    /// earlier, as another host's clock may see it), jittered: unguarded, some intervals hold
    /// no refresh or two; guarded, every interval holds one (or two for polls two refreshes
    /// apart), at the cost of a move now and then.
    #[test]
    fn every_interval_holds_whole_refreshes_as_the_refresh_drifts() {
        let ms = Duration::from_millis;
        let refresh = ms(1_000);
        for (cycle, poll, jitter, first) in [
            (ms(1_003), ms(1_000), ms(5), ms(900)),
            (ms(997), ms(1_000), ms(5), ms(100)),
            (ms(1_003), ms(2_000), ms(5), ms(950)),
            (ms(1_010), ms(1_000), ms(20), ms(500)),
        ] {
            let periods = 4_000;
            let switch = Switch::new(first, cycle, jitter, poll * (periods + 10), 7);
            let per = (poll.as_millis() / refresh.as_millis()) as u64;
            let (held, moves) = run(&switch, refresh, poll, periods, false);
            assert!(held.iter().any(|&n| n != per), "{cycle:?}: unguarded, every interval held {per}");
            assert_eq!(moves, 0);
            let (held, moves) = run(&switch, refresh, poll, periods, true);
            let odd: Vec<_> = held.iter().enumerate().filter(|(_, &n)| n != per).collect();
            assert!(odd.is_empty(), "{cycle:?}, {poll:?}: intervals {odd:?} of {}", held.len());
            // A move lands the refresh at least a quarter refresh clear of where the next move
            // is: at most a move per quarter refresh of drift.
            let drift = cycle.abs_diff(refresh).as_secs_f64() * f64::from(periods) * per as f64;
            let most = drift / (refresh.as_secs_f64() / 4.0) + 2.0;
            assert!(f64::from(moves) <= most && moves >= 2, "{cycle:?}: {moves} moves, at most {most}");
            assert!(held.len() as u32 >= periods - 2 * moves - 1);
        }
    }

    /// Refreshes steady in mid-interval move nothing, and queues without traffic are no sign of
    /// a refresh.
    #[test]
    fn refreshes_clear_of_the_polls_move_nothing() {
        let ms = Duration::from_millis;
        let switch = Switch::new(ms(500), ms(1_000), ms(100), ms(1_000 * 510), 3);
        let (held, moves) = run(&switch, ms(1_000), ms(1_000), 500, true);
        assert_eq!(moves, 0);
        assert!(held.iter().all(|&n| n == 1));
        // An idle queue is watched by nobody: no look is due.
        let mut guard = RefreshGuard::default();
        guard.retune(ms(1_000), ms(1_000));
        let now = Instant::now();
        guard.polled(now, now + ms(1_000), &[QueueBytes { queue: 0, bytes: 5, moved: false }]);
        assert_eq!(guard.due(), None);
    }

    /// A look that read nothing compares nothing at the poll (its queues' counts from the last
    /// poll would show every refresh since as one just before the poll).
    #[test]
    fn a_look_that_read_nothing_moves_nothing() {
        let ms = Duration::from_millis;
        let mut guard = RefreshGuard::default();
        guard.retune(ms(1_000), ms(1_000));
        let t0 = Instant::now();
        let moved = |bytes| [QueueBytes { queue: 2, bytes, moved: true }];
        assert_eq!(guard.polled(t0, t0 + ms(1_000), &moved(1_000)), None);
        assert_eq!((guard.due(), guard.watched()), (Some(t0 + ms(250)), vec![2]));
        assert_eq!(guard.looked(t0 + ms(250), &[Some(1_000)]), None);
        assert_eq!((guard.due(), guard.watched()), (Some(t0 + ms(750)), vec![2]));
        assert_eq!(guard.looked(t0 + ms(750), &[None]), None);
        assert_eq!(guard.polled(t0 + ms(1_000), t0 + ms(2_000), &moved(2_000)), None);
        // Read, the same change is a refresh in the last quarter: the timetable moves to half
        // a refresh past the middle of (750 ms, 1 000 ms].
        assert_eq!(guard.looked(t0 + ms(1_250), &[Some(2_000)]), None);
        assert_eq!(guard.looked(t0 + ms(1_750), &[Some(2_000)]), None);
        let to = guard.polled(t0 + ms(2_000), t0 + ms(3_000), &moved(3_000));
        assert_eq!(to, Some(t0 + ms(1_875) + ms(500)));
        assert_eq!(guard.due(), None);
    }

    /// The queues watched are spread over those that carried traffic, first to last; they
    /// were the first four, all of them early in a large switch's refresh sweep.
    #[test]
    fn the_queues_watched_span_the_switch() {
        let ms = Duration::from_millis;
        let mut guard = RefreshGuard::default();
        guard.retune(ms(1_000), ms(1_000));
        let t0 = Instant::now();
        let read: Vec<QueueBytes> =
            (0..100).map(|queue| QueueBytes { queue, bytes: 1, moved: queue % 10 != 3 }).collect();
        assert_eq!(guard.polled(t0, t0 + ms(1_000), &read), None);
        assert_eq!(guard.watched(), vec![0, 32, 66, 99]);
        assert_eq!(spread(3, SENTINELS).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(spread(1, SENTINELS).collect::<Vec<_>>(), vec![0]);
        assert_eq!(spread(0, SENTINELS).count(), 0);
        assert_eq!(spread(5, SENTINELS).collect::<Vec<_>>(), vec![0, 1, 2, 4]);
    }

    #[test]
    fn only_whole_numbers_of_refreshes_are_guarded() {
        let ms = Duration::from_millis;
        assert!(guards(ms(10_000), ms(10_000)));
        assert!(guards(ms(1_000), ms(2_000)));
        assert!(!guards(ms(1_000), ms(1_015)), "drifting apart 1.5% a period");
        assert!(!guards(ms(1_000), ms(980)));
        assert!(!guards(ms(10_000), ms(1_000)), "polls faster than refreshes");
        assert!(!guards(ms(200), ms(300)), "aliased");
        assert!(!guards(ms(1_000), ms(1_100)));
        assert!(!guards(Duration::ZERO, ms(1_000)));
    }
}
