//! The fleet: the instances sharing a prefix. Each instance (a store and
//! its clones) keeps an entry in the sorted set `prefix:instances`, scored
//! by when it expires on Redis `TIME`, and refreshes it once per heartbeat
//! from a background task, which learns how many entries are live from the
//! same call. That task is also the outage's probe: a heartbeat or `PING`
//! that succeeds brings a node back.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use tokio::sync::oneshot;

use super::client::{within, Client, Watch};
use super::errors::said_by_server;
use super::hash_slots::{self, HashSlots};
use super::outage::Node;
use super::scripts;
use crate::store::{StoreError, StoreErrorKind};

/// The fleet as one instance sees it, and the heartbeat that keeps it.
pub(super) struct Fleet {
    /// Live instances at the last heartbeat, this one included; 0 before.
    live: AtomicUsize,
    /// Heartbeats that counted the fleet so far.
    counts: AtomicUsize,
    /// Whether a heartbeat runs: read by every call, which takes the
    /// lock on `dropped` only to start one.
    joined: AtomicBool,
    /// Resolves once the last clone of the store is dropped: the
    /// heartbeat then takes the entry out and stops.
    dropped: Mutex<Option<oneshot::Receiver<()>>>,
    _alive: oneshot::Sender<()>,
    heart: Heart,
}

/// Heartbeats after which the live count is trusted over an expected one.
const TRUSTED_AFTER: usize = 3;

impl Fleet {
    /// The fleet of the instances sharing `prefix`, beating every
    /// `interval`, each call bounded by the interval too (a heartbeat is
    /// no request: it may wait longer than one, but not past the next);
    /// it joins at [`join`](Self::join).
    pub(super) fn new(client: Arc<Client>, prefix: &str, interval: Duration) -> Arc<Self> {
        let (alive, dropped) = oneshot::channel();
        Arc::new(Self {
            live: AtomicUsize::new(0),
            counts: AtomicUsize::new(0),
            joined: AtomicBool::new(false),
            dropped: Mutex::new(Some(dropped)),
            _alive: alive,
            heart: Heart {
                id: Arc::from(instance_id()),
                client,
                key: Arc::from(format!("{prefix}:instances")),
                prefix: Arc::from(prefix),
                interval,
                timeout: interval,
            },
        })
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
        self.counts.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts the heartbeat, unless it runs: when the store is built in a
    /// tokio runtime, else at its first call, in the runtime that makes it
    /// (a builder that changes the prefix or the heartbeat makes a new
    /// fleet).
    pub(super) fn join(self: &Arc<Self>) {
        if self.joined.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(dropped) = self.dropped.lock().take() else {
            return;
        };
        self.joined.store(true, Ordering::Relaxed);
        let running = Running {
            fleet: Arc::downgrade(self),
            dropped: Some(dropped),
        };
        runtime.spawn(self.heart.clone().beat_until(running));
    }
}

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

/// The heartbeat task's hold on its fleet. A task dropped while the fleet
/// lives (its runtime shut down) hands it back, so that the next call
/// starts another heartbeat: only the heartbeat ends an outage.
struct Running {
    fleet: Weak<Fleet>,
    dropped: Option<oneshot::Receiver<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(fleet) = self.fleet.upgrade() {
            *fleet.dropped.lock() = self.dropped.take();
            fleet.joined.store(false, Ordering::Relaxed);
        }
    }
}

/// What the heartbeat task holds: not the fleet, whose last holder it must
/// not keep alive.
#[derive(Clone)]
struct Heart {
    /// The entry's member.
    id: Arc<str>,
    client: Arc<Client>,
    key: Arc<str>,
    prefix: Arc<str>,
    interval: Duration,
    timeout: Duration,
}

