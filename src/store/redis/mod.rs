//! The Redis store: one server-side script call per decision, shared by
//! every instance of a service, on a single node or a Redis Cluster.
//!
//! This file holds the store and its settings. The rest, by
//! responsibility:
//! * the client: `client` (the connection, each node's pending calls, when
//!   a node is down), `connect`, `errors` (what kind a failure is), `outage`,
//!   `hash_slots` (a Cluster's hash-slot map);
//! * the judge: `call` (one decision), `scripts` (the Lua scripts and
//!   their arguments), `reply` (their replies read into decisions), `keys`
//!   (the key names), `state` (a key's stored state read back);
//! * the guard: `guard` (the failure policy, the fallback), `deny_cache`
//!   (refusals answered locally);
//! * the fleet: `fleet` (the heartbeat, the live instances, the probe);
//! * local quota: `quota` (the chunks a store holds), `quota_chunk` (one
//!   key's chunk);
//! * the in-flight slots: `leases` (their renewal, by the lease book the
//!   store shares with `CasStore`).

mod call;
mod client;
mod connect;
mod deny_cache;
mod errors;
mod fleet;
mod guard;
mod hash_slots;
mod keys;
mod leases;
mod outage;
mod quota;
mod quota_chunk;
mod reply;
mod scripts;
mod state;

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

pub use self::call::RedisBinding;
use self::client::{Client, ClientClock, Connection, Opener};
#[cfg(feature = "redis-tls")]
pub use self::connect::RedisTls;
use self::fleet::Fleet;
pub use self::guard::FailurePolicy;
use self::guard::Guard;
use self::leases::Renewal;
use self::quota::QuotaBook;
use crate::clock::{micros, Clock};
use crate::policy::Policy;
use crate::state::KeyState;
use crate::store::lease_book::LeaseBook;
use crate::store::StoreError;

