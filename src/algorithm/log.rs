//! Sliding window log: exact, one timestamp per accepted request.

use std::time::Duration;

use super::decision::{Decision, Quota, Settlement};
use super::refusal::{accepted, refused, tightest_known, Verdict};
use super::Units;
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
/// and records `c` stamps. That test reads one slot, so a decision costs
/// O(1) per limit (and O(c) to record), and a store's key holds at most the largest limit's stamps (in
/// slots that grow by doubling, behind two words a limit and two more).
/// Rejected requests are not recorded.
///
/// A store judges each key under one policy, so a stamp outside its
/// longest window will never count again. A key with at most two stamps
/// inside that window keeps them beside its key in the store's map, with
/// no ring at all; a busier key's ring without a free slot overwrites
/// such a stamp rather than grow, so a key that stays below its limits
/// keeps a few slots (as few as four) instead of its largest limit's. At a
/// store's sweep (every few seconds) a ring whose stamps inside the
/// window, as measured from its newest stamp, fit in two again gives way
/// to them, and a ring of 16 slots or more gives its slots back once a
/// quarter of them or fewer hold such stamps: a key that still gets
/// requests, though fewer; one that stops is dropped whole once idle.
/// Judged through
/// [`decide`](Self::decide), whose caller may lengthen the windows at the
/// next call, the log keeps its largest limit's newest stamps.
///
/// A log holds at most 2^31 stamps (16 GiB for one key, which no machine
/// would hold anyway), so a limit whose `max` is larger never refuses.
///
/// Judged under other limits than the last call's, the log keeps its
/// newest stamps and lays its buffer out again, in time linear in them.
///
/// The remaining quota comes from one cursor per limit, the first record
/// still inside that limit's window; time only moves forward (a clock that
/// steps back is judged at the newest time recorded), so cursors only move
/// forward too, and counting stays O(1) amortised.
#[derive(Clone, Debug, Default)]
pub struct SlidingLog {
    /// `[total, limit count, window..., cursor..., slot...]`: `total` counts
    /// records ever made; each limit's window (µs) is the one its cursor,
    /// the record number of the first record still inside that window, was
    /// moved for; the slots hold the ring of stamps in microseconds, grown
    /// by doubling up to the largest limit (and shrunk at a store's sweep).
    /// Empty until the first decision.
    buf: Box<[u64]>,
    /// Where the ring stands: with fewer stamps than slots, their number,
    /// filling the slots in order from the first; with every slot taken,
    /// the number of slots plus the slot of the oldest stamp. A ring wraps
    /// only once every slot is taken, and never has more slots than the
    /// capacity it is judged under (it is laid out again otherwise), so
    /// this one number says both. It stays below twice the slots, which
    /// are at most [`MAX_SLOTS`].
    at: u32,
}

// Where a decision finds its stamps is known from `at` and the buffer's
// length, not from the heap header: over many keys the header's and the
// stamp's cache misses then overlap instead of following one another. A
// store's entry keeps `at` and the buffer's pointer and length beside its
// key, so a busy key's state is one allocation behind its entry.

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

/// Words before the windows.
const HEADER: usize = 2;

/// Where the slots start in a buffer laid out for `limits` limits.
const fn first_slot(limits: usize) -> usize {
    HEADER + 2 * limits
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
            super::One,
        )
    }

    /// The number of timestamps held.
    pub fn len(&self) -> usize {
        ring_in(&self.buf, self.at, limits_in(&self.buf)).1
    }

    /// Whether no request has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Judges a request as [`LogMut::decide_micros`] does.
    pub(crate) fn decide_micros(
        &mut self,
        now: u64,
        limits: &[Limit],
        capacity: u32,
        forget_after: u64,
        cost: impl Units,
    ) -> Decision {
        self.view()
            .decide_micros(now, limits, capacity, forget_after, cost)
    }

    /// A log laid out for `limits` and at most `capacity` stamps, holding
    /// `stamps` (oldest first, none newer than the next decision's time) as
    /// if they were all it ever recorded.
    pub(crate) fn holding(limits: &[Limit], stamps: &[u64], capacity: u32) -> Self {
        let mut log = Self::default();
        log.view()
            .lay_out_holding(limits, stamps.to_vec(), 0, capacity as usize);
        log
    }

    /// The buffer and where its ring stands, for a store's entry to keep
    /// beside its key.
    pub(crate) fn into_parts(self) -> (Box<[u64]>, u32) {
        (self.buf, self.at)
    }

    /// The log's parts, lent to the code that judges and sheds it.
    pub(crate) fn view(&mut self) -> LogMut<'_> {
        LogMut::new(&mut self.buf, &mut self.at)
    }
}

