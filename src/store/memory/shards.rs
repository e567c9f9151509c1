//! A sharded map from key to key state for one policy, with idle eviction
//! and a cap on the number of keys.

use parking_lot::{Mutex, MutexGuard};
use std::hash::{BuildHasher, Hash};

use foldhash::quality::RandomState;
use hashbrown::HashTable;

use super::layouts::{Base, EntryState, Shape};
use crate::algorithm::{Decision, Origin, Settlement};
use crate::algorithm::{One, Units};

/// How often (in microseconds of store time) a shard in use looks for idle keys.
const SWEEP_EVERY_MICROS: u64 = 5_000_000;

/// How long a key is kept once it has gone idle. A clock read a little
/// behind another (a settle or a peek reads it before taking the lock, or
/// the clock stepped back) may still judge a request inside the key's last
/// window; dropping the key at once would give that request a fresh window.
const IDLE_GRACE_MICROS: u64 = 5_000_000;

/// When a state idle from `idle_from` may be dropped: never for one idle only
/// at the end of the clock's range (a time past it saturates to the end).
fn droppable_from(idle_from: u64) -> u64 {
    idle_from.saturating_add(IDLE_GRACE_MICROS)
}

/// The least time between two sweeps of a full shard: entries that go idle
/// one by one (the log's) must not make every new key scan the shard.
const FULL_SWEEP_GAP_MICROS: u64 = 100_000;

/// One key's state. Nothing else: the map belongs to one policy, and when
/// the state goes idle is worked out at sweeps from the policy's limits
/// rather than kept. Sweeps are rare, and every byte less per key keeps
/// more keys in cache.
struct Entry<K, S: EntryState> {
    state: S,
    key: K,
    /// No bytes; the alignment the state asks for.
    _align: S::EntryAlign,
}

struct Shard<K, S: EntryState> {
    table: HashTable<Entry<K, S>>,
    next_sweep: u64,
    /// No entry may be dropped before this time (a lower bound: entries
    /// only ever push their own idle time later), so a full shard need not
    /// be swept again until then.
    earliest_drop: u64,
    /// A full shard is not swept again before this time.
    next_full_sweep: u64,
    /// What the states here are stored relative to.
    base: S::Base,
}

impl<K, S: EntryState> Shard<K, S> {
    /// Drops entries idle for the grace period, lets the others give back
    /// memory they no longer need, and notes when the earliest remaining one
    /// may be dropped.
    ///
    /// Out of line: it runs every few seconds, and inlined, its loop (and
    /// a log's shedding) sat in the middle of every decision's code.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self, now: u64, shape: &Shape) {
        let mut earliest = u64::MAX;
        self.table.retain(|entry| {
            let drop_from = droppable_from(entry.state.idle_from(shape, &self.base));
            let kept = drop_from > now || drop_from == u64::MAX;
            if kept {
                earliest = earliest.min(drop_from);
                entry.state.shed(shape);
            }
            kept
        });
        self.next_sweep = now.saturating_add(SWEEP_EVERY_MICROS);
        self.earliest_drop = earliest;
    }

    /// Readies the shard to judge at `now`: a base that covers it, and idle
    /// entries gone if a sweep is due.
    fn prepare(&mut self, now: u64, shape: &Shape) {
        if now >= self.next_sweep {
            self.sweep(now, shape);
        }
        if !self.base.covers(now) {
            // Rare: on first use, and when the clock has moved about 2³¹
            // windows from the last base.
            let from = self.base;
            let to = S::base_around(now, shape);
            self.table
                .retain(|entry| entry.state.rebase(&from, &to, shape));
            self.base = to;
        }
    }
}

/// Cache-line alignment keeps two shards' locks from sharing a line, so
/// threads working on different shards do not slow each other down.
#[repr(align(64))]
struct Padded<T>(T);

type LockedShard<K, S> = Padded<Mutex<Shard<K, S>>>;

