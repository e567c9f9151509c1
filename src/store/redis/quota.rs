//! Local quota: a key's quota taken from Redis in chunks, one script call
//! a chunk, and spent in the instance until the chunk runs out or its
//! lifetime is over (see [`RedisStore::with_local_quota`]). This file is
//! the book of one store's chunks: when to ask for one, how big, and when
//! to give units back; `quota_chunk` is one key's chunk.
//!
//! A chunk is a request of its size, judged and recorded by the
//! algorithm's script at the instant Redis runs it, and spent only while
//! what Redis recorded covers it: inside the windows it was counted in, or
//! within the hold the bucket charged and the log widens by. Units not
//! spent go back by a settling of the grant. docs/design.md ("Local
//! quota") proves the limits hold on the times requests are admitted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use foldhash::quality::RandomState;
use parking_lot::Mutex;
use tokio::sync::MutexGuard;

use super::call::RedisBinding;
use super::client::Orphaned;
use super::quota_chunk::{chunk_size, held, lifetime, Chunk, Leftover};
use super::scripts::Ask;
use super::RedisStore;
use crate::algorithm::{Algorithm, Decision, Origin};
use crate::clock::micros;
use crate::policy::Policy;
use crate::store::StoreError;

/// The chunks one store (and its clones) holds, by Redis key name.
pub(super) struct QuotaBook {
    /// How much of a key's local demand a chunk is sized for, in µs; also
    /// how often chunks nobody spends are given back.
    horizon: u64,
    keys: Mutex<HashMap<Box<str>, Arc<KeyQuota>, RandomState>>,
    /// The store chunks are taken from and given back to, without a book.
    store: RedisStore,
    /// Whether the sweep runs: it starts with the book in a tokio
    /// runtime, else at the first chunk spent, and again after the runtime
    /// it ran on shut down.
    sweeping: AtomicBool,
}

/// One key's chunk and its recent local demand.
struct KeyQuota {
    binding: RedisBinding,
    /// Units asked for since the chunk's demand period began.
    asked: AtomicU64,
    /// Units of the requests waiting for the chunk.
    waiting: AtomicU64,
    /// Held while a grant is in flight, so that one call serves every
    /// request of the key that arrives meanwhile.
    chunk: tokio::sync::Mutex<Chunk>,
}

impl QuotaBook {
    /// Whether requests under `policy` are judged from chunks: any with
    /// no penalty (a refused chunk must start none) and no in-flight cap
    /// (each request's slot is its own). Any other policy is judged by
    /// Redis one request at a time.
    pub(super) fn spends(&self, policy: &Policy) -> bool {
        policy.penalty_micros() == 0 && policy.in_flight().is_none()
    }

    /// The hold a bucket's or a log's chunks are spent over (µs), part of
    /// its keys' names, so that every store on a key judges by the same
    /// (the log widens every window by it, the bucket charges chunks up to
    /// it): stores with another horizon, or none, keep keys of their own.
    /// 0 for any other policy.
    pub(super) fn hold(&self, policy: &Policy) -> u64 {
        if held(policy) && self.spends(policy) {
            self.horizon
        } else {
            0
        }
    }

    /// Whether Redis may take back the units `admitted`, a request under
    /// `policy` settled outside its chunk, did not use: not the bucket's
    /// (see [`give_back`](Self::give_back)), nor a log chunk's, whose
    /// stamps are at the grant's time, which the decision does not carry.
    pub(super) fn gives_back(&self, policy: &Policy, admitted: &Decision) -> bool {
        match policy.algorithm() {
            Algorithm::TokenBucket => !self.spends(policy),
            Algorithm::SlidingLog => admitted.chunk == 0,
            _ => true,
        }
    }

    /// A book for `store` (which must hold none), sized for `horizon`,
    /// with its sweep started on the tokio runtime, if there is one.
    pub(super) fn start(store: RedisStore, horizon: Duration) -> Arc<Self> {
        let book = Arc::new(Self {
            horizon: micros(horizon).max(1),
            keys: Mutex::default(),
            store,
            sweeping: AtomicBool::new(false),
        });
        book.sweep_from_now();
        book
    }

