//! The fleet: the instances sharing a prefix. Each instance (a store and
//! its clones) keeps an entry in the sorted set `prefix:instances`, scored
//! by when it expires on Redis `TIME`, and refreshes it once per heartbeat
//! from a background task, which learns how many entries are live from the
//! same call. That task is also the outage's probe: a heartbeat or `PING`
//! that succeeds brings a node back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use tokio::sync::oneshot;

use super::client::{said_by_server, within, Client, Watch};
use super::failure::LocalClock;
use super::outage::{whole, Node, Outage};
use super::scripts;
use super::slots::{self, Slots};
use super::{error, ClientClock, RedisStore};
use crate::store::{MemoryBinding, MemoryStore, StoreError, StoreErrorKind};

/// What a store and its clones share while they run: the fleet as last
/// seen, and the outage.
pub(super) struct Instance {
    /// Live instances at the last heartbeat, this one included; 0 before.
    live: AtomicUsize,
    /// Heartbeats that counted the fleet so far.
    counts: AtomicUsize,
    /// Requests answered by the failure policy since the last summary.
    pub(super) failed: AtomicU64,
    /// Whether a heartbeat runs: read by every call, which takes the
    /// lock on `dropped` only to start one.
    joined: AtomicBool,
    /// Resolves once the last clone of the store is dropped: the
    /// heartbeat then takes the entry out and stops.
    dropped: Mutex<Option<oneshot::Receiver<()>>>,
    _alive: oneshot::Sender<()>,
    pub(super) outage: Outage,
    /// A Cluster's slots, as the last heartbeat read them.
    slots: Mutex<Option<Slots>>,
    /// The in-flight slots this instance holds, by lease id, with the key
    /// of their set: what the heartbeat renews.
    pub(super) held: Mutex<HashMap<u64, Arc<str>>>,
    /// The slots fallback stores gave, by lease id, with the store and
    /// share that gave each.
    pub(super) fallback_held: Mutex<HashMap<u64, FallbackSlot>>,
}

/// Where a fallback slot is to be released.
pub(super) type FallbackSlot = (MemoryStore<LocalClock>, MemoryBinding<String>);

impl Instance {
    pub(super) fn new() -> Self {
        let (alive, dropped) = oneshot::channel();
        Self {
            live: AtomicUsize::new(0),
            counts: AtomicUsize::new(0),
            failed: AtomicU64::new(0),
            joined: AtomicBool::new(false),
            dropped: Mutex::new(Some(dropped)),
            _alive: alive,
            outage: Outage::default(),
            slots: Mutex::new(None),
            held: Mutex::default(),
            fallback_held: Mutex::default(),
        }
    }

    /// The live count, or `expected` until the count reaches it or
    /// [`TRUSTED_AFTER`] heartbeats have counted: instances that started
    /// together are seen by each other only as their first beats land.
    pub(super) fn live_or(&self, expected: usize) -> usize {
        let live = self.live.load(Ordering::Relaxed);
        if live >= expected || self.counts.load(Ordering::Relaxed) >= TRUSTED_AFTER {
            live
        } else {
            expected
        }
    }

    fn counted(&self, live: usize) {
        self.live.store(live, Ordering::Relaxed);
        let counts = self.counts.load(Ordering::Relaxed);
        self.counts
            .store(counts.saturating_add(1), Ordering::Relaxed);
    }

    /// The node holding the key `name`.
    pub(super) fn node_of(&self, name: &str) -> Node {
        match &*self.slots.lock() {
            Some(slots) => slots.node(name),
            None => whole(),
        }
    }
}

impl RedisStore {
    /// Starts the heartbeat, unless it runs: when the store is built in a
    /// tokio runtime, else at its first call, in the runtime that makes it
    /// (the builders that change what it beats for make a new instance).
    pub(super) fn join(&self) {
        let instance = &self.instance;
        if instance.joined.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(dropped) = instance.dropped.lock().take() else {
            return;
        };
        instance.joined.store(true, Ordering::Relaxed);
        let running = Running {
            instance: Arc::downgrade(instance),
            dropped: Some(dropped),
        };
        let heart = Heart {
            id: instance_id(),
            client: Arc::clone(&self.client),
            key: self.fleet_key(),
            prefix: Arc::clone(&self.prefix),
            interval: self.heartbeat,
            lease: self.lease,
            clock: self.clock.clone(),
            // A heartbeat is no request: it may wait longer than one.
            timeout: self.timeout.max(self.heartbeat),
        };
        runtime.spawn(heart.beat_until(running));
    }

