//! Sliding window log: exact, one timestamp per accepted request.

use std::collections::VecDeque;
use std::time::Duration;

use super::decision::{Decision, Quota, Settlement};
use super::refusal::{accepted, refused, tightest_known, Tally};
use crate::clock::micros;
use crate::limit::Limit;

/// The accepted requests' timestamps, oldest first, at most the largest
/// limit's worth.
///
/// A request is accepted under a limit of `max` per `W` when fewer than `max`
/// requests were ever accepted, or the `max`-th most recent one is more than
/// `W` old: the window `[now - W, now]` is closed, so a timestamp exactly `W`
/// old still counts. A request of cost `c` is `c` requests at one instant:
/// it needs the `(max - c + 1)`-th most recent stamp outside the window,
/// and records `c` stamps. That test reads one stamp per limit; the
/// remaining quota under each limit, the stamps inside its window, is a
/// binary search. Rejected requests are not recorded.
///
/// A key holds at most the largest limit's stamps, in room that grows by
/// doubling from four. A store judges each key under one policy, so a
/// stamp outside its longest window will never count again: recording
/// drops such a stamp rather than keep it, so a key that stays below its
/// limits keeps a few stamps instead of its largest limit's. At a store's
/// sweep (every few seconds) a log gives back its room once a quarter of
/// it or less holds stamps inside the window: a key that still gets
/// requests, though fewer; one that stops is dropped whole once idle.
/// Judged through [`decide`](Self::decide), whose caller may lengthen the
/// windows at the next call, the log keeps its largest limit's newest
/// stamps.
///
/// A log holds at most 2^31 stamps (16 GiB for one key, which no machine
/// would hold anyway), so a limit whose `max` is larger never refuses.
#[derive(Clone, Debug, Default)]
pub struct SlidingLog {
    stamps: VecDeque<u64>,
}

/// The most stamps a log holds: 16 GiB of them, for one key. A limit with
/// a larger `max` never refuses; no machine would hold such a log anyway.
pub(crate) const MAX_STAMPS: usize = 1 << 31;

/// The most stamps a log judged under `limits` keeps: the largest `max`,
/// up to [`MAX_STAMPS`].
pub(crate) fn capacity_for(limits: &[Limit]) -> u32 {
    let largest = limits.iter().map(Limit::max).max().unwrap_or(0);
    largest.min(MAX_STAMPS as u32)
}

/// Room a log starts with.
const FIRST_ROOM: usize = 4;

/// A `forget_after` under which no stamp is ever too old to keep.
pub(crate) const KEEP_EVERY_STAMP: u64 = u64::MAX;