/// State kept in Redis, so that every instance of a service shares one limit.
///
/// * **One round trip per decision.** All limits of a policy are judged and
///   recorded all-or-nothing by one script, called by its SHA (reloaded
///   transparently after a restart, failover or `SCRIPT FLUSH`). The
///   scripts are three fixed Lua files, the same for every policy: each
///   call passes the policy's limits as arguments, so Redis's script cache
///   holds those three whether the service has one policy or a limit per
///   tenant, and the store keeps nothing per policy.
///   [`script_sources`](RedisStore::script_sources) shows their text; each
///   documents its keys, arguments and reply, to run it with
///   `redis-cli --eval`.
/// * **Server time.** By default the script reads Redis `TIME`, so
///   application servers with skewed clocks agree, and fixed windows are
///   aligned to the Unix epoch. Each key remembers when it last counted a
///   request (the counters the start of that window, the log its newest
///   stamp) and is never judged earlier, so a server clock that steps
///   back (a failover to a node whose clock is behind) cannot admit extra
///   requests; Redis's own
///   expiry steps back with it. The token bucket needs no such rule: its
///   arrival times never move back as it judges, so an earlier time only judges more
///   strictly. [`with_clock`](RedisStore::with_clock)
///   supplies the time from the client instead (a
///   [`ManualClock`](crate::ManualClock) in tests); such a clock must not
///   step back by more than the longest window (the bucket's clock, by
///   more than 5 s), since keys expire on Redis's time and their TTL is
///   renewed only when the state's span moves on (docs/design.md, "TTLs").
/// * **One format per algorithm.** The log keeps its 8-byte timestamps
///   (at most as many as the largest limit) in one string, oldest first,
///   past 128 of them in a ring behind an 8-byte head, of which a call
///   reads and writes only what it needs; the
///   counter a record of 16 bytes a limit (the window index and two
///   counts), the fixed window one of 12 (the window index and its count)
///   and the token bucket one of 12 (its arrival time). docs/design.md has the layouts, and
///   [`state`](RedisStore::state) reads a key back as the [`KeyState`](crate::KeyState)
///   the scripts judge by. Every key expires once it has been idle long
///   enough to no longer matter.
/// * **Keys** are `prefix:{user key}:v5:name/signature`: the user's key is a
///   hash tag, escaped so that `{`, `}`, `%` and control bytes can neither
///   move it to another slot nor make two keys collide, and named by its
///   SHA-256 past 256 bytes (see [`key_name`](RedisStore::key_name)). `v5` names the
///   stored format, so that a deploy that changes it never reads a key an
///   older release wrote. Windows are identified by the policy's value
///   ([name](Policy::named), algorithm and limits), the same in every
///   process: that is how instances share them, as the [`Store`](super::Store)
///   rule asks. The signature spells the limits (and a penalty, and a
///   log's widening under local quota), so the arguments a script is
///   called with follow from the key's name.
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
///   by a [`FailurePolicy`] (fail open by default). Under
///   [`Fallback`](FailurePolicy::Fallback) a local memory store judges each
///   request at its cost; what it admits is not counted in Redis, and not
///   settled.
/// * **A saturated Redis is no outage.** At most
///   [`PENDING_CALLS_PER_NODE`](RedisStore::PENDING_CALLS_PER_NODE) calls
///   of a store wait on one node at once; a call past that waits for a
///   place within its timeout. A call that times out is answered by the
///   failure policy alone, and keeps its place until Redis has replied to
///   it, so a burst queues in the store rather than in Redis. A node is
///   taken for down only on evidence: a refused or dropped connection, or a
///   call that waited the longer of the timeout and the heartbeat with no
///   reply from that node to any call. Its keys are then answered by the
///   failure policy at once, without waiting, until a probe finds it.
/// * **A heartbeat.** From the moment it is built (or its first call, if
///   built outside a tokio runtime) the store runs a task on the runtime
///   that keeps its entry in the set `prefix:instances` once per
///   [heartbeat](RedisStore::with_heartbeat) and probes Redis; on a
///   Cluster it also reads `CLUSTER SLOTS` and sends `PING`. A user
///   restricted by ACLs needs those commands and that key, or outages are
///   decided for the whole Cluster. A store that connected from a URL
///   opens a new connection with its credentials at a probe that is
///   refused them (a password rotated and put back) or that finds a single
///   server down, so it recovers from either without a restart.
///
/// Supports 64-bit Redis 6 and later (tested on 7.0), standalone or cluster:
/// the bucket's times are printed through a C `long`.
#[derive(Clone)]
pub struct RedisStore {
    client: Arc<Client>,
    settings: Settings,
    /// What answers when Redis does not judge: the deny cache, the
    /// failure policy.
    guard: Arc<Guard>,
    /// The instances sharing the prefix, as this one last saw them.
    fleet: Arc<Fleet>,
    /// The in-flight slots this instance holds, renewed while their
    /// requests run.
    leases: Arc<LeaseBook<Renewal, Arc<str>>>,
    /// The chunks of local quota this instance holds, under
    /// [`with_local_quota`](Self::with_local_quota).
    quota: Option<Arc<QuotaBook>>,
}

/// What the builders set.
#[derive(Clone)]
struct Settings {
    prefix: Arc<str>,
    clock: Option<ClientClock>,
    timeout: Duration,
    failure: FailurePolicy,
    deny_cache: usize,
    heartbeat: Duration,
    lease: Duration,
    expected_instances: usize,
    local_quota: Option<Duration>,
}

