//! Sliding window log: exact, one timestamp per accepted request.

use std::time::Duration;

use super::refusal::{tightest, Verdict};
use crate::clock::micros;
use crate::decision::{Decision, Quota};
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
///
/// The remaining quota comes from one cursor per limit, the first record
/// still inside that limit's window; time only moves forward (a clock that
/// steps back is judged at the newest time recorded), so cursors only move
/// forward too, and counting stays O(1) amortised.
#[derive(Clone, Debug, Default)]
pub struct SlidingLog {
    /// Everything in one allocation, so a key's entry in a store stays small:
    /// `[total, head << 32 | cursors, cursor..., stamp...]`, where `total`
    /// counts records ever made, `head` is the ring index of the oldest stamp
    /// once the ring is full, each cursor is the record number of the first
    /// record still inside one limit's window, and stamps are microseconds.
    /// Empty until the first record.
    buf: Vec<u64>,
}

/// Words before the cursors.
const HEADER: usize = 2;

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
    /// If `limits` is empty: a decision needs a limit to report. A
    /// [`Policy`](crate::Policy) always has one.
    pub fn decide(&mut self, now: Duration, limits: &[Limit]) -> Decision {
        let capacity = limits.iter().map(Limit::max).max().unwrap_or(0);
        self.decide_micros(micros(now), limits, capacity)
    }

    /// The number of timestamps held.
    pub fn len(&self) -> usize {
        self.buf.len().saturating_sub(HEADER + self.cursors())
    }

    /// Whether no request has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn total(&self) -> u64 {
        self.buf.first().copied().unwrap_or(0)
    }

    fn cursors(&self) -> usize {
        self.buf
            .get(1)
            .map_or(0, |&word| (word & u64::from(u32::MAX)) as usize)
    }

    fn head(&self) -> usize {
        self.buf.get(1).map_or(0, |&word| (word >> 32) as usize)
    }

    fn set_head(&mut self, head: usize) {
        self.buf[1] = (head as u64) << 32 | self.cursors() as u64;
    }

    fn ring(&self) -> &[u64] {
        &self.buf[(HEADER + self.cursors()).min(self.buf.len())..]
    }

    /// The `i`-th oldest timestamp held.
    fn stamp(&self, i: usize) -> u64 {
        let ring = self.ring();
        let at = self.head() + i;
        ring[if at >= ring.len() {
            at - ring.len()
        } else {
            at
        }]
    }

    fn newest(&self) -> Option<u64> {
        (!self.is_empty()).then(|| self.stamp(self.len() - 1))
    }

    /// The record number of the oldest stamp still held.
    fn oldest_record(&self) -> u64 {
        self.total() - self.len() as u64
    }

    pub(crate) fn decide_micros(&mut self, now: u64, limits: &[Limit], capacity: u32) -> Decision {
        self.fit(limits.len(), capacity as usize);
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
        if let Some(refusal) = verdict.refusal(limits, now) {
            return refusal;
        }
        self.record(now, capacity as usize);
        // Each cursor moves once here; the decision then reads the results
        // (on the stack for any policy; the public API takes longer lists).
        let mut inline = [(0, 0); crate::policy::Policy::MAX_LIMITS];
        let mut spilled = Vec::new();
        let quotas: &mut [(u32, u64)] = if limits.len() <= inline.len() {
            &mut inline[..limits.len()]
        } else {
            spilled.resize(limits.len(), (0, 0));
            &mut spilled
        };
        for (index, limit) in limits.iter().enumerate() {
            quotas[index] = self.quota(index, now, limit);
        }
        tightest(
            limits,
            now,
            |index| quotas[index].0,
            |index| Quota::Known {
                remaining: quotas[index].0,
                replenish_micros: quotas[index].1,
            },
        )
    }

    /// Lays the buffer out for `limits` cursors and at most `capacity`
    /// stamps, keeping the newest stamps if the policy changed shape.
    fn fit(&mut self, limits: usize, capacity: usize) {
        if !self.buf.is_empty() && self.cursors() == limits && self.len() <= capacity {
            return;
        }
        let mut stamps: Vec<u64> = (0..self.len()).map(|i| self.stamp(i)).collect();
        stamps.drain(..stamps.len().saturating_sub(capacity));
        let total = self.total().max(stamps.len() as u64);
        let oldest = total - stamps.len() as u64;
        let header = [total, limits as u64];
        self.buf = header
            .into_iter()
            .chain(std::iter::repeat_n(oldest, limits))
            .chain(stamps)
            .collect();
    }

    fn record(&mut self, now: u64, capacity: usize) {
        if self.len() < capacity {
            self.buf.push(now);
        } else if capacity > 0 {
            let head = self.head();
            let at = HEADER + self.cursors() + head;
            self.buf[at] = now;
            self.set_head(if head + 1 == capacity { 0 } else { head + 1 });
        }
        self.buf[0] += 1;
    }

    /// Remaining quota under limit `index` at `now`, and when it next grows:
    /// when the oldest timestamp inside the window leaves it.
    fn quota(&mut self, index: usize, now: u64, limit: &Limit) -> (u32, u64) {
        let oldest_counted = now.saturating_sub(limit.window_micros());
        let (oldest_record, total) = (self.oldest_record(), self.total());
        let mut cursor = self.buf[HEADER + index].max(oldest_record);
        while cursor < total && self.stamp((cursor - oldest_record) as usize) < oldest_counted {
            cursor += 1;
        }
        self.buf[HEADER + index] = cursor;
        let in_window = (total - cursor) as u32;
        let oldest = (in_window > 0).then(|| self.stamp((cursor - oldest_record) as usize));
        quota(in_window, oldest, now, limit)
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
    (expires >= now).then(|| (expires - now).saturating_add(1))
}

/// Remaining quota with `in_window` stamps inside `limit`'s window, and how
/// long until the `oldest` of them leaves it.
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
