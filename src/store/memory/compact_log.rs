//! The sliding log as a store keeps it: a key whose windows hold a few
//! stamps keeps them beside its key, and only a busier key a ring on the
//! heap.

use crate::algorithm::log::{blocked_for, forgotten_before, idle_from, quota, LogMut, SlidingLog};
use crate::algorithm::refusal::{accepted, tightest_known, Verdict};
use crate::algorithm::Units;
use crate::algorithm::{Decision, Quota, Settlement, INLINE_LIMITS};
use crate::limit::Limit;

/// Stamps a key holds beside its entry without a ring: as many as fit
/// beside the variant's tag in the three words a ring's handle takes.
const FEW: usize = 2;

/// One key's sliding log in a store, which judges it under one policy
/// only (see [`SlidingLog`] for the semantics, which are the same).
///
/// Over many keys a ring on the heap is a second cache miss behind the
/// map's: most keys of a real service see a few requests a window, and
/// keeping those few stamps in the entry spares that miss and the ring's
/// allocation. A key moves to a ring when a stamp still inside the
/// policy's longest window would not fit, and back at a store's sweep once
/// its stamps inside that window fit again.
#[derive(Clone, Debug)]
pub(super) enum CompactLog {
    /// The first `len` of `stamps`, oldest first.
    Few { len: u32, stamps: [u64; FEW] },
    /// More stamps inside the longest window than `Few` holds: a
    /// [`SlidingLog`]'s parts, laid out here so that its position in the
    /// ring and the pointer and length of its one allocation take the room
    /// `Few`'s length and stamps do (in a `SlidingLog` they would take a
    /// word more, the log's padding).
    Ring { at: u32, slots: Box<[u64]> },
}

impl Default for CompactLog {
    fn default() -> Self {
        Self::Few {
            len: 0,
            stamps: [0; FEW],
        }
    }
}

impl CompactLog {
    /// Judges a request at `now` (µs) against every limit and records it
    /// if all accept, deciding as [`SlidingLog::decide_micros`] does with
    /// the same arguments. That holds as a store calls it: `capacity` the
    /// largest limit's `max` (at least 1) and `forget_after` the longest
    /// window, both the same at every call. A stamp more than
    /// `forget_after` µs older than the newest then never counts again,
    /// and is what this log lets go where the ring would keep it.
    pub(super) fn decide_micros(
        &mut self,
        now: u64,
        limits: &[Limit],
        capacity: u32,
        forget_after: u64,
        cost: impl Units,
    ) -> Decision {
        debug_assert!(capacity >= 1, "a limit's max is at least 1");
        debug_assert!(
            limits
                .iter()
                .all(|limit| limit.window_micros() <= forget_after),
            "no stamp a window counts is forgotten"
        );
        let (len, stamps) = match self {
            // Any number of limits: the quotas below are kept on the stack
            // for as many as a policy may have.
            // A request of several units takes the ring's way of recording.
            Self::Few { len, stamps } if limits.len() <= INLINE_LIMITS && cost.get() == 1 => {
                (len, stamps)
            }
            Self::Few { len, stamps } => {
                let stamps = stamps[..*len as usize].to_vec();
                let log = SlidingLog::holding(&stamps, capacity);
                *self = Self::ring(log);
                return self.decide_micros(now, limits, capacity, forget_after, cost);
            }
            Self::Ring { .. } => {
                return self.ring_decides(now, limits, capacity, forget_after, cost)
            }
        };
        let held = *len as usize;
        // A clock that stepped back is judged at the newest time recorded.
        let now = match held {
            0 => now,
            _ => stamps[held - 1].max(now),
        };
        let mut verdict = Verdict::default();
        for (index, limit) in limits.iter().enumerate() {
            let max = limit.max() as usize;
            if held >= max {
                if let Some(wait) = blocked_for(stamps[held - max], now, limit) {
                    verdict.refuse(index, wait);
                }
            }
        }
        if let Some(refusal) = verdict.refusal(limits, now) {
            return refusal;
        }
        let capacity_left = (capacity as usize).saturating_sub(held);
        if held < FEW && capacity_left > 0 {
            stamps[held] = now;
            *len += 1;
        } else if capacity_left > 0 && stamps[0].saturating_add(forget_after) >= now {
            // The oldest stamp may still count: the key needs a ring. The
            // ring judges the request again, with the same stamps and so
            // the same verdict.
            let mut log = SlidingLog::holding(&stamps[..held], capacity);
            let decision = log.decide_micros(now, limits, capacity, forget_after, 1);
            *self = Self::ring(log);
            return decision;
        } else {
            // The oldest stamp can be let go. Either it is more than the
            // longest window old; or the capacity is reached, and then it is
            // no newer than each limit's `max`-th newest stamp, which every
            // limit has just found outside its window.
            if held == FEW {
                // The common case, in moves of a length known at compile
                // time rather than a call to copy memory.
                for slot in 1..FEW {
                    stamps[slot - 1] = stamps[slot];
                }
                stamps[FEW - 1] = now;
            } else {
                stamps.copy_within(1..held, 0);
                stamps[held - 1] = now;
            }
        }
        let recorded = &stamps[..*len as usize];
        if let [limit] = limits {
            let (remaining, replenish_micros) = counted(recorded, now, limit);
            let quota = Quota::Known {
                remaining,
                replenish_micros,
            };
            return accepted(limits, now, 0, quota);
        }
        let mut quotas = [(0, 0); INLINE_LIMITS];
        for (quota, limit) in quotas.iter_mut().zip(limits) {
            *quota = counted(recorded, now, limit);
        }
        tightest_known(limits, now, &quotas[..limits.len()])
    }