impl Settings {
    /// How long a node may leave a call with no reply at all, to it or any
    /// other, before it is taken for down: a heartbeat would have found it
    /// by then.
    fn silence(&self) -> Duration {
        self.timeout.max(self.heartbeat)
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let settings = &self.settings;
        f.debug_struct("RedisStore")
            .field("cluster", &self.client.is_cluster())
            .field("prefix", &settings.prefix)
            .field("client_clock", &settings.clock.is_some())
            .field("timeout", &settings.timeout)
            .field("failure", &settings.failure)
            .field("heartbeat", &settings.heartbeat)
            .field("lease", &settings.lease)
            .field("live_instances", &self.live_instances())
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
    /// How often an instance refreshes its entry among the live instances
    /// (and, during an outage, probes Redis) by default.
    pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
    /// How long an in-flight slot lasts by default unless released or
    /// renewed.
    pub const DEFAULT_LEASE: Duration = crate::state::DEFAULT_LEASE;

    /// The most calls a store (and its clones) has waiting on one Redis
    /// node at once. A call beyond it waits for one to end, within its
    /// timeout; a call that timed out holds its place until Redis replies.
    pub const PENDING_CALLS_PER_NODE: usize = client::PENDING_CALLS_PER_NODE;

    /// Connects to one Redis server, e.g. `redis://127.0.0.1:6379`, or
    /// `rediss://user:password@host:6380` over TLS (feature `redis-tls`).
    ///
    /// It sends `PING` before returning, so a store is only handed out
    /// once the server answers it: a missing or wrong password, an
    /// untrusted certificate or an unreachable server fails here, not as
    /// silent failures on every request later. The connection reconnects
    /// by itself after failures.
    ///
    /// # Errors
    ///
    /// [`StoreError`], whose [`kind`](StoreError::kind) tells
    /// [`Config`](crate::StoreErrorKind::Config) (a bad URL),
    /// [`Connection`](crate::StoreErrorKind::Connection) or
    /// [`Timeout`](crate::StoreErrorKind::Timeout) (no server answers),
    /// [`Tls`](crate::StoreErrorKind::Tls) (the handshake failed) and
    /// [`Authentication`](crate::StoreErrorKind::Authentication) (a missing or
    /// wrong password) apart.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let (connection, opener) = connect::single(connect::plain(url)?, url).await?;
        Ok(Self::build(connection, Some(opener)))
    }

    /// [`connect`](RedisStore::connect) with the certificates in `tls`, to
    /// a `rediss://` URL.
    ///
    /// # Errors
    ///
    /// As [`connect`](RedisStore::connect); a URL that is not `rediss://`,
    /// or PEM that holds no usable certificate or key, is a
    /// [`Config`](crate::StoreErrorKind::Config) error.
    #[cfg(feature = "redis-tls")]
    pub async fn connect_tls(url: &str, tls: RedisTls) -> Result<Self, StoreError> {
        let (connection, opener) = connect::single(connect::with_tls(url, tls)?, url).await?;
        Ok(Self::build(connection, Some(opener)))
    }

    /// Connects to a Redis Cluster through any of its nodes (`redis://` or,
    /// with feature `redis-tls`, `rediss://`), checking each one it is
    /// given with `PING` before returning.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if a URL is invalid or the cluster does not answer,
    /// with the kinds [`connect`](RedisStore::connect) gives.
    pub async fn connect_cluster(urls: &[&str]) -> Result<Self, StoreError> {
        let builder = ClusterClient::builder(urls.iter().copied());
        let (connection, opener) = connect::cluster(urls, builder).await?;
        Ok(Self::build(connection, Some(opener)))
    }

    /// [`connect_cluster`](RedisStore::connect_cluster) over TLS with the
    /// certificates in `tls`. The nodes a cluster announces are verified
    /// under the names (or addresses) it announces them by.
    ///
    /// # Errors
    ///
    /// As [`connect_cluster`](RedisStore::connect_cluster).
    #[cfg(feature = "redis-tls")]
    pub async fn connect_cluster_tls(urls: &[&str], tls: RedisTls) -> Result<Self, StoreError> {
        let builder = connect::cluster_tls(ClusterClient::builder(urls.iter().copied()), tls)?;
        let (connection, opener) = connect::cluster(urls, builder).await?;
        Ok(Self::build(connection, Some(opener)))
    }

    /// A store over an existing single-node connection.
    pub fn from_connection_manager(manager: ConnectionManager) -> Self {
        Self::build(Connection::Single(manager), None)
    }

    /// A store over an existing cluster connection.
    pub fn from_cluster_connection(connection: ClusterConnection) -> Self {
        Self::build(Connection::Cluster(connection), None)
    }

