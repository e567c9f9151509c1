//! The Redis store: one server-side script call per decision, shared by
//! every instance of a service, on a single node or a Redis Cluster.

mod deny_cache;
mod failure;
mod integer_state;
mod keys;
mod log_script;
mod scripts;
mod template;
mod window_script;

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{RedisResult, ScriptInvocation};

use self::deny_cache::DenyCache;
pub use self::failure::FailurePolicy;
use self::scripts::Mode;
use super::{MemoryStore, Store, StoreError};
use crate::algorithm::{Algorithm, Decision, Origin};
use crate::clock::Clock;
use crate::per_policy::PerPolicy;
use crate::policy::Policy;

/// State kept in Redis, so that every instance of a service shares one limit.
///
/// * **One round trip per decision.** All limits of a policy are judged and
///   recorded all-or-nothing by one script, called by its SHA (reloaded
///   transparently after a restart, failover or `SCRIPT FLUSH`). The
///   script is a Lua template filled for each policy, its limits as
///   constants, which spares Redis the work of reading them on every call;
///   each policy shape (algorithm and limits) therefore adds one script
///   (up to four, with peeks, costs and settling) to Redis's script cache, a few kilobytes each. A
///   handful of plans costs nothing worth counting; limits computed per
///   tenant, thousands of distinct shapes, cost megabytes until a
///   `SCRIPT FLUSH` (after which the store reloads what it uses).
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
///   largest limit) and a short trailer in one string; the counter and
///   fixed window keep one integer where the counts are small enough to
///   share it with the window index, else 12 bytes a limit (docs/design.md
///   has the layouts). Every key expires once it has been idle long enough
///   to no longer matter.
/// * **Keys** are `prefix:{user key}:v2:name/signature`: the user's key is a
///   hash tag, escaped so that `{`, `}`, `%` and control bytes can neither
///   move it to another slot nor make two keys collide. `v2` names the
///   stored format, so that a deploy that changes it never reads a key an
///   older release wrote. Windows are identified by the policy's value
///   ([name](Policy::named), algorithm and limits), the same in every
///   process: that is how instances share them, as the [`Store`] rule asks.
/// * **Refused keys are answered locally.** A key Redis refused is
///   remembered by this instance (and its clones) until its wait is up, and
///   answered without a call: a flood of one key costs one call per wait, not
///   one per request. The answer is the one Redis would give this instance,
///   since nothing it does meanwhile can bring the wait closer; other
///   instances only add traffic (unless they settle requests, giving quota
///   back that this instance learns of when its remembered wait is up).
///   Refusals of requests costing more than one unit are not remembered,
///   so a layer with a [`cost`](crate::SlidingWindowLayer::cost) is spared
///   calls only for penalties and requests of one unit. The cache holds up to
///   [`DEFAULT_DENY_CACHE`](RedisStore::DEFAULT_DENY_CACHE) keys and starts
///   afresh when full; [`with_deny_cache`](RedisStore::with_deny_cache)
///   sizes it or turns it off. State lost in Redis (a restart without
///   persistence, a `FLUSHALL`) is then learnt once each remembered wait
///   is up.
/// * **Failures** are bounded by a timeout (50 ms by default) and answered
///   by a [`FailurePolicy`] (fail open by default).
///
/// Supports 64-bit Redis 6 and later (tested on 7.0), standalone or cluster:
/// the packed integer state is printed through a C `long`.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    prefix: Arc<str>,
    /// What this store keeps per policy value: its key suffix and scripts.
    bound: Arc<PerPolicy<RedisBinding>>,
    clock: Option<ClientClock>,
    timeout: Duration,
    failure: FailurePolicy,
    fallback: MemoryStore<LocalClock>,
    /// Refusals still standing, by key name; `None` when turned off.
    denied: Option<Arc<DenyCache>>,
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

type ClientClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A policy bound to a [`RedisStore`]: the end of its keys' names and its
/// scripts, built once per policy value (see [`Store::bind`]).
#[derive(Clone)]
pub struct RedisBinding {
    inner: Arc<Bound>,
}

struct Bound {
    policy: Policy,
    /// The key name's part after the user's key.
    suffix: String,
    /// One script per [`Mode`], each built the first time it is needed.
    scripts: [OnceLock<redis::Script>; Mode::ALL],
    events: crate::observe::DenyCacheEvents,
}

impl std::fmt::Debug for RedisBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBinding")
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl RedisBinding {
    fn new(policy: &Policy) -> Self {
        Self {
            inner: Arc::new(Bound {
                policy: policy.clone(),
                suffix: keys::suffix(policy.name(), policy.signature()),
                scripts: Default::default(),
                events: crate::observe::DenyCacheEvents::new(policy),
            }),
        }
    }

    fn script(&self, mode: Mode) -> &redis::Script {
        let policy = &self.inner.policy;
        self.inner.scripts[mode as usize]
            .get_or_init(|| redis::Script::new(&script_source(policy, mode)))
    }
}