/// A [`SlidingLog`]'s buffer and ring position, borrowed from wherever they
/// are kept: the log itself, or a store's entry, beside its key. Every
/// decision works through it, so that neither place moves its parts
/// around a decision.
pub(crate) struct LogMut<'a> {
    buf: &'a mut Box<[u64]>,
    at: &'a mut u32,
}

impl<'a> LogMut<'a> {
    /// The log kept as `buf` and `at`, as [`SlidingLog::into_parts`] gave
    /// them.
    pub(crate) fn new(buf: &'a mut Box<[u64]>, at: &'a mut u32) -> Self {
        Self { buf, at }
    }

    /// The ring's oldest slot and its number of stamps, in a buffer laid
    /// out for `limits` limits.
    #[inline]
    fn ring(&self, limits: usize) -> (usize, usize) {
        ring_in(self.buf, *self.at, limits)
    }

    /// The number of timestamps held.
    fn len(&self) -> usize {
        ring_in(self.buf, *self.at, self.limits()).1
    }

    fn total(&self) -> u64 {
        self.buf.first().copied().unwrap_or(0)
    }

    /// The number of limits the buffer is laid out for.
    fn limits(&self) -> usize {
        limits_in(self.buf)
    }

    /// The `i`-th oldest timestamp held, in a buffer laid out for `limits`
    /// limits.
    fn stamp(&self, limits: usize, i: usize) -> u64 {
        stamp_in(self.buf, *self.at, limits, i)
    }

    fn newest(&self, limits: usize) -> Option<u64> {
        let (_, len) = self.ring(limits);
        (len > 0).then(|| self.stamp(limits, len - 1))
    }

    /// Judges a request of `cost` units (from 1 to every limit's `max`) at
    /// `now` (µs) against every limit, recording it if all accept in a ring
    /// of at most `capacity` stamps, which may drop a stamp more than
    /// `forget_after` µs old instead of growing ([`KEEP_EVERY_STAMP`] for
    /// never).
    ///
    /// Takes the view by value: two pointers, kept in registers, rather
    /// than a pointer to them. Out of line, so that a store's ring path
    /// reaches it with a call and keeps its own code small; the store
    /// bench's full-ring case guards the shape.
    #[inline(never)]
    pub(crate) fn decide_micros(
        mut self,
        now: u64,
        limits: &[Limit],
        capacity: u32,
        forget_after: u64,
        cost: impl Units,
    ) -> Decision {
        debug_assert!(capacity as usize <= MAX_SLOTS, "a ring's slots fit `at`");
        debug_assert!(
            cost.get() >= 1 && limits.iter().all(|limit| cost.get() <= limit.max()),
            "a cost from 1 to every limit's max"
        );
        if let [limit] = limits {
            return self.decide_one(now, limit, capacity as usize, forget_after, cost);
        }
        let count = limits.len();
        self.fit(limits, capacity as usize);
        // A clock that stepped back must not make recorded requests look newer
        // than they are: judge at the newest time seen instead.
        let now = self.newest(count).map_or(now, |newest| newest.max(now));
        let (_, len) = self.ring(count);
        let mut verdict = Verdict::default();
        for (index, limit) in limits.iter().enumerate() {
            if let Some(wait) = self.blocking(count, len, now, limit, cost) {
                verdict.refuse(index, wait);
            }
        }
        if let Some(refusal) = verdict.refusal(limits, now) {
            return refusal;
        }
        self.record_units(count, now, capacity as usize, forget_after, cost);
        // Each cursor moves once here; the decision then reads the results
        // (on the stack for any policy; the public API takes longer lists).
        let mut inline = [(0, 0); super::INLINE_LIMITS];
        let mut spilled = Vec::new();
        let quotas: &mut [(u32, u64)] = if limits.len() <= inline.len() {
            &mut inline[..limits.len()]
        } else {
            spilled.resize(limits.len(), (0, 0));
            &mut spilled
        };
        for (index, limit) in limits.iter().enumerate() {
            quotas[index] = self.quota(count, index, now, limit);
        }
        tightest_known(limits, now, quotas)
    }