/// Every key's state under one policy, whose algorithm's state is `S`.
pub(super) struct Shards<K, S: EntryState> {
    /// What the states are judged under: one policy's limits.
    shape: Shape,
    shards: Box<[LockedShard<K, S>]>,
    hasher: RandomState,
    keys_per_shard: usize,
}

impl<K: Hash + Eq, S: EntryState> Shards<K, S> {
    /// Enough shards for `max_keys` (at most 64), each holding its share.
    pub(super) fn new(shape: Shape, max_keys: usize) -> Self {
        let count = (max_keys / 16).clamp(1, 64).next_power_of_two().min(64);
        let shards = (0..count)
            .map(|_| {
                Padded(Mutex::new(Shard {
                    table: HashTable::new(),
                    next_sweep: SWEEP_EVERY_MICROS,
                    earliest_drop: u64::MAX,
                    next_full_sweep: 0,
                    base: S::Base::default(),
                }))
            })
            .collect();
        Self {
            shape,
            shards,
            hasher: RandomState::default(),
            // Rounded down, so that all shards together never exceed the cap.
            keys_per_shard: (max_keys / count).max(1),
        }
    }

    /// Judges and records a request of `cost` units for `key` at the time
    /// `clock` gives: from 1 to every limit's `max` (see
    /// [`unjudged_cost`](Self::unjudged_cost) for the others).
    ///
    /// The clock is read under the shard's lock, once the key's entry is
    /// found: decisions on one key are then judged in the order they are
    /// made, whatever the threads, and the entry's memory is on its way
    /// before the clock is read rather than after (which the store bench's
    /// log rows over 100k keys measure).
    pub(super) fn decide(&self, key: K, clock: impl FnOnce() -> u64, cost: impl Units) -> Decision {
        let shape = &self.shape;
        let hash = self.hasher.hash_one(&key);
        let mut guard = self.shard(hash).lock();
        let shard = &mut *guard;
        let mut found = shard.table.find_mut(hash, |entry| entry.key == key);
        let now = clock();
        if now >= shard.next_sweep || !shard.base.covers(now) {
            shard.prepare(now, shape);
            found = shard.table.find_mut(hash, |entry| entry.key == key);
        }
        if let Some(entry) = found {
            return entry.state.decide(now, cost, shape, &shard.base);
        }
        if let Some(refusal) = self.no_room(shard, shape, now) {
            return refusal;
        }
        let mut state = S::default();
        let decision = state.decide(now, cost, shape, &shard.base);
        self.insert(shard, hash, key, state);
        decision
    }