    /// The sorted set of the prefix's live instances.
    fn fleet_key(&self) -> String {
        format!("{}:instances", self.prefix)
    }
}

/// Heartbeats after which the live count is trusted over an expected one.
const TRUSTED_AFTER: usize = 3;

/// How often at most the requests answered by the failure policy are
/// summed up in the log.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// An instance's member in the set: the host's name where the environment
/// gives one, the process id and a random part, so that a reader of the set
/// with `redis-cli` sees whose entry it is.
fn instance_id() -> String {
    let random = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        std::time::SystemTime::now(),
    );
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    format!("{host}:{}:{random:016x}", std::process::id())
}

/// The heartbeat task's hold on its instance. A task dropped while the
/// instance lives (its runtime shut down) hands the instance back, so that
/// the next call starts another heartbeat: only the heartbeat ends an
/// outage.
struct Running {
    instance: Weak<Instance>,
    dropped: Option<oneshot::Receiver<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(instance) = self.instance.upgrade() {
            *instance.dropped.lock() = self.dropped.take();
            instance.joined.store(false, Ordering::Relaxed);
        }
    }
}

/// A set of in-flight slots and the ids this instance holds in it.
type KeySlots = (Arc<str>, Vec<u64>);

/// The most keys one renewal call renews.
const RENEWED_PER_CALL: usize = 256;

/// What the heartbeat task holds: not the store, whose last clone it must
/// not keep alive.
struct Heart {
    /// The entry's member.
    id: String,
    client: Arc<Client>,
    key: String,
    prefix: Arc<str>,
    interval: Duration,
    /// How long an in-flight slot lasts: the slots held are renewed every
    /// third of it.
    lease: Duration,
    clock: Option<ClientClock>,
    timeout: Duration,
}

impl Heart {
    /// Beats every interval and renews the slots held every third of a
    /// lease, each on its own schedule, until the last clone is dropped.
    async fn beat_until(self, mut running: Running) {
        let renew_every = self.lease / 3;
        let start = tokio::time::Instant::now();
        let (mut next_beat, mut next_renewal) = (start, start + renew_every);
        let mut next_summary = start + SUMMARY_EVERY;
        // A store is often built and then set up in one statement: a
        // builder that makes a new instance drops this one before it
        // beats, most of the time.
        tokio::task::yield_now().await;
        loop {
            let Some(instance) = running.instance.upgrade() else {
                break;
            };
            if tokio::time::Instant::now() >= next_beat {
                self.beat(&instance).await;
                next_beat = tokio::time::Instant::now() + self.interval;
                if tokio::time::Instant::now() >= next_summary {
                    next_summary = tokio::time::Instant::now() + SUMMARY_EVERY;
                    self.sum_up(&instance);
                }
            }
            if tokio::time::Instant::now() >= next_renewal {
                next_renewal = tokio::time::Instant::now() + renew_every;
                self.renew(&instance).await;
            }
            drop(instance);
            let Some(dropped) = running.dropped.as_mut() else {
                break;
            };
            let wake = next_beat.min(next_renewal);
            if tokio::time::timeout_at(wake, dropped).await.is_ok() {
                break;
            }
        }
        let mut leave = redis::cmd("ZREM");
        leave.arg(&self.key).arg(&self.id);
        let connection = self.client.connection();
        let _ = self
            .bounded("leaving", connection.query::<i64>(&leave, None))
            .await;
    }

    /// Refreshes the entry, then, on a Cluster, its slot map and a probe
    /// of each node down. A heartbeat refused for its credentials, or on a
    /// single server found down, opens a new connection with the
    /// configured ones and beats again on it.
    async fn beat(&self, instance: &Arc<Instance>) {
        let mut outcome = self.count(instance).await;
        let node = instance.node_of(&self.key);
        let single = !self.client.is_cluster();
        let reopen = match &outcome {
            Err(err) => {
                err.kind() == StoreErrorKind::Authentication
                    || (single && instance.outage.is_down(&node))
            }
            Ok(_) => false,
        };
        if reopen && matches!(self.client.reopen(self.timeout).await, Ok(true)) {
            outcome = self.count(instance).await;
        }
        match outcome {
            Ok(live) => {
                instance.counted(live);
                crate::observe::live_instances(&self.prefix, live);
                instance.outage.answered(&node);
            }
            // The node answered, if with an error (a user not allowed the
            // set): calls go back to it, to meet that error themselves
            // rather than an outage that is not one.
            Err(err) if said_by_server(&err) => {
                crate::observe::heartbeat_failed(&err);
                instance.outage.answered(&node);
            }
            Err(err) => crate::observe::heartbeat_failed(&err),
        }
        if !single {
            self.read_slots(instance).await;
            for node in instance.outage.down_nodes() {
                if self.ping(&node).await {
                    instance.outage.answered(&node);
                }
            }
        }
    }