    /// The store with its defaults.
    fn build(connection: Connection, opener: Option<Opener>) -> Self {
        let settings = Settings {
            prefix: Arc::from(Self::DEFAULT_PREFIX),
            clock: None,
            timeout: Self::DEFAULT_TIMEOUT,
            failure: FailurePolicy::default(),
            deny_cache: Self::DEFAULT_DENY_CACHE,
            heartbeat: Self::DEFAULT_HEARTBEAT,
            lease: Self::DEFAULT_LEASE,
            expected_instances: 1,
            local_quota: None,
        };
        Self::start(Arc::new(Client::new(connection, opener)), settings, None)
    }

    /// A store on `client` with what it runs made for `settings`: its
    /// guard and lease book afresh, and its fleet too unless `fleet` (the
    /// one it had) beats as `settings` ask. A new fleet joins at once if
    /// made in a tokio runtime, else at the store's first call.
    fn start(client: Arc<Client>, settings: Settings, fleet: Option<Arc<Fleet>>) -> Self {
        // Under local quota, other instances give quota back: a refusal
        // may pass sooner than its wait, but no later than a horizon.
        let longest_refusal = settings.local_quota.map_or(u64::MAX, micros);
        let guard = Arc::new(Guard::new(
            settings.failure,
            settings.clock.clone(),
            settings.deny_cache,
            longest_refusal,
        ));
        let fleet = fleet.unwrap_or_else(|| {
            let fleet = Fleet::new(Arc::clone(&client), &settings.prefix, settings.heartbeat);
            fleet.join();
            fleet
        });
        let renewal = Renewal {
            client: Arc::clone(&client),
            lease: settings.lease,
            clock: settings.clock.clone(),
            // A round of renewals ends before the next is due.
            timeout: settings.silence().min(settings.lease / 3),
        };
        let leases = LeaseBook::new(renewal, settings.lease);
        let horizon = settings.local_quota;
        let mut store = Self {
            client,
            settings,
            guard,
            fleet,
            leases,
            quota: None,
        };
        if let Some(horizon) = horizon {
            store.quota = Some(QuotaBook::start(store.clone(), horizon));
        }
        store
    }

    /// The store with `change` made to its settings: a new one around the
    /// same connection, and the same fleet if it beats as before, so that
    /// a store set up by a chain of builders counts once. Configure before
    /// cloning.
    fn with(self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.settings.clone();
        change(&mut settings);
        let old = &self.settings;
        let same_fleet = settings.prefix == old.prefix && settings.heartbeat == old.heartbeat;
        Self::start(self.client, settings, same_fleet.then_some(self.fleet))
    }

    /// Names every key `prefix:{…}:…` (default `tsw`).
    pub fn with_prefix(self, prefix: &str) -> Self {
        self.with(|settings| settings.prefix = Arc::from(keys::escape(prefix)))
    }

    /// Reads time from `clock` on the client instead of Redis `TIME`.
    ///
    /// Every instance sharing the keys must then share the clock's zero; this
    /// is meant for tests with a [`ManualClock`](crate::ManualClock).
    pub fn with_clock<C: Clock>(self, clock: C) -> Self {
        self.with(|settings| settings.clock = Some(Arc::new(move || clock.now_micros())))
    }

    /// Remembers up to `keys` refused keys and answers them locally until
    /// their wait is up (default [`DEFAULT_DENY_CACHE`](Self::DEFAULT_DENY_CACHE));
    /// `0` turns the cache off, so that every decision is a call to Redis.
    ///
    /// Each key held costs its name and about a hundred bytes.
    pub fn with_deny_cache(self, keys: usize) -> Self {
        self.with(|settings| settings.deny_cache = keys)
    }

    /// How many keys the deny cache holds now (refusals that have run out
    /// included, until they are looked up or swept).
    pub fn denied_keys(&self) -> usize {
        self.guard.denied_keys()
    }