    /// `key`'s hash and its shard, locked and readied for `now`.
    #[inline(always)]
    fn shard_for(&self, key: &K, now: u64) -> (u64, MutexGuard<'_, Shard<K, S>>) {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash).lock();
        shard.prepare(now, &self.shape);
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

    /// Adds a new key's state to its shard.
    fn insert(&self, shard: &mut Shard<K, S>, hash: u64, key: K, state: S) {
        let drop_from = droppable_from(state.idle_from(&self.shape, &shard.base));
        shard.earliest_drop = shard.earliest_drop.min(drop_from);
        let hasher = &self.hasher;
        shard.table.insert_unique(
            hash,
            Entry {
                key,
                state,
                _align: S::EntryAlign::default(),
            },
            |entry| hasher.hash_one(&entry.key),
        );
    }

    /// Settles a request for `key` that the map counted. A key no longer
    /// held (idle past its windows) has nothing to give back, but is
    /// charged an excess afresh, as a new key would be, if there is room.
    pub(super) fn settle(&self, key: K, settled: &Settlement) {
        let shape = &self.shape;
        let (hash, mut guard) = self.shard_for(&key, settled.now);
        let shard = &mut *guard;
        if let Some(entry) = shard.table.find_mut(hash, |entry| entry.key == key) {
            entry.state.settle(settled, shape, &shard.base);
            return;
        }
        if settled.used <= settled.cost || self.no_room(shard, shape, settled.now).is_some() {
            return;
        }
        let mut state = S::default();
        state.settle(settled, shape, &shard.base);
        self.insert(shard, hash, key, state);
    }

    /// Judges as [`decide`](Self::decide) would, on a copy: nothing is
    /// recorded and no key is added.
    ///
    /// A new key at a full shard is refused as `decide` would refuse it: a
    /// key the store could not record must not pass unlimited.
    pub(super) fn peek(&self, key: &K, now: u64) -> Decision {
        let shape = &self.shape;
        let (hash, mut shard) = self.shard_for(key, now);
        let base = shard.base;
        let found = shard
            .table
            .find(hash, |entry| entry.key == *key)
            .map(|entry| entry.state.clone());
        let mut state = match found {
            Some(state) => state,
            None => {
                if let Some(refusal) = self.no_room(&mut shard, shape, now) {
                    return refusal;
                }
                S::default()
            }
        };
        drop(shard);
        state.decide(now, One, shape, &base)
    }

    /// Whether a request of `cost` units is one [`decide`](Self::decide) judges.
    pub(super) fn judges_cost(&self, cost: u32) -> bool {
        self.shape.judges_cost(cost)
    }

    /// A request of no cost, which passes and records nothing, or of more
    /// than a limit holds, which never passes.
    #[cold]
    pub(super) fn unjudged_cost(&self, key: &K, now: u64, cost: u32) -> Decision {
        if cost == 0 {
            self.peek(key, now).costing_nothing()
        } else {
            Decision::too_costly(self.shape.limits(), cost, now)
        }
    }

    /// The refusal for a new key when the shard is full of live keys.
    ///
    /// Live keys are never dropped to make room: that would hand their owners
    /// a fresh window. A new key waits until one may be dropped; a sweep runs
    /// only once one may, and at most every 100 ms, so a flood costs O(1) a key.
    fn no_room(&self, shard: &mut Shard<K, S>, shape: &Shape, now: u64) -> Option<Decision> {
        if shard.table.len() < self.keys_per_shard {
            return None;
        }
        if now >= shard.earliest_drop && now >= shard.next_full_sweep {
            shard.sweep(now, shape);
            shard.next_full_sweep = now.saturating_add(FULL_SWEEP_GAP_MICROS);
        }
        if shard.table.len() < self.keys_per_shard {
            return None;
        }
        let room_at = shard.earliest_drop.max(shard.next_full_sweep);
        let wait = room_at.saturating_sub(now).max(1);
        Some(Decision::substitute(
            false,
            shape.limits()[0],
            wait,
            now,
            Origin::StoreFull,
        ))
    }

    /// Drops every key idle at `now`, as each shard's own sweep would, and
    /// tells whether any is left.
    pub(super) fn sweep_all(&self, now: u64) -> bool {
        let mut left = false;
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            shard.sweep(now, &self.shape);
            left |= !shard.table.is_empty();
        }
        left
    }

    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.0.lock().table.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::super::compact_log::{CompactLog, FEW_BESIDE_LARGER_KEYS, FEW_BESIDE_SMALL_KEYS};
    use super::Entry;

    /// A log's entry never straddles two cache lines: half a line with a
    /// small key, a whole one with a key of up to 24 bytes.
    #[test]
    fn a_log_entry_fills_half_a_line_or_a_whole_one() {
        type Small = CompactLog<FEW_BESIDE_SMALL_KEYS>;
        type Larger = CompactLog<FEW_BESIDE_LARGER_KEYS>;
        assert_eq!(size_of::<Entry<u64, Small>>(), 32);
        assert_eq!(align_of::<Entry<u64, Small>>(), 32);
        assert_eq!(size_of::<Entry<IpAddr, Larger>>(), 64);
        assert_eq!(size_of::<Entry<String, Larger>>(), 64);
        assert_eq!(align_of::<Entry<String, Larger>>(), 64);
    }
}