    /// Settles a request as [`LogMut::settle`] does, with the arguments of
    /// [`decide_micros`](Self::decide_micros).
    pub(super) fn settle(&mut self, settled: &Settlement, capacity: u32, forget_after: u64) {
        match self {
            Self::Few { len, stamps } if settled.used <= settled.cost => {
                let Some(&newest) = stamps[..*len as usize].last() else {
                    return;
                };
                let mut back = settled.cost - settled.used;
                // The newest of the request's stamps first, as the ring takes them.
                for i in (0..*len as usize).rev() {
                    if back == 0 || stamps[i] < settled.at {
                        break;
                    }
                    if stamps[i] == settled.at {
                        stamps.copy_within(i + 1..*len as usize, i);
                        *len -= 1;
                        back -= 1;
                    }
                }
                if back < settled.cost - settled.used {
                    let held = *len as usize;
                    let forgotten = forgotten_before(&stamps[..held], newest, forget_after);
                    stamps.copy_within(forgotten..held, 0);
                    *len -= forgotten as u32;
                }
            }
            Self::Few { len, stamps } => {
                let stamps = stamps[..*len as usize].to_vec();
                *self = Self::ring(SlidingLog::holding(&stamps, capacity));
                self.settle(settled, capacity, forget_after);
            }
            Self::Ring { at, slots } => {
                LogMut::new(slots, at).settle(settled, capacity, forget_after);
            }
        }
    }

    /// From when (µs) the log judges as a fresh one would: one tick past
    /// the longest window (`longest` µs) from its newest stamp.
    pub(super) fn idle_from_micros(&self, longest: u64) -> u64 {
        match self {
            Self::Few { len: 0, .. } => 0,
            Self::Few { len, stamps } => stamps[*len as usize - 1]
                .saturating_add(longest)
                .saturating_add(1),
            Self::Ring { at, slots } => idle_from(slots, *at, longest),
        }
    }

    /// At a store's sweep: a ring whose stamps inside the longest window
    /// (`longest` µs, measured from its newest stamp) fit in `Few` again
    /// becomes `Few`; a larger one gives back the slots its traffic no
    /// longer fills. Every later decision is judged at the newest stamp or
    /// after it, so a stamp outside the window never counts again.
    pub(super) fn shed(&mut self, longest: u64) {
        let Self::Ring { at, slots } = self else {
            return;
        };
        let mut log = LogMut::new(slots, at);
        let mut stamps = [0; FEW];
        match log.recent_stamps(longest, &mut stamps) {
            Some(len) => {
                *self = Self::Few {
                    len: len as u32,
                    stamps,
                }
            }
            None => log.shed_slots(longest),
        }
    }

    /// A ring's decision. Out of line, taking the arguments of
    /// [`decide_micros`](Self::decide_micros) in the same order, so that
    /// the few-stamps path reaches a ring with a jump rather than setting
    /// up the call to [`LogMut::decide_micros`] itself. Its one caller
    /// matched `Ring`; the `Few` arm only keeps it total.
    #[inline(never)]
    fn ring_decides(
        &mut self,
        now: u64,
        limits: &[Limit],
        capacity: u32,
        forget_after: u64,
        cost: impl Units,
    ) -> Decision {
        match self {
            Self::Ring { at, slots } => {
                LogMut::new(slots, at).decide_micros(now, limits, capacity, forget_after, cost)
            }
            Self::Few { .. } => self.decide_micros(now, limits, capacity, forget_after, cost),
        }
    }

    /// A ring holding `log`'s stamps.
    fn ring(log: SlidingLog) -> Self {
        let (slots, at) = log.into_parts();
        Self::Ring { at, slots }
    }

    /// Whether the stamps are held without a ring.
    #[cfg(test)]
    fn is_few(&self) -> bool {
        matches!(self, Self::Few { .. })
    }
}

