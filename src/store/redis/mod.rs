//! The Redis store: one server-side script call per decision, shared by
//! every instance of a service, on a single node or a Redis Cluster.

mod failure;
mod integer_state;
mod keys;
mod log_script;
mod scripts;
mod window_script;

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{RedisResult, ScriptInvocation};

pub use self::failure::FailurePolicy;
use super::{MemoryStore, Store, StoreError};
use crate::clock::Clock;
use crate::decision::{Decision, Origin};
use crate::policy::{Algorithm, Policy};

/// State kept in Redis, so that every instance of a service shares one limit.
///
/// * **One round trip per decision.** All limits of a policy are judged and
///   recorded all-or-nothing by one script, called by its SHA (reloaded
///   transparently after a restart, failover or `SCRIPT FLUSH`). The
///   script is written for each policy, with its limits as constants,
///   which spares Redis a fifth of its work per call (a third for the
///   log); each policy shape (algorithm and limits) therefore adds one
///   script (two if peeked) to Redis's script cache, about 5.5 KB of Redis
///   memory each for the counter, 13.6 KB for the log (measured for two
///   limits). A handful of plans costs nothing worth counting; limits computed per tenant, thousands of
///   distinct shapes, cost megabytes until a `SCRIPT FLUSH` (after which
///   the store reloads what it uses).
///   [`script_source`](RedisStore::script_source) shows the text.
/// * **Server time.** By default the script reads Redis `TIME`, so
///   application servers with skewed clocks agree, and fixed windows are
///   aligned to the Unix epoch. Each key remembers when it last counted a
///   request (the counters the start of that window, the log its newest
///   stamp) and is never judged earlier, so a server clock that steps back (a failover to a node
///   whose clock is behind) cannot admit extra requests; Redis's own
///   expiry steps back with it. [`with_clock`](RedisStore::with_clock)
///   supplies the time from the client instead (a
///   [`ManualClock`](crate::ManualClock) in tests); such a clock must not
///   step back by more than the TTL (twice the longest window), since keys
///   expire on Redis's time and their TTL is renewed only when a new window
///   starts.
/// * **Compact.** The log keeps a ring of 8-byte timestamps (as many as the
///   largest limit) in one string, followed by a trailer of 16 bytes and 20 per
///   limit (a cursor, its stamp and the next). The counter and fixed
///   window keep one integer below 2^53 where the counts are small enough to share it with the
///   window index (ten a second and a hundred a minute take 22 bits of
///   counts; an IPv4 key then takes 88 bytes of Redis memory), else a
///   string of 12 bytes per limit (120 bytes for the same key).
///   Every key expires once it has been idle long enough to no longer
///   matter.
/// * **Keys** are `prefix:{user key}:name/signature`: the user's key is a hash
///   tag, escaped so that `{`, `}`, `%` and control bytes can neither move it
///   to another slot nor make two keys collide. Windows are identified by the
///   policy's [name](Policy::named) and limits, the same in every process —
///   that is how instances share them. Unlike in a [`MemoryStore`], two
///   *unnamed* policies with equal limits therefore share windows here: name
///   the policies (or use prefixes) of layers that must count apart.
/// * **Failures** are bounded by a timeout (50 ms by default) and answered
///   by a [`FailurePolicy`] (fail open by default).
///
/// Supports 64-bit Redis 6 and later (tested on 7.0), standalone or cluster:
/// the packed integer state is printed through a C `long`.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    prefix: Arc<str>,
    clock: Option<ClientClock>,
    timeout: Duration,
    failure: FailurePolicy,
    fallback: MemoryStore<FallbackClock>,
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

type ClientClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The clock of the local fallback store: the client clock if one was given,
/// else the process's monotonic clock.
#[derive(Clone)]
struct FallbackClock(Option<ClientClock>);

impl Clock for FallbackClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    fn now_micros(&self) -> u64 {
        match &self.0 {
            Some(clock) => clock(),
            None => crate::clock::SystemClock.now_micros(),
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field(
                "cluster",
                &matches!(self.connection, Connection::Cluster(_)),
            )
            .field("prefix", &self.prefix)
            .field("client_clock", &self.clock.is_some())
            .field("timeout", &self.timeout)
            .field("failure", &self.failure)
            .finish()
    }
}

impl RedisStore {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "tsw";
    /// The default time a decision may take before the failure policy answers.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

