//! One decision: the key's name, the deny cache, the script call bounded
//! by the store's timeout, its reply read into a decision, and the failure
//! policy when Redis does not answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use super::client::{within, Orphaned, Watch};
use super::scripts::{self, Ask};
use super::{keys, reply, RedisStore};
use crate::algorithm::leases::fresh_id;
use crate::algorithm::{Algorithm, Decision, Origin};
use crate::clock::micros;
use crate::observe::DenyCacheEvents;
use crate::policy::{Policy, Weighed};
use crate::store::lease_book::Unseen;
use crate::store::{Store, StoreError};

/// A policy bound to a [`RedisStore`]: the policy and the end of its keys'
/// names (see [`Store::bind`]). Binding is cheap, and the store keeps
/// nothing per policy: the scripts are the same for every policy, and a
/// call passes them the limits.
#[derive(Clone)]
pub struct RedisBinding {
    inner: Arc<Bound>,
}

struct Bound {
    policy: Policy,
    /// The hold a bucket's or a log's chunks are spent over under local
    /// quota (µs; 0 for any other policy, or without local quota).
    hold: u64,
    /// The key name's part after the user's key.
    suffix: String,
    /// Made the first time the deny cache remembers or answers a refusal.
    events: OnceLock<DenyCacheEvents>,
}

impl std::fmt::Debug for RedisBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBinding")
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl RedisBinding {
    fn new(policy: &Policy, hold: u64) -> Self {
        Self {
            inner: Arc::new(Bound {
                policy: policy.clone(),
                hold,
                suffix: keys::suffix(policy.name(), &keys::signature(policy, hold)),
                events: OnceLock::new(),
            }),
        }
    }

    pub(super) fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// What a call passes as its hold: a bucket chunk's own (a request
    /// alone holds nothing), or the log's, which widens every call on its
    /// keys alike.
    fn hold(&self, ask: Ask) -> u64 {
        match self.inner.policy.algorithm() {
            Algorithm::SlidingLog => self.inner.hold,
            _ => ask.hold(),
        }
    }

    pub(super) fn events(&self) -> &DenyCacheEvents {
        self.inner
            .events
            .get_or_init(|| DenyCacheEvents::new(&self.inner.policy))
    }
}

pub(super) type Pending = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>;

impl<K: std::fmt::Display> Store<K> for RedisStore {
    type Binding = RedisBinding;
    type Future = Pending;

    fn bind(&self, policy: &Policy) -> RedisBinding {
        RedisBinding::new(policy, self.hold(policy))
    }

    fn decide_cost_bound(&self, key: K, binding: &RedisBinding, cost: u32) -> Self::Future {
        let policy = binding.policy();
        match policy.weigh(cost) {
            Weighed::Judged => match &self.quota {
                Some(book) if book.spends(policy) => {
                    let name = self.name(&key, binding);
                    Box::pin(Arc::clone(book).spend(name, binding.clone(), cost))
                }
                _ => self.call(&key, binding, Ask::Record(cost)),
            },
            Weighed::Peek if policy.in_flight().is_some() => self.call(&key, binding, Ask::Free),
            Weighed::Peek => {
                let peek = self.call(&key, binding, Ask::Peek);
                Box::pin(async move { Ok(peek.await?.costing_nothing()) })
            }
            Weighed::TooCostly => {
                let refusal = Decision::too_costly(policy.limits(), cost, self.guard.now());
                Box::pin(std::future::ready(Ok(refusal)))
            }
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
        if !admitted.needs_settling(cost, used) {
            return Box::pin(std::future::ready(Ok(admitted)));
        }
        let name = self.name(&key, binding);
        let (store, binding) = (self.clone(), binding.clone());
        Box::pin(async move {
            let policy = binding.policy();
            if let Some(book) = store.quota.as_ref() {
                if book.settles(&name, &admitted, cost, used).await {
                    return Ok(admitted.settled(cost, used));
                }
                // Under local quota Redis takes back no bucket time, nor a
                // log chunk's stamps, which the decision cannot name.
                if used < cost && !book.gives_back(policy, &admitted) {
                    return Ok(admitted);
                }
            }
            let ask = Ask::Settle {
                at: admitted.at_micros,
                cost,
                units: i64::from(used) - i64::from(cost),
            };
            store.settle_named(name, &binding, ask).await?;
            Ok(admitted.settled(cost, used))
        })
    }

    fn peek_bound(&self, key: K, binding: &RedisBinding) -> Self::Future {
        self.call(&key, binding, Ask::Peek)
    }

    fn holds_slots(&self) -> bool {
        true
    }

    fn release_bound(&self, key: K, binding: &RedisBinding, admitted: &Decision) {
        if !admitted.holds_slot() {
            return;
        }
        let name = self.name(&key, binding);
        if admitted.origin == Origin::Fallback {
            self.guard.release_fallback(name, admitted);
            return;
        }
        self.leases.release(admitted.lease);
        self.send_release(keys::leases_key(&name), admitted.lease);
    }
}

impl RedisStore {
    /// Now on the client's clock, if the store has one: the time passed to
    /// the scripts, which otherwise read Redis `TIME`.
    fn client_now(&self) -> Option<u64> {
        self.settings.clock.as_ref().map(|clock| clock())
    }