impl SlidingLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Judges a request at `now` (since the clock's zero) against every limit,
    /// recording it if all accept.
    ///
    /// # Panics
    ///
    /// If `limits` is empty (before touching the log): a decision needs a
    /// limit to report.
    pub fn decide(&mut self, now: Duration, limits: &[Limit]) -> Decision {
        assert!(!limits.is_empty(), "a decision needs at least one limit");
        self.decide_micros(
            micros(now),
            limits,
            capacity_for(limits),
            KEEP_EVERY_STAMP,
            1,
        )
    }

    /// The number of timestamps held.
    pub fn len(&self) -> usize {
        self.stamps.len()
    }

    /// Whether no request has been recorded.
    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
    }

    /// A log of at most `capacity` stamps, holding the newest of `stamps`
    /// (oldest first, none newer than the next decision's time).
    pub(crate) fn holding(stamps: &[u64], capacity: u32) -> Self {
        let kept = &stamps[stamps.len().saturating_sub(capacity as usize)..];
        Self {
            stamps: kept.iter().copied().collect(),
        }
    }

    /// From when (µs) the log judges as a fresh one would, under limits
    /// whose longest window is `longest_window` µs: one tick past that
    /// window from its newest stamp.
    pub(crate) fn idle_from_micros(&self, longest_window: u64) -> u64 {
        self.newest().map_or(0, |newest| {
            newest.saturating_add(longest_window).saturating_add(1)
        })
    }

    /// Every stamp held, oldest first.
    pub(crate) fn stamps(&self) -> impl Iterator<Item = u64> + '_ {
        self.stamps.iter().copied()
    }

    fn newest(&self) -> Option<u64> {
        self.stamps.back().copied()
    }

    /// Judges a request of `cost` units (from 1 to every limit's `max`) at
    /// `now` (µs) against every limit, recording it if all accept in a log
    /// of at most `capacity` stamps, which drops stamps more than
    /// `forget_after` µs old ([`KEEP_EVERY_STAMP`] for never).
    pub(crate) fn decide_micros(
        &mut self,
        now: u64,
        limits: &[Limit],
        capacity: u32,
        forget_after: u64,
        cost: u32,
    ) -> Decision {
        debug_assert!(
            cost >= 1 && limits.iter().all(|limit| cost <= limit.max()),
            "a cost from 1 to every limit's max"
        );
        let capacity = capacity as usize;
        self.fit(capacity);
        // A clock that stepped back must not make recorded requests look newer
        // than they are: judge at the newest time seen instead.
        let now = self.newest().map_or(now, |newest| newest.max(now));
        if let [limit] = limits {
            // One limit, the common case, needs no pick among several.
            if let Some(wait) = self.blocking(now, limit, cost) {
                return refused(limits, now, 0, wait);
            }
            self.record_units(now, capacity, forget_after, cost);
            let (remaining, replenish_micros) = self.quota(now, limit);
            let quota = Quota::Known {
                remaining,
                replenish_micros,
            };
            return accepted(limits, now, 0, quota);
        }
        let mut tally = Tally::default();
        for (index, limit) in limits.iter().enumerate() {
            if let Some(wait) = self.blocking(now, limit, cost) {
                tally.refuse(index, wait);
            }
        }
        if let Some(refusal) = tally.refusal(limits, now) {
            return refusal;
        }
        self.record_units(now, capacity, forget_after, cost);
        // On the stack for any policy; the public API takes longer lists.
        let mut inline = [(0, 0); super::INLINE_LIMITS];
        let mut spilled = Vec::new();
        let quotas: &mut [(u32, u64)] = if limits.len() <= inline.len() {
            &mut inline[..limits.len()]
        } else {
            spilled.resize(limits.len(), (0, 0));
            &mut spilled
        };
        for (quota, limit) in quotas.iter_mut().zip(limits) {
            *quota = self.quota(now, limit);
        }
        tightest_known(limits, now, quotas)
    }

    /// Settles a request recorded at `settled.at` for `settled.cost`
    /// stamps that really used `settled.used`: takes back as many of its
    /// stamps as it did not use, or records the excess at `settled.now`
    /// (as many as the log holds; the oldest make way as for any request).
    pub(crate) fn settle_micros(&mut self, settled: &Settlement, capacity: u32, forget_after: u64) {
        let capacity = capacity as usize;
        if settled.used < settled.cost {
            // The stamps are in order: the request's are among those equal to its time.
            let end = self.stamps.partition_point(|&stamp| stamp <= settled.at);
            let start = self.stamps.partition_point(|&stamp| stamp < settled.at);
            let back = (end - start).min((settled.cost - settled.used) as usize);
            if let (true, Some(newest)) = (back > 0, self.newest()) {
                self.stamps.drain(end - back..end);
                // No log counts a stamp again once its newer ones are gone.
                let forgotten = self
                    .stamps
                    .partition_point(|&stamp| stamp.saturating_add(forget_after) < newest);
                self.stamps.drain(..forgotten);
            }
        } else if settled.used > settled.cost {
            self.fit(capacity);
            let now = self
                .newest()
                .map_or(settled.now, |newest| newest.max(settled.now));
            for _ in 0..(settled.used - settled.cost).min(capacity as u32) {
                self.record(now, capacity, forget_after);
            }
        }
    }

    /// How long `limit` keeps `cost` more units out of its window at `now`:
    /// until the `(max - cost + 1)`-th newest stamp leaves it.
    #[inline(always)]
    fn blocking(&self, now: u64, limit: &Limit, cost: u32) -> Option<u64> {
        let need = (limit.max() - cost) as usize + 1;
        let len = self.stamps.len();
        if len < need {
            return None;
        }
        blocked_for(self.stamps[len - need], now, limit)
    }

    /// Keeps the newest `capacity` stamps, and room for no more (the
    /// caller's largest limit shrank).
    #[inline]
    fn fit(&mut self, capacity: usize) {
        if self.stamps.len() > capacity {
            self.stamps.drain(..self.stamps.len() - capacity);
        }
        if self.stamps.capacity() > capacity.max(FIRST_ROOM) {
            self.stamps.shrink_to(capacity.max(FIRST_ROOM));
        }
    }

    /// Records a stamp at `now`, dropping the oldest if `capacity` is
    /// reached or it is more than `forget_after` old; room grows by
    /// doubling, up to `capacity`.
    #[inline(always)]
    fn record(&mut self, now: u64, capacity: usize, forget_after: u64) {
        let stamps = &mut self.stamps;
        let full = stamps.len() >= capacity;
        if full
            || stamps
                .front()
                .is_some_and(|&oldest| oldest.saturating_add(forget_after) < now)
        {
            stamps.pop_front();
        }
        let len = stamps.len();
        if len == stamps.capacity() {
            let room = (2 * len).max(FIRST_ROOM).min(capacity.max(len + 1));
            stamps.reserve_exact(room - len);
        }
        stamps.push_back(now);
    }

    /// Records `units` stamps at `now`, as [`record`](Self::record) does one.
    #[inline(always)]
    fn record_units(&mut self, now: u64, capacity: usize, forget_after: u64, units: u32) {
        for _ in 0..units {
            self.record(now, capacity, forget_after);
        }
    }

    /// Gives back the room of a log of at least four times [`FIRST_ROOM`],
    /// a quarter of it or less holding stamps inside the longest window
    /// (`longest` µs) as measured from its newest stamp: a store's sweep
    /// calls it, so that a key that once reached its limit does not keep
    /// its room once its traffic falls. Every later decision is judged at
    /// the newest stamp or after it, so a stamp outside the window then
    /// never counts again.
    pub(crate) fn shed_room(&mut self, longest: u64) {
        let quarter = self.stamps.capacity() / 4;
        let Some(newest) = self.newest() else {
            return;
        };
        if quarter < FIRST_ROOM {
            return;
        }
        let outside = self.count_before(newest.saturating_sub(longest));
        if self.stamps.len() - outside <= quarter {
            self.stamps.drain(..outside);
            self.stamps
                .shrink_to((2 * self.stamps.len()).max(FIRST_ROOM));
        }
    }

    /// Remaining quota under `limit` at `now`, and when it next grows:
    /// when the oldest timestamp inside the window leaves it.
    #[inline]
    fn quota(&self, now: u64, limit: &Limit) -> (u32, u64) {
        let len = self.stamps.len();
        let outside = self.count_before(now.saturating_sub(limit.window_micros()));
        let oldest = self.stamps.get(outside).copied();
        quota((len - outside) as u32, oldest, now, limit)
    }

    /// How many stamps are older than `cutoff`, searched from the oldest:
    /// a log whose stamps nearly all count, as a key's at its limit, is
    /// settled by its first read or two.
    #[inline]
    fn count_before(&self, cutoff: u64) -> usize {
        let (older, newer) = self.stamps.as_slices();
        match count_before(older, cutoff) {
            all if all == older.len() => all + count_before(newer, cutoff),
            some => some,
        }
    }
}

