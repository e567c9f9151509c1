//! Sliding window log: exact, one timestamp per accepted request.

use std::time::Duration;

use super::decision::{Decision, Quota, Settlement};
use super::refusal::{accepted, refused, tightest_known, Verdict};
use crate::clock::micros;
use crate::limit::Limit;

/// The accepted requests' timestamps, newest last, in a ring that holds at
/// most the largest limit's worth.
///
/// A request is accepted under a limit of `max` per `W` when fewer than `max`
/// requests were ever accepted, or the `max`-th most recent one is more than
/// `W` old: the window `[now - W, now]` is closed, so a timestamp exactly `W`
/// old still counts. A request of cost `c` is `c` requests at one instant:
/// it needs the `(max - c + 1)`-th most recent stamp outside the window,
/// and records `c` stamps. That test reads one slot per limit. Rejected
/// requests are not recorded.
///
/// The remaining quota under each limit is the number of stamps inside its
/// window, found by a search from the oldest stamp in strides that double:
/// a ring whose stamps nearly all count, as a key at its limit's do, is
/// settled by the slot beside the one just written, and any ring in
/// O(log n) reads. The ring holds stamps and nothing else, so a decision
/// touches no memory but the slots it reads.
///
/// A key's ring holds at most the largest limit's stamps, in slots that
/// grow by doubling from four. A store judges each key under one policy,
/// so a stamp outside its longest window will never count again: a ring
/// without a free slot overwrites such a stamp rather than grow, so a key
/// that stays below its limits keeps a few slots instead of its largest
/// limit's. At a store's sweep (every few seconds) a ring of 16 slots or
/// more gives its slots back once a quarter of them or fewer hold stamps
/// inside the window: a key that still gets requests, though fewer; one
/// that stops is dropped whole once idle. Judged through
/// [`decide`](Self::decide), whose caller may lengthen the windows at the
/// next call, the log keeps its largest limit's newest stamps.
///
/// A log holds at most 2^31 stamps (16 GiB for one key, which no machine
/// would hold anyway), so a limit whose `max` is larger never refuses.
///
/// Judged under a smaller largest limit than before, the log keeps its
/// newest stamps, in a ring laid out again in time linear in them.
#[derive(Clone, Debug, Default)]
pub struct SlidingLog {
    /// The ring of stamps in microseconds, grown by doubling up to the
    /// largest limit (and shrunk at a store's sweep). Empty until the first
    /// decision.
    slots: Box<[u64]>,
    /// Where the ring stands: with fewer stamps than slots, their number,
    /// filling the slots in order from the first; with every slot taken,
    /// the number of slots plus the slot of the oldest stamp. A ring wraps
    /// only once every slot is taken, and never has more slots than the
    /// capacity it is judged under (it is laid out again otherwise), so
    /// this one number says both. It stays below twice the slots, which
    /// are at most [`MAX_SLOTS`].
    at: u32,
}

/// The most stamps a ring holds, so that `at` fits in 32 bits: 16 GiB of
/// stamps, for one key. A limit with a larger `max` never refuses; no
/// machine would hold such a ring anyway.
pub(crate) const MAX_SLOTS: usize = 1 << 31;

/// The most stamps a log judged under `limits` keeps: the largest `max`,
/// up to [`MAX_SLOTS`].
pub(crate) fn capacity_for(limits: &[Limit]) -> u32 {
    let largest = limits.iter().map(Limit::max).max().unwrap_or(0);
    largest.min(MAX_SLOTS as u32)
}

/// Slots a ring starts with.
const FIRST_SLOTS: usize = 4;

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
    /// limit to report. A [`Policy`](crate::Policy) always has one.
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
        ring_in(&self.slots, self.at).1
    }

    /// Whether no request has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A log of at most `capacity` stamps, holding `stamps` (oldest first,
    /// none newer than the next decision's time).
    pub(crate) fn holding(stamps: &[u64], capacity: u32) -> Self {
        let mut log = Self::default();
        log.hold(stamps.to_vec(), capacity as usize);
        log
    }

    /// From when (µs) the log judges as a fresh one would, under limits
    /// whose longest window is `longest_window` µs.
    pub(crate) fn idle_from_micros(&self, longest_window: u64) -> u64 {
        idle_from(&self.slots, self.at, longest_window)
    }

    /// Every stamp held, oldest first.
    pub(crate) fn stamps(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|i| stamp_in(&self.slots, self.at, i))
    }
}

