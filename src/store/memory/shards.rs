//! A sharded map from (policy, key) to the key's state, with idle eviction
//! under the store's cap on live keys.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use foldhash::quality::RandomState;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::cap::KeyCap;
use super::layouts::EntryState;
use super::packed::ANCHOR_REACH_MICROS;
use crate::algorithm::{Decision, One, Origin, Settlement, Units};
use crate::policy::Policy;

/// How often (in microseconds of store time) a shard in use looks for idle keys.
const SWEEP_EVERY_MICROS: u64 = 5_000_000;

/// How long a key is kept once it has gone idle. A clock read a little
/// behind another (a settle or a peek reads it before taking the lock, or
/// the clock stepped back) may still judge a request inside the key's last
/// window; dropping the key at once would give that request a fresh window.
const IDLE_GRACE_MICROS: u64 = 5_000_000;

/// The hash an entry is found by: its key's, mixed with its policy value's.
#[inline(always)]
fn entry_hash<K: Hash>(hasher: &RandomState, key: &K, policy: &Policy) -> u64 {
    hasher.hash_one(key) ^ policy.value_hash()
}

/// When a state idle from `idle_from` may be dropped: never for one idle only
/// at the end of the clock's range (a time past it saturates to the end).
fn droppable_from(idle_from: u64) -> u64 {
    idle_from.saturating_add(IDLE_GRACE_MICROS)
}

/// One key's state under one policy. The policy is the entry's own, so
/// that tenants with limits of their own share a map; it is also how a
/// sweep knows when the state goes idle.
struct Entry<K, S> {
    key: K,
    policy: Policy,
    state: S,
}

impl<K: Eq, S> Entry<K, S> {
    /// Whether this is `key`'s entry under `policy`: the policy known by
    /// its address first, as a bound one is, else by its value.
    #[inline(always)]
    fn is(&self, key: &K, policy: &Policy) -> bool {
        self.key == *key && (self.policy.is(policy) || self.policy == *policy)
    }
}

struct Shard<K, S> {
    table: HashTable<Entry<K, S>>,
    /// The policy of the key added last, whose value a new key under an
    /// equal policy shares: a plan that builds its policy on every request
    /// then costs one copy of it, not one per key.
    last_policy: Option<Policy>,
    /// When the shard next looks for idle keys, and the anchor its states
    /// are read against.
    due: Due,
}

/// When a shard must be readied before it judges.
#[derive(Clone, Copy)]
struct Due {
    next_sweep: u64,
    /// The time packed states are read against: a decision further from it
    /// than their reach moves it first. A new shard's holds no state yet.
    anchor: u64,
}

impl Due {
    /// Whether a shard of states `S` must be readied to judge at `now`.
    #[inline(always)]
    fn at<S: EntryState>(&self, now: u64) -> bool {
        now >= self.next_sweep || (S::ANCHORED && !self.reaches(now))
    }

    fn reaches(&self, now: u64) -> bool {
        now.abs_diff(self.anchor) <= ANCHOR_REACH_MICROS
    }
}

impl<K, S: EntryState> Shard<K, S> {
    /// Readies the shard to judge at `now`: an anchor that reaches it, and
    /// idle entries gone if a sweep is due.
    fn prepare(&mut self, now: u64, cap: &KeyCap) {
        if S::ANCHORED && !self.due.reaches(now) {
            self.move_anchor(now, cap);
        }
        if now >= self.due.next_sweep {
            self.sweep(now, cap);
        }
    }

    /// Rare: on first use, and when the clock has moved a few minutes away.
    #[cold]
    fn move_anchor(&mut self, now: u64, cap: &KeyCap) {
        let from = self.due.anchor;
        let before = self.table.len();
        self.table
            .retain(|entry| entry.state.rebase(from, now, &entry.policy));
        cap.release(before - self.table.len());
        self.due.anchor = now;
    }