    fn sweep_from_now(self: &Arc<Self>) {
        if self.sweeping.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            let sweep = Sweep(Arc::downgrade(self));
            runtime.spawn(sweep.until_dropped(Duration::from_micros(self.horizon)));
        }
    }

    fn key(&self, name: &str, binding: &RedisBinding) -> Arc<KeyQuota> {
        let mut keys = self.keys.lock();
        if let Some(key) = keys.get(name) {
            return Arc::clone(key);
        }
        let key = Arc::new(KeyQuota {
            binding: binding.clone(),
            asked: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            chunk: tokio::sync::Mutex::default(),
        });
        keys.insert(Box::from(name), Arc::clone(&key));
        key
    }

    /// The decision on a request of `cost` units for the Redis key `name`
    /// under `binding`'s policy, one the book [`spends`](Self::spends)
    /// quota for: from the key's chunk, from a new chunk, or judged by
    /// Redis alone when a chunk would hold no more than the request.
    pub(super) async fn spend(
        self: Arc<Self>,
        name: String,
        binding: RedisBinding,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        self.sweep_from_now();
        let store = &self.store;
        let key = self.key(&name, &binding);
        key.asked.fetch_add(u64::from(cost), Ordering::Relaxed);
        let waiting = Waiting::add(&key.waiting, cost);
        let mut chunk = key.chunk.lock().await;
        drop(waiting);
        let now = store.guard.now();
        chunk.asked_at = now;
        if let Some(decision) = chunk.take(cost, now) {
            return Ok(decision);
        }
        if let Some(refusal) = chunk.refusal(cost, now, self.horizon) {
            return Ok(refusal);
        }
        let policy = binding.policy();
        let tightest = policy.limits().iter().map(|limit| limit.max()).min();
        let remaining = chunk.remaining.or(tightest).unwrap_or(0);
        let demand = key.demand(&mut chunk, now, self.horizon);
        let size = chunk_size(demand, cost, remaining, store.live_instances());
        let failed_lately = chunk
            .failed
            .is_some_and(|failed| now < failed + micros(store.settings.timeout));
        if failed_lately {
            // Each request alone, at once, as without local quota.
            drop(chunk);
            return store.call_named(name, &binding, Ask::Record(cost)).await;
        }
        if size <= cost {
            return self.alone(&key, chunk, name, &binding, cost, now).await;
        }
        self.grant(chunk, name, &binding, cost, size).await
    }

    /// Near the limit: Redis judges the request alone, asked at `now`. One
    /// at a time for the key, holding `chunk`, so that a refusal answers
    /// the requests that waited with no call of their own; but at once, as
    /// without local quota, once a refusal has waited less than a horizon:
    /// quota then comes back sooner than calls one by one would find.
    async fn alone(
        &self,
        key: &KeyQuota,
        chunk: MutexGuard<'_, Chunk>,
        name: String,
        binding: &RedisBinding,
        cost: u32,
        now: u64,
    ) -> Result<Decision, StoreError> {
        let one_at_a_time = chunk
            .refused
            .is_none_or(|(refusal, ..)| refusal.retry_after_micros >= self.horizon);
        let held_chunk = if one_at_a_time {
            Some(chunk)
        } else {
            drop(chunk);
            None
        };
        let ask = Ask::Record(cost);
        let store = self.store.clone();
        let decision = store.ask_redis(name, binding.clone(), ask, now).await;
        let mut chunk = match held_chunk {
            Some(chunk) => chunk,
            None => key.chunk.lock().await,
        };
        match &decision {
            Ok(decision) if decision.origin() == Origin::Limits => {
                chunk.remaining = Some(decision.remaining());
                chunk.refused = (!decision.is_allowed()).then_some((*decision, cost, now));
            }
            _ => chunk.failed = Some(self.store.guard.now()),
        }
        decision
    }

    /// A new chunk of `size` units in place of `chunk`'s, and from it the
    /// decision on a request of `cost`; Redis judges the request alone if
    /// it refuses the chunk, and the failure policy answers if it fails.
    async fn grant(
        self: &Arc<Self>,
        mut chunk: MutexGuard<'_, Chunk>,
        name: String,
        binding: &RedisBinding,
        cost: u32,
        size: u32,
    ) -> Result<Decision, StoreError> {
        let (store, policy) = (&self.store, binding.policy());
        if let Some(leftover) = chunk.retire() {
            self.give_back(name.clone(), binding, leftover);
        }
        let sent = store.guard.now();
        let ask = match held(policy) {
            true => Ask::Chunk {
                cost: size,
                hold: self.horizon,
            },
            false => Ask::Record(size),
        };
        let late = self.late_grant(&name, binding, size);
        match store.judge(&name, binding, ask, Some(late)).await {
            Ok(grant) if grant.is_allowed() => {
                store.guard.outage_ended(store.client.outage.ended());
                let lifetime = lifetime(policy, grant.at_micros, self.horizon);
                chunk.fill(grant, size, sent, lifetime);
                if let Some(decision) = chunk.take(cost, store.guard.now()) {
                    return Ok(decision);
                }
                // The reply came after the window it was counted in ended:
                // the sweep gives the chunk back, and Redis judges the request.
                drop(chunk);
                store.call_named(name, binding, Ask::Record(cost)).await
            }
            Ok(refused) => {
                chunk.remaining = Some(refused.remaining());
                drop(chunk);
                store.call_named(name, binding, Ask::Record(cost)).await
            }
            Err(err) => {
                chunk.failed = Some(store.guard.now());
                drop(chunk);
                let (live, outage) = (store.live_instances(), store.client.outage.ended());
                let ask = Ask::Record(cost);
                store.guard.on_failure(name, policy, ask, err, live, outage)
            }
        }
    }

    /// Settles, within the chunk that admitted it, a request of `cost`
    /// units for the key `name` that used `used`, if that chunk is still
    /// being spent: no call to Redis, whose count already holds the whole
    /// chunk. `false` if Redis must settle it.
    pub(super) async fn settles(
        &self,
        name: &str,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> bool {
        let Some(key) = self.keys.lock().get(name).map(Arc::clone) else {
            return false;
        };
        let mut chunk = key.chunk.lock().await;
        let now = self.store.guard.now();
        chunk.settle(key.binding.policy(), admitted, cost, used, now)
    }

    /// What to do with a grant of `size` units Redis replies to after
    /// nobody waits for it (its call timed out, or its request was
    /// dropped): nothing was spent from it, so all of it goes back.
    fn late_grant(
        self: &Arc<Self>,
        name: &str,
        binding: &RedisBinding,
        size: u32,
    ) -> Orphaned<Vec<i64>> {
        let (book, name, binding) = (Arc::clone(self), name.to_owned(), binding.clone());
        Box::new(move |reply| {
            let granted_at = match reply.as_deref() {
                Ok([1, at, ..]) => u64::try_from(*at).ok(),
                _ => None,
            };
            if let Some(at) = granted_at {
                book.give_back(name, &binding, Leftover::unspent(at, size));
            }
        })
    }

    /// Gives `leftover` back to the window it was counted in, in the
    /// background: a settling of the grant it came from. The bucket's are
    /// not: a later chunk may have been charged from the end of its own
    /// hold, past the arrival time this one left, and time taken off
    /// would undercharge it. They refill as spent tokens do.
    fn give_back(&self, name: String, binding: &RedisBinding, leftover: Leftover) {
        if binding.policy().algorithm() == Algorithm::TokenBucket {
            return;
        }
        let ask = Ask::Settle {
            at: leftover.grant.at,
            cost: leftover.grant.size,
            units: -i64::from(leftover.units),
        };
        let settled = self.store.settle_named(name, binding, ask);
        crate::store::send_now(async move {
            if let Err(err) = settled.await {
                crate::observe::quota_not_returned(&err);
            }
        });
    }

    /// Gives back what retired chunks gathered, the chunks of keys not
    /// asked for in a horizon and those whose window ends within one, and
    /// forgets keys idle for ten with nothing held. A chunk in use is left
    /// for the next sweep.
    fn sweep(&self) {
        let now = self.store.guard.now();
        let mut going_back = Vec::new();
        self.keys.lock().retain(|name, key| {
            let Ok(mut chunk) = key.chunk.try_lock() else {
                return true;
            };
            let idle = now.saturating_sub(chunk.asked_at);
            let ending = chunk.ending(key.binding.policy(), now, self.horizon);
            let leftover = (idle >= self.horizon || ending)
                .then(|| chunk.leftover())
                .flatten();
            for leftover in [chunk.retired_leftover(), leftover].into_iter().flatten() {
                going_back.push((name.to_string(), key.binding.clone(), leftover));
            }
            // A key a request is about to spend from stays.
            chunk.units > 0 || idle < 10 * self.horizon || Arc::strong_count(key) > 1
        });
        // Sent once no request waits for the map.
        for (name, binding, leftover) in going_back {
            self.give_back(name, &binding, leftover);
        }
    }
}

