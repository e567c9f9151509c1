//! One key's chunk of local quota: the units Redis granted and the rules
//! for spending, settling and giving them back (see `quota` and
//! docs/design.md, "Local quota").

use std::sync::atomic::{AtomicU64, Ordering};

use crate::algorithm::{Algorithm, Decision};
use crate::policy::Policy;

/// Whether `policy`'s chunks are held for a horizon, as a time the
/// script is told of, rather than spent inside the windows they were
/// counted in: the bucket's (charged to the hold's end) and the log's
/// (whose windows are widened by it).
pub(super) fn held(policy: &Policy) -> bool {
    matches!(
        policy.algorithm(),
        Algorithm::TokenBucket | Algorithm::SlidingLog
    )
}

/// How long a chunk granted at Redis time `at` may be spent: until the
/// earliest of its windows ends, or if [`held`], for the horizon.
pub(super) fn lifetime(policy: &Policy, at: u64, horizon: u64) -> u64 {
    if held(policy) {
        return horizon;
    }
    let ends = policy.limits().iter().map(|limit| {
        let w = limit.window_micros();
        w - at % w
    });
    ends.min().unwrap_or(0)
}

/// Units granted by Redis and not yet spent. Times are on the store's
/// local clock, in µs, but `grant`'s, which is Redis's.
#[derive(Default)]
pub(super) struct Chunk {
    /// Units left to spend.
    pub(super) units: u32,
    /// The grant the units came from.
    grant: Grant,
    /// Redis's decision on the grant: every local decision is this one,
    /// placed later.
    decision: Option<Decision>,
    /// When the grant was sent: the chunk's lifetime runs from then.
    sent: u64,
    /// The units may be spent before this instant.
    until: u64,
    /// When the key was last asked for.
    pub(super) asked_at: u64,
    /// When the current period of demand began, and the units a horizon
    /// the periods before it asked for, on average.
    period: u64,
    asked_before: u64,
    /// What Redis last said remains of the key's tightest limit.
    pub(super) remaining: Option<u32>,
    /// When a grant last failed: the requests that waited for it are
    /// judged one by one, not by one failed grant after another.
    pub(super) failed: Option<u64>,
    /// Redis's last refusal of a request alone, of how many units, and
    /// when it was asked for: it answers requests of as many units or more
    /// until its wait or a horizon is up, whichever is first.
    pub(super) refused: Option<(Decision, u32, u64)>,
    /// The chunk before this one, taken out when this one was granted:
    /// what its requests did not use gathers here, to go back with what it
    /// had left at the next sweep.
    retired: Option<Leftover>,
}

/// A chunk as Redis granted it: what a settling must match to go back to
/// it, and where its units go back to in Redis.
#[derive(Clone, Copy, Default)]
pub(super) struct Grant {
    /// Its number among the key's chunks, never 0 (which no chunk is):
    /// the decisions it made carry it.
    id: u16,
    /// Redis's time when it was granted (µs): the window it was counted
    /// in, the log's stamps.
    pub(super) at: u64,
    /// How long it may be spent, from when it was asked for.
    lifetime: u64,
    pub(super) size: u32,
}

impl Grant {
    /// Whether Redis counted `admitted`'s units where it counted this
    /// grant's, so that units `admitted` did not use may be spent from
    /// this chunk or go back with it: under the windows, a request counted
    /// in the same windows; under the bucket and the log, only one this
    /// chunk admitted (placed inside its lifetime), its units charged
    /// until its hold ends and stamped at the grant.
    fn counted(&self, policy: &Policy, admitted: &Decision) -> bool {
        let at = admitted.at_micros;
        if held(policy) {
            return admitted.chunk == self.id && (self.at..self.at + self.lifetime).contains(&at);
        }
        policy.limits().iter().all(|limit| {
            let w = limit.window_micros();
            at / w == self.at / w
        })
    }
}

/// Unspent units of a chunk, to go back to the window they were counted in.
pub(super) struct Leftover {
    pub(super) grant: Grant,
    pub(super) units: u32,
}

impl Leftover {
    /// All `size` units of a grant Redis made at `at`, none of them spent.
    pub(super) fn unspent(at: u64, size: u32) -> Self {
        let grant = Grant {
            at,
            size,
            ..Grant::default()
        };
        Self { grant, units: size }
    }
}

impl Chunk {
    /// The decision on a request of `cost` units at local time `now`, if
    /// the chunk still holds that many and its window has not ended. It is
    /// the grant's, placed at the Redis time the request is admitted at the
    /// latest: the grant's time plus what has passed since it was sent.
    pub(super) fn take(&mut self, cost: u32, now: u64) -> Option<Decision> {
        let grant = self
            .decision
            .filter(|_| now < self.until && self.units >= cost)?;
        self.units -= cost;
        let mut decision = grant;
        decision.at_micros = grant.at_micros + now.saturating_sub(self.sent);
        decision.chunk = self.grant.id;
        Some(decision)
    }

