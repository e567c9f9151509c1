//! The client: the connection to Redis (one server or a Cluster), remade
//! with the configured credentials when it cannot recover by itself, and
//! the way every call is made on it.
//!
//! **Saturation is not an outage.** A call waits for one of its node's
//! permits ([`PENDING_CALLS_PER_NODE`](super::RedisStore::PENDING_CALLS_PER_NODE)
//! calls of a store at once), then for the reply, both within the store's
//! timeout. A call that times out fails alone, under the failure policy,
//! and goes on in the background holding its permit until Redis replies:
//! the bound counts what Redis is still working on, so a burst waits for
//! permits instead of piling onto a slow server. A node is down only on
//! evidence that it is: a refused or dropped connection, or a call that has
//! waited the store's silence span (the longer of its timeout and its
//! heartbeat) with no reply at all from that node meanwhile. A call queued
//! behind this store's own calls sees their replies arrive, and never marks
//! its node down.

use std::collections::HashMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::RoutingInfo;
use redis::{Cmd, FromRedisValue, RedisResult, ScriptInvocation};
use tokio::sync::Semaphore;

use super::errors::{error, said_by_server};
use super::hash_slots::HashSlots;
use super::outage::{whole, Node, Outage};
use crate::store::{StoreError, StoreErrorKind};

/// A connection to one server or a Cluster; clones share it.
#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Runs a script; a failure is named as `what`'s.
    pub(super) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        what: &str,
    ) -> Result<T, StoreError> {
        let reply = match self {
            Self::Single(manager) => invocation.invoke_async(&mut manager.clone()).await,
            Self::Cluster(cluster) => invocation.invoke_async(&mut cluster.clone()).await,
        };
        reply.map_err(|e| error(format!("Redis {what} failed"), e))
    }

    /// Sends `command`; on a Cluster to the node `routing` names, if any,
    /// else to the one its keys live on. A failure is named as `what`'s.
    pub(super) async fn query<T: FromRedisValue>(
        &self,
        command: &Cmd,
        routing: Option<RoutingInfo>,
        what: &str,
    ) -> Result<T, StoreError> {
        let reply = self.send(command, routing).await;
        reply.map_err(|e| error(format!("Redis {what} failed"), e))
    }

    async fn send<T: FromRedisValue>(
        &self,
        command: &Cmd,
        routing: Option<RoutingInfo>,
    ) -> RedisResult<T> {
        match (self, routing) {
            (Self::Cluster(cluster), Some(routing)) => {
                let reply = cluster
                    .clone()
                    .route_command(command.clone(), routing)
                    .await?;
                Ok(redis::from_redis_value(reply)?)
            }
            (Self::Cluster(cluster), None) => command.query_async(&mut cluster.clone()).await,
            (Self::Single(manager), _) => command.query_async(&mut manager.clone()).await,
        }
    }
}

/// How to open a connection again with the credentials the store was
/// given: only a store that connected from URLs has them. There is one
/// a store, so its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Opener {
    Single(redis::Client),
    Cluster(ClusterClient),
}

impl Opener {
    /// A new connection, checked by a `PING` (which is what a server that
    /// wants a password refuses).
    pub(super) async fn open(&self) -> RedisResult<Connection> {
        match self {
            Self::Single(client) => {
                // No response timeout of its own: the store's bounds every
                // call, whatever it is set to.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(None)
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let mut manager =
                    ConnectionManager::new_with_config(client.clone(), config).await?;
                redis::cmd("PING")
                    .query_async::<String>(&mut manager)
                    .await?;
                Ok(Connection::Single(manager))
            }
            // Connecting pings every node given.
            Self::Cluster(client) => Ok(Connection::Cluster(client.get_async_connection().await?)),
        }
    }
}