impl KeyQuota {
    /// The key's recent local demand (see [`Chunk::demand`]).
    fn demand(&self, chunk: &mut Chunk, now: u64, horizon: u64) -> u64 {
        chunk.demand(
            &self.asked,
            self.waiting.load(Ordering::Relaxed),
            now,
            horizon,
        )
    }
}

/// Every unspent unit goes back when the store and its clones are gone.
impl Drop for QuotaBook {
    fn drop(&mut self) {
        for (name, key) in std::mem::take(self.keys.get_mut()) {
            if let Ok(mut chunk) = key.chunk.try_lock() {
                let leftovers = [chunk.leftover(), chunk.retired_leftover()];
                for leftover in leftovers.into_iter().flatten() {
                    self.give_back(name.to_string(), &key.binding, leftover);
                }
            }
        }
    }
}

/// The sweep's task, for as long as its book lives: when the runtime it
/// runs on shuts down, the book's next chunk starts another.
struct Sweep(Weak<QuotaBook>);

impl Sweep {
    async fn until_dropped(self, period: Duration) {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(book) = self.0.upgrade() else { return };
            book.sweep();
        }
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        if let Some(book) = self.0.upgrade() {
            book.sweeping.store(false, Ordering::Relaxed);
        }
    }
}

/// Units of a request waiting for its key's chunk, counted as the key's
/// demand until it has the chunk or is dropped.
struct Waiting<'a>(&'a AtomicU64, u64);

impl<'a> Waiting<'a> {
    fn add(waiting: &'a AtomicU64, cost: u32) -> Self {
        waiting.fetch_add(u64::from(cost), Ordering::Relaxed);
        Self(waiting, u64::from(cost))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::Relaxed);
    }
}
