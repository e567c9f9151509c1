//! Sliding window log: exact, one timestamp per accepted request.

use std::time::Duration;

use super::refusal::{tightest, Verdict};
use crate::clock::micros;
use crate::decision::Decision;
use crate::limit::Limit;

/// The accepted requests' timestamps, newest last, in a ring that holds at
/// most the largest limit's worth.
///
/// A request is accepted under a limit of `max` per `W` when fewer than `max`
/// requests were ever accepted, or the `max`-th most recent one is more than
/// `W` old: the window `[now - W, now]` is closed, so a timestamp exactly `W`
/// old still counts. That test reads one slot, so a decision costs O(1) per
/// limit and memory never exceeds the largest limit per key. Rejected
/// requests are not recorded.
#[derive(Clone, Debug, Default)]
pub struct SlidingLog {
    /// Timestamps in microseconds; until full, in order from index 0.
    stamps: Vec<u64>,
    /// Index of the oldest timestamp once the ring is full.
    head: usize,
}

impl SlidingLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Judges a request at `now` (since the clock's zero) against every limit,
    /// recording it if all accept.
    pub fn decide(&mut self, now: Duration, limits: &[Limit]) -> Decision {
        let capacity = limits.iter().map(Limit::max).max().unwrap_or(0);
        self.decide_micros(micros(now), limits, capacity)
    }

    /// The number of timestamps held.
    pub fn len(&self) -> usize {
        self.stamps.len()
    }

    /// Whether no request has been recorded.
    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
    }

    /// The `i`-th oldest timestamp held.
    fn stamp(&self, i: usize) -> u64 {
        let at = self.head + i;
        let len = self.stamps.len();
        self.stamps[if at >= len { at - len } else { at }]
    }

    fn newest(&self) -> Option<u64> {
        (!self.stamps.is_empty()).then(|| self.stamp(self.stamps.len() - 1))
    }

    pub(crate) fn decide_micros(&mut self, now: u64, limits: &[Limit], capacity: u32) -> Decision {
        // A clock that stepped back must not make recorded requests look newer
        // than they are: judge at the newest time seen instead.
        let now = self.newest().map_or(now, |newest| newest.max(now));
        let mut verdict = Verdict::default();
        for (index, limit) in limits.iter().enumerate() {
            let max = limit.max() as usize;
            if self.len() >= max {
                if let Some(wait) = blocked_for(self.stamp(self.len() - max), now, limit) {
                    verdict.refuse(index, wait);
                }
            }
        }
        if let Some(refusal) = verdict.refusal(limits) {
            return refusal;
        }
        self.record(now, capacity as usize);
        tightest(limits, |index| self.quota(now, &limits[index]))
    }

    fn record(&mut self, now: u64, capacity: usize) {
        if self.stamps.len() != capacity && self.head != 0 {
            // The limits changed size since the ring filled: put it back in
            // order so that pushing or trimming keeps the oldest-first layout.
            self.stamps.rotate_left(self.head);
            self.head = 0;
        }
        if self.stamps.len() > capacity {
            self.stamps.drain(..self.stamps.len() - capacity);
        }
        if self.stamps.len() < capacity {
            self.stamps.push(now);
        } else if capacity > 0 {
            self.stamps[self.head] = now;
            self.head = (self.head + 1) % capacity;
        }
    }

    /// Remaining quota under `limit` at `now`, and when it next grows: when
    /// the oldest timestamp inside the window leaves it.
    fn quota(&self, now: u64, limit: &Limit) -> (u32, u64) {
        let oldest_counted = now.saturating_sub(limit.window_micros());
        let first = partition_point(self.len(), |i| self.stamp(i) < oldest_counted);
        let oldest = (first < self.len()).then(|| self.stamp(first));
        quota((self.len() - first) as u32, oldest, now, limit)
    }

    pub(crate) fn idle_from_micros(&self, longest_window: u64) -> u64 {
        self.newest().map_or(0, |newest| {
            newest.saturating_add(longest_window).saturating_add(1)
        })
    }
}

/// How long the `max`-th most recent stamp, `blocking`, still keeps a
/// request out: until it is more than one window old, one tick past the
/// window's closed end. `None` if it already has left.
pub(crate) fn blocked_for(blocking: u64, now: u64, limit: &Limit) -> Option<u64> {
    let expires = blocking.saturating_add(limit.window_micros());
    (expires >= now).then(|| expires - now + 1)
}

/// Remaining quota with `in_window` stamps inside `limit`'s window, and how
/// long until the `oldest` of them leaves it.
pub(crate) fn quota(in_window: u32, oldest: Option<u64>, now: u64, limit: &Limit) -> (u32, u64) {
    let remaining = limit.max().saturating_sub(in_window);
    let replenish = oldest.map_or(0, |oldest| {
        (oldest.saturating_add(limit.window_micros()) + 1).saturating_sub(now)
    });
    (remaining, replenish)
}

/// The first index in `0..len` for which `before` is false (it must be true
/// then false, as it is over timestamps in order).
fn partition_point(len: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, len);
    while low < high {
        let mid = low + (high - low) / 2;
        if before(mid) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    low
}