    /// The refusal that still stands at local time `now` for a request of
    /// `cost` units, if any: one of fewer units was refused and its wait is
    /// not up, nor a horizon (`longest`) past, since quota given back by
    /// other instances may make room before Redis's wait says.
    pub(super) fn refusal(&self, cost: u32, now: u64, longest: u64) -> Option<Decision> {
        let (refusal, refused_cost, from) = self.refused?;
        let until = from.saturating_add(refusal.retry_after_micros.min(longest));
        (cost >= refused_cost && (from..until).contains(&now))
            .then(|| refusal.refusal_later(now - from))
    }

    /// Settles within the chunk, at local time `now`, a request of `cost`
    /// units under `policy` that used `used`: an excess is taken from the
    /// chunk, if it is live and holds as much; units not used go back to
    /// it if it is live and they were [`counted`](Grant::counted) with
    /// it, or else to the retired chunk if counted with that one, to go
    /// back to Redis with what it had left. `false` otherwise: Redis
    /// settles it.
    pub(super) fn settle(
        &mut self,
        policy: &Policy,
        admitted: &Decision,
        cost: u32,
        used: u32,
        now: u64,
    ) -> bool {
        let live = self.decision.is_some() && now < self.until;
        if let Some(excess) = used.checked_sub(cost) {
            let taken = live && excess <= self.units;
            if taken {
                self.units -= excess;
            }
            return taken;
        }
        let unused = cost - used;
        if live && self.grant.counted(policy, admitted) {
            self.units += unused;
            return true;
        }
        let retired = self.retired.as_mut();
        match retired.filter(|retired| retired.grant.counted(policy, admitted)) {
            Some(retired) => {
                retired.units += unused;
                true
            }
            None => false,
        }
    }

    /// Takes out what is left of the chunk, if anything.
    pub(super) fn leftover(&mut self) -> Option<Leftover> {
        self.decision.filter(|_| self.units > 0)?;
        let units = std::mem::take(&mut self.units);
        Some(Leftover {
            grant: self.grant,
            units,
        })
    }

    /// Retires the chunk before a new one is granted, and returns the one
    /// retired before it, if anything is to go back from it.
    pub(super) fn retire(&mut self) -> Option<Leftover> {
        let retiring = self.decision.map(|_| Leftover {
            grant: self.grant,
            units: std::mem::take(&mut self.units),
        });
        std::mem::replace(&mut self.retired, retiring).filter(|retired| retired.units > 0)
    }

    /// What is to go back from the retired chunk, if anything.
    pub(super) fn retired_leftover(&mut self) -> Option<Leftover> {
        self.retired.take().filter(|retired| retired.units > 0)
    }

    /// Holds `decision`, Redis's on a chunk of `size` units sent at `sent`,
    /// to spend for `lifetime` from then.
    pub(super) fn fill(&mut self, decision: Decision, size: u32, sent: u64, lifetime: u64) {
        self.remaining = Some(decision.remaining());
        self.grant = Grant {
            id: self.grant.id.checked_add(1).unwrap_or(1),
            at: decision.at_micros,
            lifetime,
            size,
        };
        self.decision = Some(decision);
        self.units = size;
        self.sent = sent;
        self.until = sent + lifetime;
        self.failed = None;
    }

    /// Whether the chunk ends within `horizon` of `now`, before the sweep
    /// after next: a window's chunk then goes back while its window is
    /// still current. A held chunk lasts a horizon from its grant anyway.
    pub(super) fn ending(&self, policy: &Policy, now: u64, horizon: u64) -> bool {
        !held(policy) && self.until.saturating_sub(now) <= horizon
    }
}

/// The size of the next chunk for a request of `cost` units: the key's
/// recent local demand, capped by a share of what remains divided among
/// the `live` instances. Near the limit that is no more than the request:
/// Redis then judges each request, as it does without local quota.
pub(super) fn chunk_size(demand: u64, cost: u32, remaining: u32, live: usize) -> u32 {
    let live = u32::try_from(live.max(1)).unwrap_or(u32::MAX);
    let share = remaining / live.saturating_mul(2);
    let demand = u32::try_from(demand).unwrap_or(u32::MAX);
    demand.min(share).max(cost)
}