    /// The Redis key of `key` under `binding`'s policy.
    fn name<K: std::fmt::Display>(&self, key: &K, binding: &RedisBinding) -> String {
        keys::key_name(&self.settings.prefix, key, &binding.inner.suffix)
    }

    /// `call`'s outcome, to the node holding `name`, within the store's
    /// timeout (see [`Client::reach`](super::client::Client::reach)).
    async fn reach<T: Send + 'static>(
        &self,
        name: &str,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'static,
        orphaned: Option<Orphaned<T>>,
    ) -> Result<T, StoreError> {
        self.fleet.join();
        let (timeout, silence) = (self.settings.timeout, self.settings.silence());
        self.client
            .reach(name, timeout, silence, call, orphaned)
            .await
    }

    fn call<K: std::fmt::Display>(&self, key: &K, binding: &RedisBinding, ask: Ask) -> Pending {
        self.call_named(self.name(key, binding), binding, ask)
    }

    /// A decision on the Redis key `name`: the deny cache's, Redis's, or
    /// the failure policy's.
    pub(super) fn call_named(&self, name: String, binding: &RedisBinding, ask: Ask) -> Pending {
        let sent = self.guard.now();
        if let Some(decision) = self.guard.refusal(&name, sent, ask) {
            crate::observe::denied_locally(binding.events());
            return Box::pin(std::future::ready(Ok(decision)));
        }
        Box::pin(self.clone().ask_redis(name, binding.clone(), ask, sent))
    }

    /// Redis's decision on the key `name`, asked at local time `sent`
    /// without looking in the deny cache (which it fills), or the failure
    /// policy's.
    pub(super) async fn ask_redis(
        self,
        name: String,
        binding: RedisBinding,
        ask: Ask,
        sent: u64,
    ) -> Result<Decision, StoreError> {
        match self.judge(&name, &binding, ask, None).await {
            Ok(decision) => {
                self.guard.outage_ended(self.client.outage.ended());
                if !decision.is_allowed() {
                    let (policy, events) = (binding.policy(), binding.events());
                    self.guard
                        .remember(name, decision, sent, policy, events, ask);
                }
                Ok(decision)
            }
            Err(err) => {
                let (live, outage) = (self.live_instances(), self.client.outage.ended());
                let policy = binding.policy();
                self.guard.on_failure(name, policy, ask, err, live, outage)
            }
        }
    }