/// The connection every clone of a store shares, the nodes behind it and
/// each node's calls.
pub(super) struct Client {
    connection: RwLock<Connection>,
    opener: Option<Opener>,
    nodes: Mutex<HashMap<Node, Arc<NodeCalls>>>,
    /// The nodes found down.
    pub(super) outage: Outage,
    /// A Cluster's hash-slot map, as the heartbeat last read it.
    hash_slots: Mutex<Option<HashSlots>>,
}

/// A node's permits, and when a reply from it last arrived.
struct NodeCalls {
    permits: Arc<Semaphore>,
    /// Micros since [`EPOCH`] at the last reply.
    last_reply: AtomicU64,
}

/// The most calls a store (and its clones) has waiting on one node.
pub(super) const PENDING_CALLS_PER_NODE: usize = 256;

/// Now in µs from a clock on the client, for tests: the scripts then take
/// the time from it rather than read Redis `TIME`.
pub(super) type ClientClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// How many silence spans a call waits for its own reply while its node
/// answers others, before it gives up.
const GIVE_UP_AFTER: u64 = 10;

/// The origin of the client's monotonic micros.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn micros_now() -> u64 {
    u64::try_from(EPOCH.elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl NodeCalls {
    fn replied(&self) {
        self.last_reply.store(micros_now(), Ordering::Relaxed);
    }

    fn last_reply(&self) -> u64 {
        self.last_reply.load(Ordering::Relaxed)
    }
}

impl Client {
    pub(super) fn new(connection: Connection, opener: Option<Opener>) -> Self {
        Self {
            connection: RwLock::new(connection),
            opener,
            nodes: Mutex::default(),
            outage: Outage::default(),
            hash_slots: Mutex::default(),
        }
    }

    /// The node holding the key `name`.
    pub(super) fn node_of(&self, name: &str) -> Node {
        match &*self.hash_slots.lock() {
            Some(map) => map.node(name),
            None => whole(),
        }
    }

    /// Judges every later call's node by `map`. A node down that the
    /// map no longer names (replaced in a failover) will not answer
    /// again: its keys are on another node now.
    pub(super) fn read_hash_slots(&self, map: HashSlots) {
        for node in self.outage.down_nodes() {
            if !node.is_empty() && !map.names(&node) {
                self.outage.answered(&node);
            }
        }
        *self.hash_slots.lock() = Some(map);
    }

    pub(super) fn connection(&self) -> Connection {
        self.connection.read().clone()
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(*self.connection.read(), Connection::Cluster(_))
    }

    fn calls(&self, node: &Node) -> Arc<NodeCalls> {
        let mut nodes = self.nodes.lock();
        let calls = nodes.entry(node.clone()).or_insert_with(|| {
            Arc::new(NodeCalls {
                permits: Arc::new(Semaphore::new(PENDING_CALLS_PER_NODE)),
                last_reply: AtomicU64::new(micros_now()),
            })
        });
        Arc::clone(calls)
    }

    /// Opens a new connection with the configured credentials and, once
    /// it answers, sends every later call on it. `Ok(false)` for a store
    /// made from a connection of the application's, which has none.
    pub(super) async fn reopen(&self, timeout: Duration) -> Result<bool, StoreError> {
        let Some(opener) = &self.opener else {
            return Ok(false);
        };
        let opened = async {
            let opened = opener.open().await;
            opened.map_err(|e| error("cannot connect to Redis again".into(), e))
        };
        *self.connection.write() = within(timeout, opened).await?;
        Ok(true)
    }
}

/// `call`'s outcome, or an error once `timeout` has passed.
pub(super) async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(
            StoreError::new(format!("Redis did not answer within {timeout:?}"), None)
                .with_kind(StoreErrorKind::Timeout),
        ),
    }
}

/// What becomes of a call's outcome once its caller no longer waits for it.
pub(super) type Orphaned<T> = Box<dyn FnOnce(Result<T, StoreError>) + Send>;

/// A call to Redis, boxed to run on without its caller.
type Call<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