impl Chunk {
    /// The key's recent local rate times `horizon`, on the store's clock:
    /// the units `asked` for since the current period of demand began,
    /// scaled to a horizon once it has lasted one, or the units `waiting`
    /// for the chunk now and this request's if more (a burst that queued on
    /// one grant is served by the next). A period ends at the first grant a
    /// horizon or more after it began.
    pub(super) fn demand(
        &mut self,
        asked: &AtomicU64,
        waiting: u64,
        now: u64,
        horizon: u64,
    ) -> u64 {
        let lasted = now.saturating_sub(self.period);
        if lasted >= horizon {
            let asked = asked.swap(0, Ordering::Relaxed);
            let per_horizon = u128::from(asked) * u128::from(horizon) / u128::from(lasted);
            self.asked_before = u64::try_from(per_horizon).unwrap_or(u64::MAX);
            self.period = now;
        }
        let recent = self.asked_before.max(asked.load(Ordering::Relaxed));
        recent.max(waiting + 1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limit::Limit;

    #[test]
    fn a_chunk_is_spent_before_its_earliest_window_ends() {
        let limit = |max, secs| Limit::new(max, Duration::from_secs(secs)).unwrap();
        let policy = Policy::new(Algorithm::SlidingCounter, [limit(100, 1), limit(1_000, 60)]);
        let policy = policy.unwrap();
        // Granted 0.7 s into a second and 0.7 s into a minute, sent at 5 ms
        // on the local clock: the second ends 300 ms later.
        let at = 120_700_000;
        let grant = Decision::allow(policy.first_limit(), Duration::from_micros(at));
        let mut chunk = Chunk::default();
        chunk.fill(grant, 10, 5_000, lifetime(&policy, at, 50_000));
        assert_eq!(chunk.until, 305_000);
        // A request is placed at the latest Redis time it can be admitted.
        let decision = chunk.take(3, 105_000).unwrap();
        assert_eq!(decision.decided_at(), Duration::from_micros(at + 100_000));
        assert!(chunk.take(8, 105_000).is_none(), "more than is left");
        assert!(chunk.take(1, 305_000).is_none(), "after the window ended");
        let leftover = chunk.leftover().unwrap();
        let grant = leftover.grant;
        assert_eq!((grant.at, grant.size, leftover.units), (at, 10, 7));
        assert!(chunk.leftover().is_none(), "given back once");
        assert!(chunk.take(1, 105_000).is_none());
    }

    /// A chunk at local time `sent` of a grant at Redis time `at`, for a
    /// horizon of 100 ms.
    fn filled(chunk: &mut Chunk, policy: &Policy, at: u64, sent: u64) {
        let grant = Decision::allow(policy.first_limit(), Duration::from_micros(at));
        chunk.fill(grant, 10, sent, lifetime(policy, at, 100_000));
    }

    #[test]
    fn a_settling_goes_back_only_where_its_units_were_counted() {
        let limit = Limit::new(100, Duration::from_secs(1)).unwrap();
        let log = Policy::new(Algorithm::SlidingLog, [limit]).unwrap();
        let fixed = Policy::new(Algorithm::FixedWindow, [limit]).unwrap();
        for policy in [&log, &fixed] {
            let mut chunk = Chunk::default();
            filled(&mut chunk, policy, 5_200_000, 0);
            let first = chunk.take(4, 10_000).unwrap();
            // A request the chunk admitted gives back to it.
            assert!(chunk.settle(policy, &first, 4, 1, 20_000));
            assert_eq!(chunk.units, 9);
            // An excess is taken from it.
            assert!(chunk.settle(policy, &first, 4, 6, 20_000));
            assert_eq!(chunk.units, 7);
            assert!(
                !chunk.settle(policy, &first, 4, 12, 20_000),
                "more than it holds"
            );
            // Retired by the next chunk, it gathers what its requests did
            // not use (the log's: their stamps are its own); a window's
            // next chunk, counted in the same window, takes them.
            let second = chunk.take(4, 30_000).unwrap();
            assert!(chunk.retire().is_none());
            filled(&mut chunk, policy, 5_240_000, 40_000);
            assert!(chunk.settle(policy, &second, 4, 0, 50_000));
            let (new, retired) = if policy == &log { (10, 3 + 4) } else { (14, 3) };
            assert_eq!(chunk.units, new, "{policy:?}");
            let leftover = chunk.retired_leftover().unwrap();
            assert_eq!((leftover.grant.at, leftover.units), (5_200_000, retired));
        }
        // Another chunk's request, one of a key forgotten and numbered
        // again, or a request alone: the log's chunk takes none of them,
        // since their stamps are not its own; the fixed window's takes what
        // its window counted.
        let mut chunk = Chunk::default();
        filled(&mut chunk, &log, 5_200_000, 0);
        let mut stale = chunk.take(1, 10_000).unwrap();
        stale.at_micros -= 150_000;
        assert!(!chunk.settle(&log, &stale, 4, 1, 20_000));
        let mut alone = stale;
        alone.chunk = 0;
        alone.at_micros = 5_210_000;
        assert!(!chunk.settle(&log, &alone, 4, 1, 20_000));
        let mut chunk = Chunk::default();
        filled(&mut chunk, &fixed, 5_200_000, 0);
        assert!(chunk.settle(&fixed, &alone, 4, 1, 20_000));
        alone.at_micros = 4_990_000;
        assert!(
            !chunk.settle(&fixed, &alone, 4, 1, 20_000),
            "another window"
        );
    }

    #[test]
    fn a_chunk_is_the_demand_capped_by_a_share_of_what_remains() {
        // 4 instances, 10,000 left: at most an eighth each.
        assert_eq!(chunk_size(300, 1, 10_000, 4), 300);
        assert_eq!(chunk_size(5_000, 1, 10_000, 4), 1_250);
        // Near the limit, no more than the request.
        assert_eq!(chunk_size(5_000, 1, 7, 4), 1);
        assert_eq!(chunk_size(5_000, 3, 7, 4), 3);
        assert_eq!(chunk_size(0, 1, 10_000, 0), 1);
    }
}