    /// Refreshes the entry, and counts the live ones.
    async fn count(&self, instance: &Arc<Instance>) -> Result<usize, StoreError> {
        let life = u64::try_from(self.interval.as_millis() * 3).unwrap_or(u64::MAX);
        let mut call = scripts::fleet().key(&self.key);
        call.arg(&self.id).arg(life);
        let connection = self.client.connection();
        let counted = self.bounded("heartbeat", connection.invoke::<usize>(&call));
        // A reply is news of the set's node, a refused connection too.
        Watch::new(&self.client, instance, &self.key).note(counted.await)
    }

    /// Says how many requests the failure policy answered since the last
    /// summary, if any.
    fn sum_up(&self, instance: &Instance) {
        let failed = instance.failed.swap(0, Ordering::Relaxed);
        if failed > 0 {
            crate::observe::failures_summed_up(failed, SUMMARY_EVERY);
        }
    }

    /// Renews every in-flight slot this instance holds: one call for all
    /// of them on a single node (up to [`RENEWED_PER_CALL`] keys), one per
    /// hash slot on a Cluster (a script runs within one), all sent at once.
    async fn renew(&self, instance: &Arc<Instance>) {
        let mut by_key: HashMap<Arc<str>, Vec<u64>> = HashMap::new();
        for (&id, leases) in instance.held.lock().iter() {
            by_key.entry(Arc::clone(leases)).or_default().push(id);
        }
        let cluster = self.client.is_cluster();
        let mut by_slot: HashMap<u16, Vec<KeySlots>> = HashMap::new();
        for (leases, ids) in by_key {
            let slot = if cluster {
                slots::slot(leases.as_bytes())
            } else {
                0
            };
            by_slot.entry(slot).or_default().push((leases, ids));
        }
        let lease = crate::clock::micros(self.lease);
        let now = self.clock.as_ref().map(|clock| clock());
        let mut calls = tokio::task::JoinSet::new();
        // A script blocks Redis while it runs: a few hundred keys a call.
        for held in by_slot
            .values()
            .flat_map(|keys| keys.chunks(RENEWED_PER_CALL))
        {
            let call = scripts::renewal(held, lease, now);
            let connection = self.client.connection();
            let watch = Watch::new(&self.client, instance, &held[0].0);
            let timeout = self.timeout;
            calls.spawn(async move {
                let renewed = async {
                    let reply = connection.invoke::<i64>(&call).await;
                    reply.map_err(|e| error("Redis renewal failed".into(), e))
                };
                watch.note(within(timeout, renewed).await)
            });
        }
        while let Some(done) = calls.join_next().await {
            if let Ok(Err(err)) = done {
                crate::observe::slot_call_failed(&err);
            }
        }
    }

    async fn read_slots(&self, instance: &Arc<Instance>) {
        let mut command = redis::cmd("CLUSTER");
        command.arg("SLOTS");
        let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let connection = self.client.connection();
        let reply = self
            .bounded("CLUSTER SLOTS", connection.query(&command, Some(random)))
            .await;
        if let Some(slots) = reply.ok().as_ref().and_then(Slots::read) {
            // A node the map no longer names (replaced by a failover) will
            // not answer again: its keys are on another node now.
            for node in instance.outage.down_nodes() {
                if !node.is_empty() && !slots.names(&node) {
                    instance.outage.answered(&node);
                }
            }
            *instance.slots.lock() = Some(slots);
        }
    }

    /// Whether `node` answers a `PING` (any node, for `""`), if only
    /// with an error of its own: one the client makes up (no connection
    /// to that address) is no answer.
    async fn ping(&self, node: &Node) -> bool {
        let routing = match slots::address(node) {
            Some((host, port)) => SingleNodeRoutingInfo::ByAddress { host, port },
            None => SingleNodeRoutingInfo::Random,
        };
        let ping = redis::cmd("PING");
        let connection = self.client.connection();
        let routing = Some(RoutingInfo::SingleNode(routing));
        match self
            .bounded("probe", connection.query::<String>(&ping, routing))
            .await
        {
            Ok(_) => true,
            Err(err) => said_by_server(&err),
        }
    }

    /// A call's reply within the heartbeat's wait, a failure named as
    /// `what`'s.
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let call = async {
            call.await
                .map_err(|e| error(format!("Redis {what} failed"), e))
        };
        within(self.timeout, call).await
    }
}