/// The ring's workings: every decision, settling and shedding.
impl SlidingLog {
    /// The ring's oldest slot and its number of stamps.
    #[inline]
    fn ring(&self) -> (usize, usize) {
        ring_in(&self.slots, self.at)
    }

    /// The `i`-th oldest timestamp held.
    fn stamp(&self, i: usize) -> u64 {
        stamp_in(&self.slots, self.at, i)
    }

    fn newest(&self) -> Option<u64> {
        let len = self.len();
        (len > 0).then(|| self.stamp(len - 1))
    }

    /// Every stamp held, oldest first, to lay out again.
    fn stamps_vec(&self) -> Vec<u64> {
        (0..self.len()).map(|i| self.stamp(i)).collect()
    }

    /// Judges a request of `cost` units (from 1 to every limit's `max`) at
    /// `now` (µs) against every limit, recording it if all accept in a ring
    /// of at most `capacity` stamps, which may drop a stamp more than
    /// `forget_after` µs old instead of growing ([`KEEP_EVERY_STAMP`] for
    /// never).
    ///
    pub(crate) fn decide_micros(
        &mut self,
        now: u64,
        limits: &[Limit],
        capacity: u32,
        forget_after: u64,
        cost: u32,
    ) -> Decision {
        debug_assert!(capacity as usize <= MAX_SLOTS, "a ring's slots fit `at`");
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
            return self.decide_one(now, limit, capacity, forget_after, cost);
        }
        let len = self.len();
        let mut verdict = Verdict::default();
        for (index, limit) in limits.iter().enumerate() {
            if let Some(wait) = self.blocking(len, now, limit, cost) {
                verdict.refuse(index, wait);
            }
        }
        if let Some(refusal) = verdict.refusal(limits, now) {
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

    /// [`decide_micros`](Self::decide_micros) for one limit, the common
    /// case, without the bookkeeping that picks one limit among several,
    /// at a `now` no older than the newest stamp.
    fn decide_one(
        &mut self,
        now: u64,
        limit: &Limit,
        capacity: usize,
        forget_after: u64,
        cost: u32,
    ) -> Decision {
        let limits = std::slice::from_ref(limit);
        if let Some(wait) = self.blocking(self.len(), now, limit, cost) {
            return refused(limits, now, 0, wait);
        }
        self.record_units(now, capacity, forget_after, cost);
        let (remaining, replenish_micros) = self.quota(now, limit);
        accepted(
            limits,
            now,
            0,
            Quota::Known {
                remaining,
                replenish_micros,
            },
        )
    }

    /// Settles a request recorded at `settled.at` for `settled.cost`
    /// stamps that really used `settled.used`: takes back as many of its
    /// stamps as it did not use, or records the excess at `settled.now`
    /// (as many as the ring holds; the oldest make way as for any
    /// request).
    pub(crate) fn settle_micros(&mut self, settled: &Settlement, capacity: u32, forget_after: u64) {
        let capacity = capacity as usize;
        if settled.used < settled.cost {
            let mut stamps = self.stamps_vec();
            // The stamps are in order: the request's are among those equal to its time.
            let end = stamps.partition_point(|&stamp| stamp <= settled.at);
            let start = stamps[..end].partition_point(|&stamp| stamp < settled.at);
            let back = (end - start).min((settled.cost - settled.used) as usize);
            if back > 0 {
                let newest = stamps[stamps.len() - 1];
                stamps.drain(end - back..end);
                let forgotten = forgotten_before(&stamps, newest, forget_after);
                stamps.drain(..forgotten);
                self.hold(stamps, capacity);
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

    /// How long `limit` keeps `cost` more units out of its window at `now`,
    /// among `len` stamps: until the `(max - cost + 1)`-th newest stamp
    /// leaves it.
    #[inline(always)]
    fn blocking(&self, len: usize, now: u64, limit: &Limit, cost: u32) -> Option<u64> {
        let need = (limit.max() - cost) as usize + 1;
        if len < need {
            return None;
        }
        blocked_for(self.stamp(len - need), now, limit)
    }

    /// Keeps the newest `capacity` stamps when the ring has more slots
    /// than that (its caller's largest limit shrank), so that a ring
    /// wraps only once every slot is taken. A wrapped ring given a larger
    /// `capacity` is laid out in order by `grow`, when it grows.
    #[inline]
    fn fit(&mut self, capacity: usize) {
        if self.slots.len() > capacity {
            self.shrink_to(capacity);
        }
    }

    #[cold]
    fn shrink_to(&mut self, capacity: usize) {
        let stamps = self.stamps_vec();
        self.hold(stamps, capacity);
    }

    /// Lays the ring out holding the newest `capacity` of `stamps`, with
    /// room for a new key's first few.
    fn hold(&mut self, mut stamps: Vec<u64>, capacity: usize) {
        stamps.drain(..stamps.len().saturating_sub(capacity));
        let held = stamps.len();
        stamps.resize(held.max(FIRST_SLOTS.min(capacity)), 0);
        self.at = held as u32;
        self.slots = stamps.into_boxed_slice();
    }

    /// Records a stamp at `now`: after the newest while the ring has room;
    /// else over the oldest, if `capacity` is reached or the oldest is more
    /// than `forget_after` old; else in a ring grown to make room.
    // Forced into its one caller, on every accepted request's path.
    #[inline(always)]
    fn record(&mut self, now: u64, capacity: usize, forget_after: u64) {
        let (head, len) = self.ring();
        let slots = self.slots.len();
        debug_assert!(slots <= capacity, "laid out for at most `capacity` slots");
        if len < slots {
            debug_assert!(head == 0, "only a ring without room wraps");
            self.slots[len] = now;
            // One more stamp; taking the last slot makes `at` say "full,
            // oldest first".
            self.at += 1;
        } else if len < capacity
            && (len == 0 || self.slots[head].saturating_add(forget_after) >= now)
        {
            self.grow(capacity);
            self.slots[len] = now;
            self.at += 1;
        } else if len > 0 {
            self.slots[head] = now;
            let head = if head + 1 == len { 0 } else { head + 1 };
            debug_assert!(slots <= MAX_SLOTS, "`at` below 2^32");
            self.at = (slots + head) as u32;
        }
    }

    /// Records `units` stamps at `now`, as [`record`](Self::record) does
    /// one: a request of several units takes a call out of the hot path.
    #[inline(always)]
    fn record_units(&mut self, now: u64, capacity: usize, forget_after: u64, units: u32) {
        self.record(now, capacity, forget_after);
        if units > 1 {
            self.record_more(now, capacity, forget_after, units - 1);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_more(&mut self, now: u64, capacity: usize, forget_after: u64, more: u32) {
        for _ in 0..more {
            self.record(now, capacity, forget_after);
        }
    }

    /// Doubles the ring's slots (to at most `capacity`), which are all
    /// taken, laying its stamps out in order from the first slot.
    #[cold]
    fn grow(&mut self, capacity: usize) {
        let slots = (2 * self.len()).max(FIRST_SLOTS).min(capacity);
        self.relay(0, slots);
    }

    /// Moves the stamps from the `from`-th oldest on, in order, into a
    /// ring of `slots` slots (at least as many as those stamps).
    fn relay(&mut self, from: usize, slots: usize) {
        let (head, len) = self.ring();
        // Oldest first: from the head to the end, then the wrapped start.
        let (wrapped, oldest) = self.slots[..len].split_at(head);
        let mut ring = Vec::with_capacity(slots);
        match oldest.get(from..) {
            Some(kept) => {
                ring.extend_from_slice(kept);
                ring.extend_from_slice(wrapped);
            }
            None => ring.extend_from_slice(&wrapped[from - oldest.len()..]),
        }
        ring.resize(slots, 0);
        self.at = (len - from) as u32;
        self.slots = ring.into_boxed_slice();
    }

    /// Gives back the slots of a ring of at least four times
    /// [`FIRST_SLOTS`] slots, a quarter of them or fewer holding stamps
    /// inside the longest window (`longest` µs) as measured from its
    /// newest stamp: a store's sweep calls it, so that a key that once
    /// reached its limit does not keep its slots once its traffic falls.
    /// Every later decision is judged at the newest stamp or after it, so
    /// a stamp outside the window then never counts again.
    pub(crate) fn shed_slots(&mut self, longest: u64) {
        let quarter = self.slots.len() / 4;
        if quarter < FIRST_SLOTS {
            return;
        }
        let Some(newest) = self.newest() else {
            return;
        };
        let cutoff = newest.saturating_sub(longest);
        // A sweep visits every key: one read settles a ring that is busy,
        // the common case, before any search. The stamps are in order,
        // oldest first, so a quarter of the slots or fewer hold stamps
        // inside if the one before the newest quarter is outside.
        let busy_from = self.len().saturating_sub(quarter);
        if busy_from > 0 && self.stamp(busy_from - 1) >= cutoff {
            return;
        }
        let outside = self.count_before(cutoff);
        let kept = self.len() - outside;
        self.relay(outside, (2 * kept).max(FIRST_SLOTS));
    }

    /// Remaining quota under `limit` at `now`, and when it next grows:
    /// when the oldest timestamp inside the window leaves it.
    #[inline]
    fn quota(&self, now: u64, limit: &Limit) -> (u32, u64) {
        let len = self.len();
        let outside = self.count_before(now.saturating_sub(limit.window_micros()));
        let oldest = (outside < len).then(|| self.stamp(outside));
        quota((len - outside) as u32, oldest, now, limit)
    }

    /// How many stamps are older than `cutoff`: the ring's older run (from
    /// its oldest slot to the end) first, so that a ring whose oldest stamp
    /// is not older, as a key's at its limit, reads only that slot, beside
    /// the one just written.
    #[inline]
    fn count_before(&self, cutoff: u64) -> usize {
        let (head, len) = self.ring();
        let (newer, older) = self.slots[..len].split_at(head);
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

/// How many of `stamps` (oldest first) are more than `forget_after` µs
/// older than `newest`: a log may let those go, as they never count
/// again. A request given back drops them all, so that no log counts one
/// again once its newer stamps are gone, whether it had let it go or not.
pub(crate) fn forgotten_before(stamps: &[u64], newest: u64, forget_after: u64) -> usize {
    stamps.partition_point(|&stamp| stamp.saturating_add(forget_after) < newest)
}

/// The oldest slot of the ring at `at` in `slots`, and its number of
/// stamps.
#[inline]
fn ring_in(slots: &[u64], at: u32) -> (usize, usize) {
    let at = at as usize;
    if at < slots.len() {
        (0, at)
    } else {
        (at - slots.len(), slots.len())
    }
}

/// The `i`-th oldest stamp of the ring at `at` in `slots`.
#[inline]
fn stamp_in(slots: &[u64], at: u32, i: usize) -> u64 {
    // A ring wraps only once every slot is taken, and then `len` is the
    // number of slots.
    let (head, len) = ring_in(slots, at);
    let at = head + i;
    slots[if at >= len { at - len } else { at }]
}

/// From when (µs) a log, its ring at `at` in `slots`, judges as a fresh
/// one would: one tick past the longest window (`longest_window` µs) from
/// its newest stamp.
pub(crate) fn idle_from(slots: &[u64], at: u32, longest_window: u64) -> u64 {
    match ring_in(slots, at) {
        (_, 0) => 0,
        (_, len) => stamp_in(slots, at, len - 1)
            .saturating_add(longest_window)
            .saturating_add(1),
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

    /// What a store passes beside `limits`: the ring's capacity, the
    /// largest `max`, and the longest window.
    pub(crate) fn capacity_and_longest(limits: &[Limit]) -> (u32, u64) {
        let capacity = limits.iter().map(Limit::max).max().unwrap();
        let longest = limits.iter().map(Limit::window_micros).max().unwrap();
        (capacity, longest)
    }

    /// Sheds stamps outside the longest window at the newest stamp, keeps
    /// one exactly a window old (the window is closed), and decides after
    /// as the unshed log does, at that newest time and later.
    /// A ring never takes more slots than `at` can count, whatever the
    /// limit: every caller's capacity stops at [`MAX_SLOTS`].
    #[test]
    fn a_ring_is_bounded_so_its_position_fits_32_bits() {
        let huge = [Limit::new(u32::MAX, Duration::from_secs(1)).unwrap()];
        assert_eq!(capacity_for(&huge) as usize, MAX_SLOTS);
        assert_eq!(2 * MAX_SLOTS - 1, u32::MAX as usize, "the largest `at`");
        let mut log = SlidingLog::new();
        assert!(log.decide(Duration::ZERO, &huge).is_allowed());
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn shedding_keeps_every_stamp_a_later_decision_counts() {
        let limits = [Limit::new(100, Duration::from_micros(1_000)).unwrap()];
        let decide = |log: &mut SlidingLog, now| log.decide_micros(now, &limits, 100, 1_000, 1);
        let mut log = SlidingLog::new();
        for now in (0..20).chain([1_000, 2_000]) {
            assert!(decide(&mut log, now).is_allowed());
        }
        let mut shed = log.clone();
        shed.shed_slots(1_000);
        assert_eq!(shed.len(), 2, "kept the stamps at 1,000 and 2,000 µs");
        assert_eq!(shed.slots.len(), FIRST_SLOTS);
        for now in [2_000, 2_000, 2_500, 3_000, 3_001] {
            assert_eq!(decide(&mut shed, now), decide(&mut log, now), "at {now} µs");
        }
    }

    /// A ring that wrapped (its oldest stamp not in the first slot) is laid
    /// out in order as it sheds.
    #[test]
    fn shedding_a_wrapped_ring_keeps_its_order() {
        let limits = [Limit::new(100, Duration::from_micros(1_000)).unwrap()];
        let decide = |log: &mut SlidingLog, now| log.decide_micros(now, &limits, 100, 1_000, 1);
        let mut log = SlidingLog::new();
        // 32 slots, filled; then three stamps over the oldest.
        for now in (0..32).chain([1_500, 3_000, 3_001]) {
            assert!(decide(&mut log, now).is_allowed());
        }
        assert_eq!(ring_in(&log.slots, log.at).0, 3);
        let mut shed = log.clone();
        shed.shed_slots(1_000);
        assert_eq!(shed.len(), 2, "kept the stamps at 3,000 and 3,001 µs");
        for now in [3_001, 3_500, 4_000, 4_001, 4_002] {
            assert_eq!(decide(&mut shed, now), decide(&mut log, now), "at {now} µs");
        }
    }

    proptest! {
        /// Shedding at any point of random traffic changes no later
        /// decision: bursts grow rings, gaps leave stamps behind, steps of
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
            shed.shed_slots(longest);
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

    /// A ring using more than a quarter of its slots keeps them.
    #[test]
    fn shedding_leaves_a_busy_ring_alone() {
        let limits = [Limit::new(100, Duration::from_micros(1_000)).unwrap()];
        let mut log = SlidingLog::new();
        for now in 0..40 {
            log.decide_micros(now, &limits, 100, 1_000, 1);
        }
        let before = log.slots.clone();
        log.shed_slots(1_000);
        assert_eq!(log.slots, before);
    }
}