    /// Drops entries idle for the grace period, lets the others give back
    /// memory they no longer need, and tells the cap when the earliest
    /// remaining one may be dropped. Out of line: it runs every few
    /// seconds, and its loop has no place in a decision's code.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self, now: u64, cap: &KeyCap) {
        let (anchor, before) = (self.due.anchor, self.table.len());
        let mut earliest = u64::MAX;
        self.table.retain(|entry| {
            let drop_from = droppable_from(entry.state.idle_from(&entry.policy, anchor));
            let kept = drop_from > now || drop_from == u64::MAX;
            if kept {
                earliest = earliest.min(drop_from);
                entry.state.shed(&entry.policy);
            }
            kept
        });
        cap.release(before - self.table.len());
        cap.swept(earliest);
        self.due.next_sweep = now.saturating_add(SWEEP_EVERY_MICROS);
    }
}

/// Cache-line alignment keeps two shards' locks from sharing a line, so
/// threads working on different shards do not slow each other down.
#[repr(align(64))]
struct Padded<T>(T);

type LockedShard<K, S> = Padded<Mutex<Shard<K, S>>>;

/// Every key's state whose algorithm's state is `S`, under any policy.
pub(super) struct Shards<K, S> {
    shards: Box<[LockedShard<K, S>]>,
    hasher: RandomState,
    cap: Arc<KeyCap>,
}

impl<K: Hash + Eq, S: EntryState> Shards<K, S> {
    /// Enough shards for the cap's keys (at most 64).
    pub(super) fn new(cap: Arc<KeyCap>) -> Self {
        let count = (cap.max() / 16).clamp(1, 64).next_power_of_two();
        let shards = (0..count)
            .map(|_| {
                Padded(Mutex::new(Shard {
                    table: HashTable::new(),
                    last_policy: None,
                    due: Due {
                        next_sweep: SWEEP_EVERY_MICROS,
                        anchor: u64::MAX,
                    },
                }))
            })
            .collect();
        Self {
            shards,
            hasher: RandomState::default(),
            cap,
        }
    }

    /// Judges and records a request of `cost` units for `key` under
    /// `policy` at the time `clock` gives: from 1 to every limit's `max`
    /// (see [`unjudged_cost`](Self::unjudged_cost) for the others). A new
    /// key that finds the store full goes, with the time, to `full`, once
    /// the shard is unlocked, so that it may make room and judge it again.
    ///
    /// The clock is read under the shard's lock, once the key's entry is
    /// found: decisions on one key are then judged in the order they are
    /// made, whatever the threads, and the entry's memory is on its way
    /// before the clock is read rather than after (which the store bench's
    /// rows over 100k keys measure).
    pub(super) fn decide(
        &self,
        key: K,
        policy: &Policy,
        clock: impl FnOnce() -> u64,
        cost: impl Units,
        full: impl FnOnce(K, u64) -> Decision,
    ) -> Decision {
        let hash = self.hash(&key, policy);
        let mut guard = self.shard(hash).lock();
        let shard = &mut *guard;
        let mut found = shard.table.find_mut(hash, |e| e.is(&key, policy));
        let now = clock();
        if shard.due.at::<S>(now) {
            shard.prepare(now, &self.cap);
            found = shard.table.find_mut(hash, |e| e.is(&key, policy));
        }
        if let Some(entry) = found {
            return entry.state.decide(now, cost, policy, shard.due.anchor);
        }
        let mut state = S::default();
        let decision = state.decide(now, cost, policy, shard.due.anchor);
        match self.insert(shard, hash, key, policy, state) {
            Ok(()) => decision,
            Err(key) => {
                drop(guard);
                full(key, now)
            }
        }
    }

    /// `key`'s hash under `policy`.
    #[inline(always)]
    fn hash(&self, key: &K, policy: &Policy) -> u64 {
        entry_hash(&self.hasher, key, policy)
    }

    /// `key`'s hash and its shard, locked and readied for `now`.
    fn shard_for(&self, key: &K, policy: &Policy, now: u64) -> (u64, MutexGuard<'_, Shard<K, S>>) {
        let hash = self.hash(key, policy);
        let mut shard = self.shard(hash).lock();
        if shard.due.at::<S>(now) {
            shard.prepare(now, &self.cap);
        }
        (hash, shard)
    }