impl Heart {
    /// Beats every interval until the last clone is dropped.
    async fn beat_until(self, mut running: Running) {
        // A store is often built and then set up in one statement: a
        // builder that makes a new fleet drops this one before it beats,
        // most of the time.
        tokio::task::yield_now().await;
        let mut joined = false;
        loop {
            let Some(fleet) = running.fleet.upgrade() else {
                break;
            };
            self.beat(&fleet).await;
            joined = true;
            drop(fleet);
            let Some(dropped) = running.dropped.as_mut() else {
                break;
            };
            if tokio::time::timeout(self.interval, dropped).await.is_ok() {
                break;
            }
        }
        if joined {
            let mut leave = redis::cmd("ZREM");
            leave.arg(&*self.key).arg(&*self.id);
            let connection = self.client.connection();
            let _ = within(
                self.timeout,
                connection.query::<i64>(&leave, None, "leaving"),
            )
            .await;
        }
    }

    /// Refreshes the entry, then, on a Cluster, its hash-slot map and a probe
    /// of each node down. A heartbeat refused for its credentials, or on a
    /// single server found down, opens a new connection with the
    /// configured ones and beats again on it.
    async fn beat(&self, fleet: &Fleet) {
        let outage = &self.client.outage;
        let mut outcome = self.count().await;
        let node = self.client.node_of(&self.key);
        let single = !self.client.is_cluster();
        let reopen = match &outcome {
            Err(err) => {
                err.kind() == StoreErrorKind::Authentication || (single && outage.is_down(&node))
            }
            Ok(_) => false,
        };
        if reopen && matches!(self.client.reopen(self.timeout).await, Ok(true)) {
            outcome = self.count().await;
        }
        match outcome {
            Ok(live) => {
                fleet.counted(live);
                crate::observe::live_instances(&self.prefix, live);
                outage.answered(&node);
            }
            // The node answered, if with an error (a user not allowed the
            // set): calls go back to it, to meet that error themselves
            // rather than an outage that is not one.
            Err(err) if said_by_server(&err) => {
                crate::observe::heartbeat_failed(&err);
                outage.answered(&node);
            }
            Err(err) => crate::observe::heartbeat_failed(&err),
        }
        if !single {
            self.read_hash_slots().await;
            for node in outage.down_nodes() {
                if self.ping(&node).await {
                    outage.answered(&node);
                }
            }
        }
    }

    /// Refreshes the entry, and counts the live ones.
    async fn count(&self) -> Result<usize, StoreError> {
        let life = u64::try_from(self.interval.as_millis() * 3).unwrap_or(u64::MAX);
        let mut call = scripts::fleet().key(&*self.key);
        call.arg(&*self.id).arg(life);
        let connection = self.client.connection();
        let counted = within(self.timeout, connection.invoke::<usize>(&call, "heartbeat"));
        // A reply is news of the set's node, a refused connection too.
        Watch::new(&self.client, &self.key).note(counted.await)
    }

    async fn read_hash_slots(&self) {
        let mut command = redis::cmd("CLUSTER");
        command.arg("SLOTS");
        let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let connection = self.client.connection();
        let slots = connection.query(&command, Some(random), "CLUSTER SLOTS");
        let reply = within(self.timeout, slots).await;
        if let Some(map) = reply.ok().as_ref().and_then(HashSlots::read) {
            self.client.read_hash_slots(map);
        }
    }

    /// Whether `node` answers a `PING` (any node, for `""`), if only
    /// with an error of its own: one the client makes up (no connection
    /// to that address) is no answer.
    async fn ping(&self, node: &Node) -> bool {
        let routing = match hash_slots::address(node) {
            Some((host, port)) => SingleNodeRoutingInfo::ByAddress { host, port },
            None => SingleNodeRoutingInfo::Random,
        };
        let ping = redis::cmd("PING");
        let connection = self.client.connection();
        let routing = Some(RoutingInfo::SingleNode(routing));
        let probe = connection.query::<String>(&ping, routing, "probe");
        match within(self.timeout, probe).await {
            Ok(_) => true,
            Err(err) => said_by_server(&err),
        }
    }
}