/// A call that its caller may stop waiting for: dropped before its end, it
/// runs on in the background, so that what it holds (its permit) is held
/// until Redis replies, and its outcome goes to `orphaned`.
struct Detached<T: Send + 'static> {
    call: Option<Call<T>>,
    orphaned: Option<Orphaned<T>>,
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(call) = self.call.as_mut() else {
            return Poll::Pending;
        };
        let outcome = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        Poll::Ready(outcome)
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        let (Some(call), Ok(runtime)) = (self.call.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let orphaned = self.orphaned.take();
        runtime.spawn(async move {
            let outcome = call.await;
            if let Some(orphaned) = orphaned {
                orphaned(outcome);
            }
        });
    }
}

/// One call to one node, watched for the evidence it gives of the node.
pub(super) struct Watch {
    client: Arc<Client>,
    node: Node,
    calls: Arc<NodeCalls>,
}

impl Watch {
    /// A watch over a call to the node holding the key `name`.
    pub(super) fn new(client: &Arc<Client>, name: &str) -> Self {
        let node = client.node_of(name);
        Self {
            client: Arc::clone(client),
            calls: client.calls(&node),
            node,
        }
    }

    /// A request's `call`: its outcome, or the node's outage error once
    /// the node is found down, by this call (`silence` passed since the
    /// later of its start and the node's last reply) or by another. A call
    /// that waits [`GIVE_UP_AFTER`] silence spans while the node answers
    /// others gives up with a timeout, and its place.
    async fn run<T>(
        self,
        silence: Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let outage = &self.client.outage;
        let mut call = pin!(outage.unless_down(&self.node, call));
        let (sent, span) = (micros_now(), crate::clock::micros(silence));
        loop {
            let now = micros_now();
            let quiet = now.saturating_sub(self.calls.last_reply().max(sent));
            if quiet >= span {
                outage.mark_down(self.node.clone());
                return Err(Outage::error(&self.node));
            }
            if now.saturating_sub(sent) >= span.saturating_mul(GIVE_UP_AFTER) {
                let message = "Redis answered other calls but never this one";
                return Err(StoreError::new(message, None).with_kind(StoreErrorKind::Timeout));
            }
            let wait = Duration::from_micros(span - quiet);
            if let Ok(outcome) = tokio::time::timeout(wait, call.as_mut()).await {
                return self.note(outcome);
            }
        }
    }

    /// What a call's outcome tells of its node: a reply, even an error
    /// the server sent, is news that it is there; a refused or dropped
    /// connection, that it is down.
    pub(super) fn note<T>(&self, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
        match &outcome {
            Ok(_) => self.calls.replied(),
            Err(err) if said_by_server(err) => self.calls.replied(),
            Err(err) if err.kind() == StoreErrorKind::Connection => {
                self.client.outage.mark_down(self.node.clone());
            }
            Err(_) => {}
        }
        outcome
    }
}

impl Client {
    /// `call` to the node holding the key `name`: its outcome, or an
    /// error at once if the node is down, once `timeout` has passed
    /// (waiting for a permit included), or as soon as the node is found
    /// down; `silence` is how long the node may leave the call with no
    /// reply at all, to it or any other call, before it is taken for down.
    ///
    /// A call that timed out after it was sent runs on until Redis
    /// replies, and its outcome then goes to `orphaned`, if any.
    pub(super) async fn reach<T: Send + 'static>(
        self: &Arc<Self>,
        name: &str,
        timeout: Duration,
        silence: Duration,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'static,
        orphaned: Option<Orphaned<T>>,
    ) -> Result<T, StoreError> {
        let watch = Watch::new(self, name);
        if self.outage.is_down(&watch.node) {
            return Err(Outage::error(&watch.node));
        }
        let permits = Arc::clone(&watch.calls.permits);
        within(timeout, async move {
            // The semaphore is never closed.
            let permit = permits.acquire_owned().await.ok();
            let call = async move {
                let outcome = watch.run(silence, call).await;
                drop(permit);
                outcome
            };
            Detached {
                call: Some(Box::pin(call)),
                orphaned,
            }
            .await
        })
        .await
    }
}