    /// [`decide_micros`](Self::decide_micros) for one limit, the common
    /// case, without the bookkeeping that picks one limit among several.
    fn decide_one(
        &mut self,
        now: u64,
        limit: &Limit,
        capacity: usize,
        forget_after: u64,
        cost: impl Units,
    ) -> Decision {
        let limits = std::slice::from_ref(limit);
        self.fit(limits, capacity);
        let now = self.newest(1).map_or(now, |newest| newest.max(now));
        let (_, len) = self.ring(1);
        if let Some(wait) = self.blocking(1, len, now, limit, cost) {
            return refused(limits, now, 0, wait);
        }
        self.record_units(1, now, capacity, forget_after, cost);
        let (remaining, replenish_micros) = self.quota(1, 0, now, limit);
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
    /// request). A ring laid out for other limits holds no such request,
    /// and is left alone.
    pub(crate) fn settle(
        mut self,
        settled: &Settlement,
        limits: &[Limit],
        capacity: u32,
        forget_after: u64,
    ) {
        let count = limits.len();
        if !self.laid_out_for(limits, capacity as usize) {
            return;
        }
        if settled.used < settled.cost {
            let (_, len) = self.ring(count);
            let mut stamps: Vec<u64> = (0..len).map(|i| self.stamp(count, i)).collect();
            // The stamps are in order: the request's are among those equal to its time.
            let end = stamps.partition_point(|&stamp| stamp <= settled.at);
            let start = stamps[..end].partition_point(|&stamp| stamp < settled.at);
            let back = (end - start).min((settled.cost - settled.used) as usize);
            if back > 0 {
                stamps.drain(end - back..end);
                let total = self.total();
                self.lay_out_holding(limits, stamps, total, capacity as usize);
            }
        } else if settled.used > settled.cost {
            let now = self
                .newest(count)
                .map_or(settled.now, |newest| newest.max(settled.now));
            for _ in 0..(settled.used - settled.cost).min(capacity) {
                self.record(count, now, capacity as usize, forget_after);
            }
        }
    }

    /// How long `limit` keeps `cost` more units out of its window at `now`,
    /// among `len` stamps in a buffer laid out for `limits` limits: until
    /// the `(max - cost + 1)`-th newest stamp leaves it.
    #[inline(always)]
    fn blocking(
        &self,
        limits: usize,
        len: usize,
        now: u64,
        limit: &Limit,
        cost: impl Units,
    ) -> Option<u64> {
        let need = (limit.max() - cost.get()) as usize + 1;
        if len < need {
            return None;
        }
        blocked_for(self.stamp(limits, len - need), now, limit)
    }

    /// Lays the buffer out for `limits` and at most `capacity` slots,
    /// keeping the newest stamps, when the limits changed or the ring has
    /// more slots than `capacity` (a smaller largest limit). Cursors start
    /// over from the oldest stamp when their windows changed: a cursor
    /// moved for a shorter window may have passed stamps a longer one still
    /// counts. A wrapped ring given a larger `capacity` is laid out in
    /// order by `grow`, when it grows.
    #[inline]
    fn fit(&mut self, limits: &[Limit], capacity: usize) {
        if !self.laid_out_for(limits, capacity) {
            self.lay_out(limits, capacity);
        }
    }

    /// The slow part of [`fit`](Self::fit): a key's first decision, limits
    /// the buffer's layout no longer fits, or a `capacity` smaller than its
    /// slots.
    #[cold]
    fn lay_out(&mut self, limits: &[Limit], capacity: usize) {
        let held = self.limits();
        let stamps: Vec<u64> = (0..self.len()).map(|i| self.stamp(held, i)).collect();
        let total = self.total();
        self.lay_out_holding(limits, stamps, total, capacity);
    }

    /// Lays the buffer out for `limits`, holding the newest `capacity` of
    /// `stamps`, `total` records having been made (at least as many as
    /// `stamps`).
    fn lay_out_holding(
        &mut self,
        limits: &[Limit],
        mut stamps: Vec<u64>,
        total: u64,
        capacity: usize,
    ) {
        stamps.drain(..stamps.len().saturating_sub(capacity));
        let total = total.max(stamps.len() as u64);
        let oldest = total - stamps.len() as u64;
        // A new key gets its first slots now rather than at its first record.
        let spare = FIRST_SLOTS.min(capacity).saturating_sub(stamps.len());
        *self.at = stamps.len() as u32;
        *self.buf = [total, limits.len() as u64]
            .into_iter()
            .chain(limits.iter().map(Limit::window_micros))
            .chain(std::iter::repeat_n(oldest, limits.len()))
            .chain(stamps)
            .chain(std::iter::repeat_n(0, spare))
            .collect();
    }

    /// Whether the buffer is laid out for `limits` and at most `capacity`
    /// slots already: the case of every decision but a key's first, when
    /// a store judges each key under one policy. A ring has no more slots
    /// than `capacity`, so it wraps only once they are all taken.
    fn laid_out_for(&self, limits: &[Limit], capacity: usize) -> bool {
        let Some([count, windows @ ..]) = self.buf.get(1..HEADER + limits.len()) else {
            return false;
        };
        *count == limits.len() as u64
            && self
                .buf
                .len()
                .checked_sub(first_slot(limits.len()))
                .is_some_and(|slots| slots <= capacity)
            && windows
                .iter()
                .zip(limits)
                .all(|(&window, limit)| window == limit.window_micros())
    }

    /// Records a stamp at `now`: after the newest while the ring has room;
    /// else over the oldest, if `capacity` is reached or the oldest is more
    /// than `forget_after` old; else in a ring grown to make room.
    // Forced into its one caller on the hot path, which the store bench's
    // log cases guard.
    #[inline(always)]
    fn record(&mut self, limits: usize, now: u64, capacity: usize, forget_after: u64) {
        let (head, len) = self.ring(limits);
        let first = first_slot(limits);
        let slots = self.buf.len() - first;
        debug_assert!(slots <= capacity, "laid out for at most `capacity` slots");
        if len < slots {
            debug_assert!(head == 0, "only a ring without room wraps");
            self.buf[first + len] = now;
            // One more stamp; taking the last slot makes `at` say "full,
            // oldest first".
            *self.at += 1;
        } else if len < capacity
            && (len == 0 || self.buf[first + head].saturating_add(forget_after) >= now)
        {
            self.grow(limits, capacity);
            self.buf[first + len] = now;
            *self.at += 1;
        } else if len > 0 {
            self.buf[first + head] = now;
            let head = if head + 1 == len { 0 } else { head + 1 };
            debug_assert!(slots <= MAX_SLOTS, "`at` below 2^32");
            *self.at = (slots + head) as u32;
        }
        self.buf[0] += 1;
    }

    /// Records `units` stamps at `now`, as [`record`](Self::record) does
    /// one: a request of several units takes a call out of the hot path.
    #[inline(always)]
    fn record_units(
        &mut self,
        limits: usize,
        now: u64,
        capacity: usize,
        forget_after: u64,
        units: impl Units,
    ) {
        self.record(limits, now, capacity, forget_after);
        if units.get() > 1 {
            self.record_more(limits, now, capacity, forget_after, units.get() - 1);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_more(
        &mut self,
        limits: usize,
        now: u64,
        capacity: usize,
        forget_after: u64,
        more: u32,
    ) {
        for _ in 0..more {
            self.record(limits, now, capacity, forget_after);
        }
    }

    /// Doubles the ring's slots (to at most `capacity`), which are all
    /// taken, laying its stamps out in order from the first slot.
    #[cold]
    fn grow(&mut self, limits: usize, capacity: usize) {
        let slots = (2 * self.ring(limits).1).max(FIRST_SLOTS).min(capacity);
        self.relay(limits, 0, slots);
    }

    /// Moves the stamps from the `from`-th oldest on, in order, into a
    /// ring of `slots` slots (at least as many as those stamps), behind
    /// the same header, in a buffer laid out for `limits` limits.
    fn relay(&mut self, limits: usize, from: usize, slots: usize) {
        let first = first_slot(limits);
        let (head, len) = self.ring(limits);
        // Oldest first: from the head to the end, then the wrapped start.
        let (wrapped, oldest) = self.buf[first..first + len].split_at(head);
        let mut buf = Vec::with_capacity(first + slots);
        buf.extend_from_slice(&self.buf[..first]);
        match oldest.get(from..) {
            Some(kept) => {
                buf.extend_from_slice(kept);
                buf.extend_from_slice(wrapped);
            }
            None => buf.extend_from_slice(&wrapped[from - oldest.len()..]),
        }
        buf.resize(first + slots, 0);
        *self.at = (len - from) as u32;
        *self.buf = buf.into_boxed_slice();
    }

    /// Gives back the slots of a ring, laid out for `limits` limits, of at
    /// least four times [`FIRST_SLOTS`] slots, a quarter of them or fewer
    /// holding stamps inside the longest window (`longest` µs) as measured
    /// from its newest stamp: a store's sweep calls it, so that a key that
    /// once reached its limit does not keep its slots once its traffic
    /// falls. Every later decision is judged at the newest stamp or after
    /// it, so a stamp outside the window then never counts again.
    pub(crate) fn shed_slots(&mut self, limits: usize, longest: u64) {
        if self.limits() != limits {
            return;
        }
        let quarter = (self.buf.len() - first_slot(limits)) / 4;
        if quarter < FIRST_SLOTS {
            return;
        }
        let Some(newest) = self.newest(limits) else {
            return;
        };
        let outside = |log: &Self, i| log.stamp(limits, i).saturating_add(longest) < newest;
        // A sweep visits every key: one read settles a ring that is busy,
        // the common case, before any search. The stamps are in order,
        // oldest first, so a quarter of the slots or fewer hold stamps
        // inside if the one before the newest quarter is outside.
        let mut low = self.len().saturating_sub(quarter);
        if low > 0 && !outside(self, low - 1) {
            return;
        }
        let mut high = self.len();
        while low < high {
            let middle = (low + high) / 2;
            if outside(self, middle) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        let kept = self.len() - low;
        self.relay(limits, low, (2 * kept).max(FIRST_SLOTS));
    }

    /// The stamps inside the longest window (`longest` µs) as measured
    /// from the newest, oldest first, copied to the start of `into`, and
    /// how many: what a store's sweep needs to hold a key's few stamps
    /// without a ring. `None`, with `into` untouched, if they do not fit
    /// there, or if the buffer is not laid out for `limits` limits (then
    /// its stamps are not where this would look for them).
    pub(crate) fn recent_stamps(
        &self,
        limits: usize,
        longest: u64,
        into: &mut [u64],
    ) -> Option<usize> {
        if self.limits() != limits {
            return None;
        }
        let Some(newest) = self.newest(limits) else {
            return Some(0);
        };
        let inside = (0..self.len())
            .rev()
            .take(into.len() + 1)
            .take_while(|&i| self.stamp(limits, i).saturating_add(longest) >= newest)
            .count();
        if inside > into.len() {
            return None;
        }
        let from = self.len() - inside;
        for (slot, i) in into.iter_mut().zip(from..self.len()) {
            *slot = self.stamp(limits, i);
        }
        Some(inside)
    }

    /// Remaining quota under limit `index` at `now`, and when it next grows:
    /// when the oldest timestamp inside the window leaves it.
    #[inline]
    fn quota(&mut self, limits: usize, index: usize, now: u64, limit: &Limit) -> (u32, u64) {
        let oldest_counted = now.saturating_sub(limit.window_micros());
        let (head, len) = self.ring(limits);
        let total = self.total();
        let oldest_record = total - len as u64;
        let at = HEADER + limits + index;
        let mut cursor = self.buf[at].max(oldest_record);
        // Every stamp held lies in the first `len` slots (a ring wraps only
        // once every slot is taken), so the walk steps through slot
        // positions rather than working each one out from the record
        // number again.
        let first = first_slot(limits);
        let ring = &self.buf[first..first + len];
        let mut slot = head + (cursor - oldest_record) as usize;
        if slot >= ring.len() {
            slot -= ring.len();
        }
        let mut oldest = None;
        while cursor < total {
            let stamp = ring[slot];
            if stamp >= oldest_counted {
                oldest = Some(stamp);
                break;
            }
            cursor += 1;
            slot = if slot + 1 == ring.len() { 0 } else { slot + 1 };
        }
        self.buf[at] = cursor;
        quota((total - cursor) as u32, oldest, now, limit)
    }
}

/// The number of limits `buf` is laid out for.
fn limits_in(buf: &[u64]) -> usize {
    buf.get(1).map_or(0, |&count| count as usize)
}

/// The oldest slot of the ring at `at` in `buf`, laid out for `limits`
/// limits, and its number of stamps.
#[inline]
fn ring_in(buf: &[u64], at: u32, limits: usize) -> (usize, usize) {
    let slots = buf.len().saturating_sub(first_slot(limits));
    let at = at as usize;
    if at < slots {
        (0, at)
    } else {
        (at - slots, slots)
    }
}

/// The `i`-th oldest stamp of the ring at `at` in `buf`, laid out for
/// `limits` limits.
#[inline]
fn stamp_in(buf: &[u64], at: u32, limits: usize, i: usize) -> u64 {
    // A ring wraps only once every slot is taken, and then `len` is the
    // number of slots.
    let (head, len) = ring_in(buf, at, limits);
    let at = head + i;
    buf[first_slot(limits) + if at >= len { at - len } else { at }]
}

/// From when (µs) a log, its ring at `at` in `buf`, judges as a fresh one
/// would: one tick past the longest window (`longest_window` µs) from its
/// newest stamp. A store's entry asks it of the parts it keeps.
pub(crate) fn idle_from(buf: &[u64], at: u32, longest_window: u64) -> u64 {
    let limits = limits_in(buf);
    match ring_in(buf, at, limits) {
        (_, 0) => 0,
        (_, len) => stamp_in(buf, at, limits, len - 1)
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
// Hinted: the memory store's log layouts call it on every decision.
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
        shed.view().shed_slots(1, 1_000);
        assert_eq!(shed.len(), 2, "kept the stamps at 1,000 and 2,000 µs");
        assert_eq!(shed.buf.len(), first_slot(1) + FIRST_SLOTS);
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
        assert_eq!(ring_in(&log.buf, log.at, 1).0, 3);
        let mut shed = log.clone();
        shed.view().shed_slots(1, 1_000);
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
            shed.view().shed_slots(limits.len(), longest);
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

    /// A ring using more than a quarter of its slots keeps them.
    #[test]
    fn shedding_leaves_a_busy_ring_alone() {
        let limits = [Limit::new(100, Duration::from_micros(1_000)).unwrap()];
        let mut log = SlidingLog::new();
        for now in 0..40 {
            log.decide_micros(now, &limits, 100, 1_000, 1);
        }
        let before = log.buf.clone();
        log.view().shed_slots(1, 1_000);
        assert_eq!(log.buf, before);
    }
}