    /// Connects to one Redis server, e.g. `redis://127.0.0.1:6379`.
    ///
    /// The connection reconnects by itself after failures.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if the URL is invalid or the server does not answer.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| error(format!("invalid Redis URL {url:?}"), e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| error(format!("cannot connect to Redis at {url}"), e))?;
        Ok(Self::from_connection_manager(manager))
    }

    /// Connects to a Redis Cluster through any of its nodes.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if a URL is invalid or the cluster does not answer.
    pub async fn connect_cluster(urls: &[&str]) -> Result<Self, StoreError> {
        let client = ClusterClient::builder(urls.iter().copied())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .retries(2)
            .build()
            .map_err(|e| error(format!("invalid Redis Cluster URLs {urls:?}"), e))?;
        let connection = client
            .get_async_connection()
            .await
            .map_err(|e| error(format!("cannot connect to Redis Cluster at {urls:?}"), e))?;
        Ok(Self::from_cluster_connection(connection))
    }

    /// A store over an existing single-node connection.
    pub fn from_connection_manager(manager: ConnectionManager) -> Self {
        Self::build(Connection::Single(manager))
    }

    /// A store over an existing cluster connection.
    pub fn from_cluster_connection(connection: ClusterConnection) -> Self {
        Self::build(Connection::Cluster(connection))
    }

    fn build(connection: Connection) -> Self {
        Self {
            connection,
            prefix: Arc::from(Self::DEFAULT_PREFIX),
            clock: None,
            timeout: Self::DEFAULT_TIMEOUT,
            failure: FailurePolicy::default(),
            fallback: MemoryStore::with_clock(FallbackClock(None)),
        }
    }

    /// Names every key `prefix:{…}:…` (default `tsw`).
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.prefix = Arc::from(keys::escape(prefix));
        self
    }

    /// Reads time from `clock` on the client instead of Redis `TIME`.
    ///
    /// Every instance sharing the keys must then share the clock's zero; this
    /// is meant for tests with a [`ManualClock`](crate::ManualClock).
    pub fn with_clock<C: Clock>(mut self, clock: C) -> Self {
        let clock: ClientClock = Arc::new(move || clock.now_micros());
        self.fallback = MemoryStore::with_clock(FallbackClock(Some(Arc::clone(&clock))));
        self.clock = Some(clock);
        self
    }

    /// How long one decision may take before the failure policy answers
    /// instead (default 50 ms).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What to do when Redis fails or is too slow (default
    /// [`FailurePolicy::FailOpen`]).
    pub fn with_failure_policy(mut self, failure: FailurePolicy) -> Self {
        self.failure = failure;
        self
    }

    /// The Redis key holding `key`'s state under `policy`.
    pub fn key_name(&self, key: &impl Display, policy: &Policy) -> String {
        keys::key_name(&self.prefix, key, policy.name(), policy.signature())
    }

    /// The Lua script this store runs in Redis to judge and record a request
    /// under `policy`, to read what runs on the server (or to measure it).
    ///
    /// Each policy has a script written for it, its limits as constants:
    /// no arguments but an optional `ARGV[1]`, now in microseconds (else the
    /// script reads `TIME`), and `KEYS[1]`, the state.
    pub fn script_source(policy: &Policy) -> String {
        script_source(policy, true)
    }

    /// Judges `key` under `policy` in Redis (recording it if `record`), with
    /// no timeout or failure policy.
    async fn judge(
        &self,
        name: &str,
        policy: &Policy,
        record: bool,
    ) -> Result<Decision, StoreError> {
        let mut invocation = policy
            .redis_script(record, || {
                redis::Script::new(&script_source(policy, record))
            })
            .key(name);
        // Without a client clock the script reads the server's TIME.
        if let Some(clock) = &self.clock {
            invocation.arg(clock());
        }
        let reply: Vec<u8> = self
            .invoke(&invocation)
            .await
            .map_err(|e| error("Redis script failed".into(), e))?;
        match policy.algorithm() {
            Algorithm::SlidingLog => scripts::log_decision(policy, &reply, record),
            Algorithm::SlidingCounter | Algorithm::FixedWindow => {
                scripts::window_decision(policy, &reply, record)
            }
        }
    }

    async fn invoke(&self, invocation: &ScriptInvocation<'_>) -> RedisResult<Vec<u8>> {
        match &self.connection {
            Connection::Single(manager) => invocation.invoke_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => invocation.invoke_async(&mut cluster.clone()).await,
        }
    }

    /// Answers for a failed or late call, by the failure policy.
    fn on_failure(
        &self,
        name: String,
        policy: &Policy,
        err: StoreError,
        record: bool,
    ) -> Result<Decision, StoreError> {
        crate::observe::store_failed(&err, self.failure);
        match self.failure {
            FailurePolicy::FailOpen => Ok(Decision::substitute(
                true,
                policy.limits()[0],
                0,
                0,
                Origin::FailOpen,
            )),
            FailurePolicy::FailClosed => Err(err),
            FailurePolicy::Fallback => {
                let mut decision = if record {
                    self.fallback.decide_now(name, policy)
                } else {
                    self.fallback.peek_now(&name, policy)
                };
                decision.origin = Origin::Fallback;
                Ok(decision)
            }
        }
    }
}

/// The script judging under `policy`, recording what it accepts if `record`.
fn script_source(policy: &Policy, record: bool) -> String {
    match policy.algorithm() {
        Algorithm::SlidingLog => log_script::source(policy, record),
        Algorithm::SlidingCounter | Algorithm::FixedWindow => window_script::source(policy, record),
    }
}

fn error(context: String, source: redis::RedisError) -> StoreError {
    StoreError::new(context, Some(Box::new(source)))
}

impl<K: Display> Store<K> for RedisStore {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>;

    fn decide(&self, key: K, policy: &Policy) -> Self::Future {
        self.call(&key, policy, true)
    }

    fn peek(&self, key: K, policy: &Policy) -> Self::Future {
        self.call(&key, policy, false)
    }
}

impl RedisStore {
    fn call<K: Display>(
        &self,
        key: &K,
        policy: &Policy,
        record: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>> {
        let name = self.key_name(key, policy);
        let store = self.clone();
        let policy = policy.clone();
        Box::pin(async move {
            let outcome =
                tokio::time::timeout(store.timeout, store.judge(&name, &policy, record)).await;
            match outcome {
                Ok(Ok(decision)) => Ok(decision),
                Ok(Err(err)) => store.on_failure(name, &policy, err, record),
                Err(_) => {
                    let err = StoreError::new(
                        format!("Redis did not answer within {:?}", store.timeout),
                        None,
                    );
                    store.on_failure(name, &policy, err, record)
                }
            }
        })
    }
}