    /// How long one decision may take, waiting for a place among the
    /// node's pending calls included, before the failure policy answers
    /// instead (default 50 ms). It bounds every call, however long: the
    /// connection has no timeout of its own.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        self.with(|settings| settings.timeout = timeout)
    }

    /// What to do when Redis fails or is too slow (default
    /// [`FailurePolicy::FailOpen`]).
    pub fn with_failure_policy(self, failure: FailurePolicy) -> Self {
        self.with(|settings| settings.failure = failure)
    }

    /// Refreshes this instance's entry among the prefix's live instances
    /// every `interval` (default [`DEFAULT_HEARTBEAT`](Self::DEFAULT_HEARTBEAT)),
    /// from a task on the tokio runtime started when the store is built.
    /// An entry lives three intervals, so an instance that dies without
    /// leaving drops out of the others' count within four. During an
    /// outage the same task probes Redis once per interval, and decisions
    /// go back to Redis at the first probe that succeeds.
    ///
    /// # Panics
    ///
    /// If `interval` is shorter than a millisecond.
    pub fn with_heartbeat(self, interval: Duration) -> Self {
        assert!(
            interval >= Duration::from_millis(1),
            "RedisStore::with_heartbeat: the interval must be at least 1 ms, got {interval:?}"
        );
        self.with(|settings| settings.heartbeat = interval)
    }

    /// How long an in-flight slot lasts (default
    /// [`DEFAULT_LEASE`](Self::DEFAULT_LEASE), 30 s) if the instance that
    /// holds it dies without releasing it: a crashed instance's slots come
    /// back within one lease. While its request runs, a task on the tokio
    /// runtime renews each slot every third of a lease, in one call for all the
    /// slots this instance holds (one per hash slot on a Cluster, up to 256
    /// keys a call): keep a lease well above the store's timeout. A lease
    /// is counted in microseconds on the store's clock.
    ///
    /// # Panics
    ///
    /// If `lease` is shorter than 30 ms, too short to renew in time.
    pub fn with_lease(self, lease: Duration) -> Self {
        assert!(
            lease >= Duration::from_millis(30),
            "RedisStore::with_lease: a lease must be at least 30 ms, got {lease:?}"
        );
        self.with(|settings| settings.lease = lease)
    }

    /// How many instances to assume [live](Self::live_instances), 1 by
    /// default, until the heartbeats count as many or have counted three
    /// times: the fleet's size for an instance that starts during an
    /// outage.
    pub fn with_expected_instances(mut self, instances: usize) -> Self {
        self.settings.expected_instances = instances.max(1);
        self
    }

    /// Takes quota from Redis in chunks, one script call a chunk, and
    /// admits from the chunk in the instance until it is spent: a hot key
    /// costs Redis one call per chunk, not one per request. Off by default.
    /// Give every instance sharing the prefix the same horizon.
    ///
    /// * **Exact.** Redis judges and records a chunk as one request of its
    ///   size, at the instant it grants it, in every limit at once. The
    ///   instance spends it only before the earliest of those windows ends
    ///   (the bucket and the log: within one `horizon`), timed from when it
    ///   asked, so the fleet never admits more than the limits, on the
    ///   times requests are admitted (docs/design.md, "Local quota"; the
    ///   instance's clock and Redis's must run at the same rate).
    /// * **The horizon.** A chunk is the key's recent local rate times
    ///   `horizon`, capped by what Redis last said remains, divided by
    ///   twice the [live instances](Self::live_instances). Near the limit
    ///   that is one request, and Redis judges each alone, as without local
    ///   quota. The horizon is also how often unspent chunks are looked
    ///   for, the longest a refusal is remembered, and the bucket's and the
    ///   log's hold: keep it well below the shortest window.
    /// * **Given back.** Units not spent go back at the next sweep if the
    ///   key has had no local demand for a horizon or, for the windows,
    ///   the chunk's window ends within one; and when the last clone is
    ///   dropped inside a tokio runtime. The bucket's are never given back
    ///   (they refill). An instance that dies gives nothing back: its
    ///   chunks count as spent until their windows end.
    /// * **Settling** a request admitted from a chunk gives its unused
    ///   units back to the chunk, or takes an excess from it, with no call.
    /// * **Refusals** are remembered for at most a horizon, since quota
    ///   given back may make room sooner than Redis's wait says; near the
    ///   limit, those of requests of any cost.
    /// * **Which policies.** Any with no penalty and no in-flight cap;
    ///   others, requests of no cost and peeks go to Redis one by one. The
    ///   bucket charges a chunk as if spent at the end of its horizon. The
    ///   log judges every window a horizon longer: a stamp blocks for a
    ///   window and a horizon. Their keys take a name of their own (`;h`
    ///   and the horizon after the signature), so that stores with another
    ///   horizon, or none, count apart: turning local quota on starts them
    ///   empty.
    /// * **What a decision reports.** A decision from a chunk reports
    ///   Redis's remaining quota once the whole chunk was counted, the same
    ///   until the next chunk: never more than is left. For the bucket the
    ///   chunk counts as spent at the end of its horizon, so it may read 0
    ///   while requests are admitted; for the log, times to wait are those
    ///   of the widened windows.
    /// * **Outages.** Chunks already held are spent until their lifetime
    ///   is over. Then Redis judges each request, and the failure policy
    ///   answers those it does not; units that cannot be given back count
    ///   as spent until their window ends.
    ///
    /// # Panics
    ///
    /// If `horizon` is shorter than a millisecond.
    pub fn with_local_quota(self, horizon: Duration) -> Self {
        assert!(
            horizon >= Duration::from_millis(1),
            "RedisStore::with_local_quota: the horizon must be at least 1 ms, got {horizon:?}"
        );
        self.with(|settings| settings.local_quota = Some(horizon))
    }

    /// How many instances shared this store's prefix at the last
    /// heartbeat, this one included: a store and its clones are one
    /// instance, and it joins when it is built. Until the heartbeats count
    /// the [expected](Self::with_expected_instances) number (1 by default),
    /// or have counted three times, it is that number.
    /// [`Fallback`](FailurePolicy::Fallback) divides every limit by it.
    pub fn live_instances(&self) -> usize {
        self.fleet.live_or(self.settings.expected_instances)
    }

    /// The Redis key holding `key`'s state under `policy`: `key` escaped
    /// inside a hash tag, or `sha256:` and its digest when the escaped key
    /// is longer than 256 bytes (see [`bound_key`](crate::bound_key)), so a
    /// client-chosen key never makes a long name.
    pub fn key_name(&self, key: &impl Display, policy: &Policy) -> String {
        let signature = keys::signature(policy, self.hold(policy));
        let suffix = keys::suffix(policy.name(), &signature);
        keys::key_name(&self.settings.prefix, key, &suffix)
    }

    /// The hold a bucket's or a log's chunks are spent over under local
    /// quota (µs), part of its keys' names; 0 for any other policy.
    fn hold(&self, policy: &Policy) -> u64 {
        self.quota.as_ref().map_or(0, |book| book.hold(policy))
    }

    /// The Lua scripts this store runs in Redis, by file name, to read
    /// what runs on the server (or to measure it). The same three judge
    /// every policy, each starting with `lease.lua` (the time and the
    /// in-flight cap) and `state.lua` (the arguments and the key's
    /// penalty) and ending with `tail.lua` (the state written, the
    /// reply): each call passes the limits as arguments, and each file's
    /// header says which. The fourth is the heartbeat, the fifth
    /// (also after `lease.lua`) renews in-flight slots.
    pub fn script_sources() -> [(&'static str, &'static str); 5] {
        scripts::SOURCES
    }

    /// What Redis holds for `key` under `policy`, as the [`KeyState`] the
    /// scripts judge it by: its counts, stamps or arrival times, the end of
    /// any penalty and, under a cap, the slots in flight. `None` for a key
    /// Redis does not hold, or holds something the scripts would read as a
    /// fresh key. One or two round trips, with no timeout and no failure
    /// policy: for reading, not deciding.
    ///
    /// ```no_run
    /// # async fn run(store: tower_sliding_window::RedisStore, policy: tower_sliding_window::Policy) -> Result<(), Box<dyn std::error::Error>> {
    /// if let Some(state) = store.state(&"203.0.113.7", &policy).await? {
    ///     println!("{state:?}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError`] if Redis does not answer.
    pub async fn state(
        &self,
        key: &impl Display,
        policy: &Policy,
    ) -> Result<Option<KeyState>, StoreError> {
        state::read(
            &self.client.connection(),
            &self.key_name(key, policy),
            policy,
        )
        .await
    }
}