/// Remaining quota under `limit` at `now` with `stamps` (oldest first)
/// recorded, and when it next grows.
// Hinted, as `quota` is: both log layouts call it on every decision.
#[inline]
fn counted(stamps: &[u64], now: u64, limit: &Limit) -> (u32, u64) {
    let oldest_counted = now.saturating_sub(limit.window_micros());
    let first = stamps
        .iter()
        .position(|&stamp| stamp >= oldest_counted)
        .unwrap_or(stamps.len());
    let in_window = (stamps.len() - first) as u32;
    quota(in_window, stamps.get(first).copied(), now, limit)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::algorithm::log::tests::{capacity_and_longest, limit_sets};

    #[test]
    fn stamps_and_tag_take_a_word_each() {
        assert_eq!(std::mem::size_of::<CompactLog>(), 24);
    }

    /// A ring is taken only for a stamp still inside the window, and given
    /// back at a sweep once the stamps inside fit again.
    #[test]
    fn moves_to_a_ring_and_back_as_its_window_fills_and_empties() {
        let limits = [Limit::new(10, Duration::from_micros(1_000)).unwrap()];
        let decide = |log: &mut CompactLog, now| log.decide_micros(now, &limits, 10, 1_000, 1);
        let mut log = CompactLog::default();
        for now in [0, 2_000, 4_000, 6_000] {
            assert!(decide(&mut log, now).is_allowed());
        }
        assert!(log.is_few(), "a stamp outside the window makes room");
        assert_eq!(decide(&mut log, 6_500).remaining(), 8);
        assert!(log.is_few(), "two stamps inside the window fit");
        assert_eq!(decide(&mut log, 7_000).remaining(), 7);
        assert!(!log.is_few(), "a third needs a ring");
        log.shed(1_000);
        assert!(!log.is_few(), "three stamps inside the window keep it");
        assert_eq!(decide(&mut log, 7_600).remaining(), 8);
        log.shed(1_000);
        assert!(log.is_few(), "7,000 and 7,600 µs are all that count");
        assert_eq!(decide(&mut log, 8_000).remaining(), 7);
        assert!(!log.is_few(), "all three count at 8,000 µs");
    }

    /// A ring's idle time runs from its newest stamp, wherever the ring
    /// has wrapped it to: a store's sweep drops the key from then on.
    #[test]
    fn a_rings_idle_time_follows_its_newest_stamp() {
        let limits = [Limit::new(10, Duration::from_micros(1_000)).unwrap()];
        let mut log = CompactLog::default();
        for now in [0, 100, 200, 300] {
            assert!(log.decide_micros(now, &limits, 10, 1_000, 1).is_allowed());
        }
        assert!(!log.is_few(), "four stamps inside the window: a full ring");
        assert_eq!(log.idle_from_micros(1_000), 1_301);
        // Each of these overwrites the oldest stamp, over 1,000 µs old:
        // the newest then sits before the oldest in the ring's slots.
        for now in [1_200, 1_250, 1_390] {
            assert!(log.decide_micros(now, &limits, 10, 1_000, 1).is_allowed());
            assert!(!log.is_few());
            assert_eq!(log.idle_from_micros(1_000), now + 1_001, "at {now} µs");
        }
    }

    /// More limits than a policy may have (the store never passes them)
    /// are judged in a ring, as the algorithm's log judges them.
    #[test]
    fn more_limits_than_a_policy_holds_are_judged_in_a_ring() {
        let limits: Vec<Limit> = (1..=INLINE_LIMITS as u32 + 1)
            .map(|max| Limit::new(max, Duration::from_micros(100 * u64::from(max))).unwrap())
            .collect();
        let longest = limits.iter().map(Limit::window_micros).max().unwrap();
        let capacity = INLINE_LIMITS as u32 + 1;
        let mut compact = CompactLog::default();
        let mut core = SlidingLog::new();
        for now in [0, 0, 50, 120, 130, 400, 401, 950] {
            assert_eq!(
                compact.decide_micros(now, &limits, capacity, longest, 1),
                core.decide(Duration::from_micros(now), &limits),
                "at {now} µs"
            );
        }
        assert!(!compact.is_few());
    }

    proptest! {
        /// Decision for decision the same as the algorithm's log, which
        /// keeps every stamp, whatever the limits, the traffic and the
        /// sweeps in between, with the clock stepping back at times.
        #[test]
        fn decides_as_the_core_log(
            limits in limit_sets(),
            // Sometimes close to the end of the clock's range, where
            // windows and waits saturate.
            start in prop_oneof![3 => Just(10_000u64), 1 => Just(u64::MAX - 20_000)],
            steps in prop::collection::vec(
                (
                    prop_oneof![
                        3 => Just(0i64),
                        3 => 0i64..300,
                        2 => Just(1_000i64),
                        2 => 0i64..6_000,
                        1 => -2_000i64..0,
                    ],
                    prop::bool::weighted(0.1),
                ),
                1..300,
            ),
        ) {
            let (capacity, longest) = capacity_and_longest(&limits);
            let mut compact = CompactLog::default();
            let mut core = SlidingLog::new();
            let mut now = start;
            for (step, sweep) in steps {
                now = now.saturating_add_signed(step);
                if sweep {
                    compact.shed(longest);
                }
                let expected = core.decide(Duration::from_micros(now), &limits);
                prop_assert_eq!(
                    compact.decide_micros(now, &limits, capacity, longest, 1),
                    expected,
                    "at {} µs", now
                );
            }
        }
    }
}