    /// The shard a key of this hash lives in.
    ///
    /// Its lock spins briefly before it parks: under contention on one hot
    /// key a decision is over before a parked thread would wake. It does
    /// not poison, which is sound here: a panic while holding it cannot
    /// leave a shard half-updated (every update is a plain store).
    #[inline(always)]
    fn shard(&self, hash: u64) -> &Mutex<Shard<K, S>> {
        // The middle bits pick the shard: the table itself uses the low bits
        // for buckets and the top seven as tags.
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)].0
    }

    /// Adds a new key's state to its shard if the store has room for it,
    /// else gives the key back.
    fn insert(
        &self,
        shard: &mut Shard<K, S>,
        hash: u64,
        key: K,
        policy: &Policy,
        state: S,
    ) -> Result<(), K> {
        let drop_from = droppable_from(state.idle_from(policy, shard.due.anchor));
        if !self.cap.take(drop_from) {
            return Err(key);
        }
        let policy = match &shard.last_policy {
            Some(last) if last == policy => last.clone(),
            _ => shard.last_policy.insert(policy.clone()).clone(),
        };
        let entry = Entry { key, policy, state };
        let hasher = &self.hasher;
        shard.table.insert_unique(hash, entry, |entry| {
            entry_hash(hasher, &entry.key, &entry.policy)
        });
        Ok(())
    }

    /// Settles a request for `key` that the map counted. A key no longer
    /// held (idle past its windows) has nothing to give back, but is
    /// charged an excess afresh, as a new key would be, if there is room.
    pub(super) fn settle(&self, key: K, policy: &Policy, settled: &Settlement) {
        let (hash, mut guard) = self.shard_for(&key, policy, settled.now);
        let shard = &mut *guard;
        let found = shard.table.find_mut(hash, |e| e.is(&key, policy));
        if let Some(entry) = found {
            entry.state.settle(settled, policy, shard.due.anchor);
            return;
        }
        if settled.used > settled.cost {
            let mut state = S::default();
            state.settle(settled, policy, shard.due.anchor);
            // A store with no room keeps no excess either.
            let _ = self.insert(shard, hash, key, policy, state);
        }
    }

    /// Judges as [`decide`](Self::decide) would, on a copy: nothing is
    /// recorded and no key is added.
    ///
    /// A new key at a full store is refused as `decide` would refuse it: a
    /// key the store could not record must not pass unlimited.
    pub(super) fn peek(&self, key: &K, policy: &Policy, now: u64) -> Decision {
        let (hash, shard) = self.shard_for(key, policy, now);
        let anchor = shard.due.anchor;
        let found = shard.table.find(hash, |e| e.is(key, policy));
        let mut state = match found {
            Some(entry) => entry.state.clone(),
            None if self.cap.is_full() => return self.no_room(policy, now),
            None => S::default(),
        };
        drop(shard);
        state.decide(now, One, policy, anchor)
    }

    /// A request of no cost, which passes and records nothing, or of more
    /// than a limit holds, which never passes.
    #[cold]
    pub(super) fn unjudged_cost(&self, key: &K, policy: &Policy, now: u64, cost: u32) -> Decision {
        if cost == 0 {
            self.peek(key, policy, now).costing_nothing()
        } else {
            Decision::too_costly(policy.limits(), cost, now)
        }
    }

    /// The refusal of a new key when the store is full of live keys.
    ///
    /// Live keys are never dropped to make room: that would hand their
    /// owners a fresh window. A new key waits until one may be dropped.
    pub(super) fn no_room(&self, policy: &Policy, now: u64) -> Decision {
        let wait = self.cap.wait(now);
        Decision::substitute(false, policy.limits()[0], wait, now, Origin::StoreFull)
    }

    /// Drops every key idle at `now`, as each shard's own sweep would.
    pub(super) fn sweep_all(&self, now: u64) {
        for shard in self.shards.iter() {
            shard.0.lock().sweep(now, &self.cap);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.0.lock().table.len())
            .sum()
    }
}