/// The store's local time, for its fallback store and its deny cache: the
/// client clock if one was given, else the process's monotonic clock.
#[derive(Clone)]
struct LocalClock(Option<ClientClock>);

impl Clock for LocalClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    fn now_micros(&self) -> u64 {
        local_micros(self.0.as_ref())
    }
}

fn local_micros(client_clock: Option<&ClientClock>) -> u64 {
    match client_clock {
        Some(clock) => clock(),
        None => crate::clock::SystemClock.now_micros(),
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
            .field("denied_keys", &self.denied_keys())
            .finish()
    }
}

impl RedisStore {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "tsw";
    /// The default time a decision may take before the failure policy answers.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
    /// How many refused keys the deny cache holds by default.
    pub const DEFAULT_DENY_CACHE: usize = 4096;

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
            bound: Arc::default(),
            clock: None,
            timeout: Self::DEFAULT_TIMEOUT,
            failure: FailurePolicy::default(),
            fallback: MemoryStore::with_clock(LocalClock(None)),
            denied: Some(Arc::new(DenyCache::new(Self::DEFAULT_DENY_CACHE))),
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
        self.fallback = MemoryStore::with_clock(LocalClock(Some(Arc::clone(&clock))));
        self.clock = Some(clock);
        // What it remembers was placed on the other clock.
        self.denied = self
            .denied
            .as_ref()
            .map(|denied| Arc::new(DenyCache::new(denied.capacity)));
        self
    }

    /// Remembers up to `keys` refused keys and answers them locally until
    /// their wait is up (default [`DEFAULT_DENY_CACHE`](Self::DEFAULT_DENY_CACHE));
    /// `0` turns the cache off, so that every decision is a call to Redis.
    ///
    /// Each key held costs its name and about a hundred bytes.
    pub fn with_deny_cache(mut self, keys: usize) -> Self {
        self.denied = (keys > 0).then(|| Arc::new(DenyCache::new(keys)));
        self
    }

    /// How many keys the deny cache holds now (refusals that have run out
    /// included, until they are looked up or swept).
    pub fn denied_keys(&self) -> usize {
        self.denied.as_ref().map_or(0, |denied| denied.len())
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
        let suffix = keys::suffix(policy.name(), policy.signature());
        keys::key_name(&self.prefix, key, &suffix)
    }

    /// The Lua script this store runs in Redis to judge and record a request
    /// under `policy`, to read what runs on the server (or to measure it).
    ///
    /// Each policy has a script written for it, its limits as constants:
    /// no arguments but an optional `ARGV[1]`, now in microseconds (else the
    /// script reads `TIME`), and `KEYS[1]`, the state.
    pub fn script_source(policy: &Policy) -> String {
        script_source(policy, Mode::Record)
    }

    /// Judges a request of `cost` units for `key` under `policy` in Redis,
    /// in `mode`, with no timeout or failure policy.
    async fn judge(
        &self,
        name: &str,
        binding: &RedisBinding,
        mode: Mode,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let policy = &binding.inner.policy;
        let record = mode.records();
        let penalty = policy.penalty_micros();
        let mut invocation = binding.script(mode).key(name);
        if penalty > 0 {
            // Beside the state, in the same slot: the hash tag is the same.
            invocation.key(keys::penalty_key(name));
        }
        if mode == Mode::RecordCost {
            invocation.arg(cost);
        }
        // Without a client clock the script reads the server's TIME.
        if let Some(clock) = &self.clock {
            invocation.arg(clock());
        }
        let reply: Vec<u8> = self
            .invoke(&invocation)
            .await
            .map_err(|e| error("Redis script failed".into(), e))?;
        if penalty > 0 {
            if let Some(decision) = scripts::penalty_decision(policy, &reply)? {
                return Ok(decision);
            }
        }
        let decision = match policy.algorithm() {
            Algorithm::SlidingLog => scripts::log_decision(policy, &reply, record)?,
            Algorithm::SlidingCounter | Algorithm::FixedWindow => {
                scripts::window_decision(policy, &reply, record, cost)?
            }
        };
        // The script started the key's penalty with this refusal.
        Ok(if record && penalty > 0 && !decision.is_allowed() {
            decision.starting_penalty(penalty)
        } else {
            decision
        })
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

impl RedisStore {
    fn local_now(&self) -> u64 {
        local_micros(self.clock.as_ref())
    }

    /// Remembers Redis's refusal of `name` under `policy`, asked for at
    /// local time `sent`, in the form Redis would give it until it runs out.
    fn remember(
        &self,
        name: String,
        decision: Decision,
        sent: u64,
        binding: &RedisBinding,
        record: bool,
        cost: u32,
    ) {
        let Some(denied) = &self.denied else { return };
        let policy = &binding.inner.policy;
        let standing = match decision.origin {
            // Redis answers the rest of a penalty as a penalty's.
            Origin::Limits if policy.penalty_micros() > 0 => {
                if !record {
                    // A peek starts no penalty, so its wait is shorter than
                    // the one the next recorded refusal will start.
                    return;
                }
                Decision::in_penalty(
                    policy.limits()[0],
                    decision.retry_after_micros,
                    decision.at_micros,
                )
            }
            // A refusal of several units leaves room for fewer, sooner.
            Origin::Limits if cost > 1 => return,
            _ => decision,
        };
        // A client clock is the one the script judged by, so the refusal
        // stands from the time Redis judged it at; the server's clock can
        // only be placed by when the call left.
        let from = if self.clock.is_some() {
            decision.at_micros
        } else {
            sent
        };
        crate::observe::denied(&binding.inner.events, &standing);
        denied.remember(name, standing, from);
    }
}

/// The script judging under `policy` in `mode`.
fn script_source(policy: &Policy, mode: Mode) -> String {
    match policy.algorithm() {
        Algorithm::SlidingLog if mode == Mode::Settle => log_script::settle_source(policy),
        Algorithm::SlidingLog if mode == Mode::RecordCost => log_script::cost_source(policy),
        Algorithm::SlidingLog => log_script::source(policy, mode.records()),
        Algorithm::SlidingCounter | Algorithm::FixedWindow => window_script::source(policy, mode),
    }
}

fn error(context: String, source: redis::RedisError) -> StoreError {
    StoreError::new(context, Some(Box::new(source)))
}

impl<K: Display> Store<K> for RedisStore {
    type Binding = RedisBinding;
    type Future = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>;

    fn bind(&self, policy: &Policy) -> RedisBinding {
        self.bound.get_or_make(policy, || RedisBinding::new(policy))
    }

    fn decide_bound(&self, key: K, binding: &RedisBinding) -> Self::Future {
        self.call(&key, binding, Mode::Record, 1)
    }

    fn decide_cost_bound(&self, key: K, binding: &RedisBinding, cost: u32) -> Self::Future {
        let policy = &binding.inner.policy;
        let limits = policy.limits();
        match cost {
            1 => self.call(&key, binding, Mode::Record, 1),
            0 => {
                let peek = self.call(&key, binding, Mode::Peek, 1);
                Box::pin(async move { Ok(peek.await?.costing_nothing()) })
            }
            _ if limits.iter().any(|limit| cost > limit.max()) => {
                let refusal = Decision::too_costly(limits, cost, self.local_now());
                Box::pin(std::future::ready(Ok(refusal)))
            }
            _ => self.call(&key, binding, Mode::RecordCost, cost),
        }
    }

    fn settle_bound(
        &self,
        key: K,
        binding: &RedisBinding,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Self::Future {
        let admitted = *admitted;
        if !admitted.counts() || cost == used {
            return Box::pin(std::future::ready(Ok(admitted)));
        }
        let name = keys::key_name(&self.prefix, &key, &binding.inner.suffix);
        // A refusal remembered for the key no longer says when it could
        // pass: sooner if quota came back, later if more was charged. It
        // is forgotten again once the script has run, in case a refusal
        // judged meanwhile was remembered.
        if let Some(denied) = &self.denied {
            denied.forget(&name);
        }
        let store = self.clone();
        let binding = binding.clone();
        Box::pin(async move {
            let mut invocation = binding.script(Mode::Settle).key(&name);
            invocation.arg(admitted.at_micros).arg(cost).arg(used);
            if let Some(clock) = &store.clock {
                invocation.arg(clock());
            }
            let settled = store
                .within_timeout(async {
                    let reply = store.invoke(&invocation).await;
                    reply.map_err(|e| error("Redis settle script failed".into(), e))
                })
                .await;
            if let Some(denied) = &store.denied {
                denied.forget(&name);
            }
            settled.map(|_| admitted.settled(cost, used))
        })
    }

    fn peek_bound(&self, key: K, binding: &RedisBinding) -> Self::Future {
        self.call(&key, binding, Mode::Peek, 1)
    }
}

impl RedisStore {
    fn call<K: Display>(
        &self,
        key: &K,
        binding: &RedisBinding,
        mode: Mode,
        cost: u32,
    ) -> Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>> {
        let name = keys::key_name(&self.prefix, key, &binding.inner.suffix);
        let sent = self.local_now();
        let record = mode.records();
        if let Some(denied) = &self.denied {
            if let Some(decision) = denied.refusal(&name, sent, cost) {
                crate::observe::denied_locally(&binding.inner.events);
                return Box::pin(std::future::ready(Ok(decision)));
            }
        }
        let store = self.clone();
        let binding = binding.clone();
        Box::pin(async move {
            let outcome = store
                .within_timeout(store.judge(&name, &binding, mode, cost))
                .await;
            match outcome {
                Ok(decision) => {
                    if !decision.is_allowed() {
                        store.remember(name, decision, sent, &binding, record, cost);
                    }
                    Ok(decision)
                }
                Err(err) => store.on_failure(name, &binding.inner.policy, err, record),
            }
        })
    }

    /// `call`'s outcome, or an error once the store's timeout has passed.
    async fn within_timeout<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::new(
                    format!("Redis did not answer within {:?}", self.timeout),
                    None,
                ))
            })
    }
}