    /// Settles `ask` on the Redis key `name` under `binding`'s policy: a
    /// request's units charged or given back, or a chunk's unspent units.
    pub(super) fn settle_named(
        &self,
        name: String,
        binding: &RedisBinding,
        ask: Ask,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        // A refusal remembered for the key no longer says when it could
        // pass: sooner if quota came back, later if more was charged. It
        // is forgotten again once the script has run, in case a refusal
        // judged meanwhile was remembered.
        self.guard.forget(&name);
        let hold = binding.hold(ask);
        let now = self.client_now();
        let invocation = scripts::invocation(binding.policy(), ask, &name, now, None, hold);
        let store = self.clone();
        let connection = self.client.connection();
        async move {
            let call = async move {
                let reply = connection.invoke::<Vec<i64>>(&invocation, "settle script");
                reply.await
            };
            let settled = store.reach(&name, call, None).await;
            store.guard.forget(&name);
            settled.map(drop)
        }
    }

    /// Sends the release of the slot `id` in the set `leases` now, ahead
    /// of this store's later calls, not waiting for its reply nor for a
    /// place among the node's pending calls: a release must not wait
    /// behind the calls it would make room for.
    fn send_release(&self, leases: String, id: u64) {
        let mut release = redis::cmd("ZREM");
        release.arg(&leases).arg(id);
        let connection = self.client.connection();
        let watch = Watch::new(&self.client, &leases);
        let timeout = self.settings.timeout;
        crate::store::send_now(async move {
            let sent = connection.query::<i64>(&release, None, "release");
            if let Err(err) = watch.note(within(timeout, sent).await) {
                crate::observe::slot_call_failed(&err);
            }
        });
    }

    /// Asks Redis to judge a request for the key `name` under `binding`'s
    /// policy (`late` gets the reply if it comes after nobody waits for it),
    /// within the store's timeout but with no failure policy: under a cap,
    /// an admitted request holds a slot this instance renews until it is
    /// released, and one whose reply is never read gives back the slot it
    /// may have taken.
    pub(super) async fn judge(
        &self,
        name: &str,
        binding: &RedisBinding,
        ask: Ask,
        late: Option<Orphaned<Vec<i64>>>,
    ) -> Result<Decision, StoreError> {
        let (policy, hold) = (binding.policy(), binding.hold(ask));
        let lease = policy.in_flight().map(|_| scripts::Lease {
            id: if ask.takes_slot() { fresh_id() } else { 0 },
            length: micros(self.settings.lease),
        });
        let invocation = scripts::invocation(policy, ask, name, self.client_now(), lease, hold);
        let connection = self.client.connection();
        let call = async move { connection.invoke(&invocation, "script").await };
        // A slot the call may have taken is released if its reply is not
        // read: at once when the call fails, times out or makes no sense,
        // and once Redis has replied to a call that timed out (a release
        // sent before a script that ran late frees nothing).
        let taking = lease
            .filter(|lease| lease.id != 0)
            .map(|lease| (keys::leases_key(name), lease.id));
        let orphaned = taking.clone().map(|(leases, id)| {
            let store = self.clone();
            Box::new(move |_| store.send_release(leases, id)) as Orphaned<Vec<i64>>
        });
        let orphaned = orphaned.or(late);
        let unseen = Unseen::new(taking.map(|(leases, id)| move || self.send_release(leases, id)));
        let reply = self.reach(name, call, orphaned).await;
        let mut decision =
            reply.and_then(|reply| reply::decision(policy, &reply, ask.cost(), hold))?;
        unseen.seen();
        if ask == Ask::Free && decision.origin != Origin::InFlight {
            decision = decision.costing_nothing();
        }
        if let Some(lease) = lease.filter(|_| decision.is_allowed() && ask.takes_slot()) {
            self.leases
                .hold(lease.id, Arc::from(keys::leases_key(name)));
            decision = decision.holding(lease.id);
        }
        let penalty = policy.penalty_micros();
        // A refusal by the limits starts the key's penalty: the script
        // started it if the request was to be recorded. A peek is told what
        // such a request would be told, as the memory store and `KeyState`
        // tell it, though it started nothing.
        Ok(
            if penalty > 0 && decision.origin == Origin::Limits && !decision.is_allowed() {
                decision.starting_penalty(penalty)
            } else {
                decision
            },
        )
    }
}