/// How many of `stamps` (in order, oldest first) are older than `cutoff`:
/// reads the first, then strides that double, then halves the last
/// stride. When few are older, that is a read or two at the start.
#[inline]
fn count_before(stamps: &[u64], cutoff: u64) -> usize {
    let mut low = 0;
    let mut stride = 1;
    loop {
        let probe = low + stride - 1;
        match stamps.get(probe) {
            Some(&stamp) if stamp < cutoff => {
                low = probe + 1;
                stride *= 2;
            }
            Some(_) => return low + stamps[low..probe].partition_point(|&s| s < cutoff),
            None => return low + stamps[low..].partition_point(|&s| s < cutoff),
        }
    }
}

/// How long the `max`-th most recent stamp, `blocking`, still keeps a
/// request out: until it is more than one window old, one tick past the
/// window's closed end. `None` if it already has left.
pub(crate) fn blocked_for(blocking: u64, now: u64, limit: &Limit) -> Option<u64> {
    let expires = blocking.saturating_add(limit.window_micros());
    (expires >= now).then(|| (expires - now).saturating_add(1))
}

/// Remaining quota with `in_window` stamps inside `limit`'s window, and how
/// long until the `oldest` of them leaves it.
// Hinted: every store's log decision calls it.
#[inline]
pub(crate) fn quota(in_window: u32, oldest: Option<u64>, now: u64, limit: &Limit) -> (u32, u64) {
    let remaining = limit.max().saturating_sub(in_window);
    let replenish = oldest.map_or(0, |oldest| {
        oldest
            .saturating_add(limit.window_micros())
            .saturating_add(1)
            .saturating_sub(now)
    });
    (remaining, replenish)
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// One to three limits of 1 to 39 requests over windows of up to 5 ms
    /// (often exactly 1 ms), for the property tests of the logs.
    pub(crate) fn limit_sets() -> impl Strategy<Value = Vec<Limit>> {
        prop::collection::vec((1u32..40, prop_oneof![Just(1_000u64), 1u64..5_000]), 1..=3).prop_map(
            |limits| {
                limits
                    .into_iter()
                    .map(|(max, window)| Limit::new(max, Duration::from_micros(window)).unwrap())
                    .collect()
            },
        )
    }

    /// What a store passes beside `limits`: the log's capacity, the
    /// largest `max`, and the longest window.
    pub(crate) fn capacity_and_longest(limits: &[Limit]) -> (u32, u64) {
        let capacity = limits.iter().map(Limit::max).max().unwrap();
        let longest = limits.iter().map(Limit::window_micros).max().unwrap();
        (capacity, longest)
    }

    /// A log's capacity stops at [`MAX_STAMPS`], whatever the limit.
    #[test]
    fn a_log_is_bounded() {
        let huge = [Limit::new(u32::MAX, Duration::from_secs(1)).unwrap()];
        assert_eq!(capacity_for(&huge) as usize, MAX_STAMPS);
        let mut log = SlidingLog::new();
        assert!(log.decide(Duration::ZERO, &huge).is_allowed());
        assert_eq!(log.len(), 1);
    }

    /// Sheds stamps outside the longest window at the newest stamp, keeps
    /// one exactly a window old (the window is closed), and decides after
    /// as the unshed log does, at that newest time and later.
    #[test]
    fn shedding_keeps_every_stamp_a_later_decision_counts() {
        let limits = [Limit::new(100, Duration::from_micros(1_000)).unwrap()];
        let decide = |log: &mut SlidingLog, now| log.decide_micros(now, &limits, 100, 1_000, 1);
        let mut log = SlidingLog::new();
        for now in (0..20).chain([1_000, 2_000]) {
            assert!(decide(&mut log, now).is_allowed());
        }
        let mut shed = log.clone();
        shed.shed_room(1_000);
        assert_eq!(shed.len(), 2, "kept the stamps at 1,000 and 2,000 µs");
        assert!(shed.stamps.capacity() < log.stamps.capacity());
        for now in [2_000, 2_000, 2_500, 3_000, 3_001] {
            assert_eq!(decide(&mut shed, now), decide(&mut log, now), "at {now} µs");
        }
    }

    /// Room grows by doubling up to the capacity, and no further.
    #[test]
    fn room_grows_up_to_the_largest_limit() {
        let limits = [Limit::new(100, Duration::from_secs(1)).unwrap()];
        let mut log = SlidingLog::new();
        for now in 0..100 {
            assert!(log
                .decide_micros(now, &limits, 100, KEEP_EVERY_STAMP, 1)
                .is_allowed());
        }
        assert_eq!(log.stamps.capacity(), 100);
        assert!(!log
            .decide_micros(100, &limits, 100, KEEP_EVERY_STAMP, 1)
            .is_allowed());
    }

    proptest! {
        /// Shedding at any point of random traffic changes no later
        /// decision: bursts grow logs, gaps leave stamps behind, steps of
        /// a whole window put stamps exactly on its edge, and the clock may
        /// step back.
        #[test]
        fn a_shed_log_decides_as_the_unshed_one(
            limits in limit_sets(),
            before in prop::collection::vec(
                prop_oneof![
                    3 => Just(0i64),
                    3 => 0i64..300,
                    2 => Just(1_000i64),
                    2 => 0i64..12_000,
                ],
                1..300,
            ),
            after in prop::collection::vec(
                prop_oneof![
                    Just(0i64),
                    0i64..300,
                    Just(1_000i64),
                    -2_000i64..3_000,
                ],
                1..100,
            ),
        ) {
            let (capacity, longest) = capacity_and_longest(&limits);
            let mut log = SlidingLog::new();
            let mut now = 10_000u64;
            for step in before {
                now = now.saturating_add_signed(step);
                log.decide_micros(now, &limits, capacity, longest, 1);
            }
            let mut shed = log.clone();
            shed.shed_room(longest);
            for step in after {
                now = now.saturating_add_signed(step);
                prop_assert_eq!(
                    shed.decide_micros(now, &limits, capacity, longest, 1),
                    log.decide_micros(now, &limits, capacity, longest, 1),
                    "at {} µs", now
                );
            }
        }
    }

    proptest! {
        /// The search from the oldest stamp counts as a plain binary
        /// search does, wherever the cutoff falls.
        #[test]
        fn counts_stamps_before_a_cutoff_as_a_binary_search(
            mut stamps in prop::collection::vec(0u64..1_000, 0..200),
            cutoff in 0u64..1_100,
        ) {
            stamps.sort_unstable();
            prop_assert_eq!(
                count_before(&stamps, cutoff),
                stamps.partition_point(|&stamp| stamp < cutoff)
            );
        }
    }

    /// A log using more than a quarter of its room keeps it.
    #[test]
    fn shedding_leaves_a_busy_log_alone() {
        let limits = [Limit::new(100, Duration::from_micros(1_000)).unwrap()];
        let mut log = SlidingLog::new();
        for now in 0..40 {
            log.decide_micros(now, &limits, 100, 1_000, 1);
        }
        let before = log.stamps.clone();
        log.shed_room(1_000);
        assert_eq!(log.stamps, before);
    }
}
