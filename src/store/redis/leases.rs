//! The renewal of the in-flight slots this store holds: each slot is a
//! lease id in its key's set (`…:leases`), renewed every third of a lease
//! by the lease book, in one call per node on a single server (up to
//! [`RENEWED_PER_CALL`] keys), one per hash slot on a Cluster, where a
//! script runs within one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::client::{within, Client, ClientClock, Watch};
use super::{hash_slots, scripts};
use crate::store::lease_book::Renew;

/// The most keys one renewal call renews: a script blocks Redis while it
/// runs.
const RENEWED_PER_CALL: usize = 256;

/// A set of slots, and the ids this instance holds in it.
type KeySlots = (Arc<str>, Vec<u64>);

/// What the renewal calls need.
pub(super) struct Renewal {
    pub(super) client: Arc<Client>,
    pub(super) lease: Duration,
    pub(super) clock: Option<ClientClock>,
    pub(super) timeout: Duration,
}

impl Renew for Renewal {
    /// The key of the set the slot is in.
    type Place = Arc<str>;

    async fn renew(&self, held: Vec<(u64, Arc<str>)>) {
        let mut by_key: HashMap<Arc<str>, Vec<u64>> = HashMap::new();
        for (id, leases) in held {
            by_key.entry(leases).or_default().push(id);
        }
        let cluster = self.client.is_cluster();
        let mut by_hash_slot: HashMap<u16, Vec<KeySlots>> = HashMap::new();
        for (leases, ids) in by_key {
            let slot = if cluster {
                hash_slots::hash_slot(leases.as_bytes())
            } else {
                0
            };
            by_hash_slot.entry(slot).or_default().push((leases, ids));
        }
        let lease = crate::clock::micros(self.lease);
        let now = self.clock.as_ref().map(|clock| clock());
        let mut calls = tokio::task::JoinSet::new();
        for held in by_hash_slot
            .values()
            .flat_map(|keys| keys.chunks(RENEWED_PER_CALL))
        {
            let call = scripts::renewal(held, lease, now);
            let connection = self.client.connection();
            let watch = Watch::new(&self.client, &held[0].0);
            let timeout = self.timeout;
            calls.spawn(async move {
                let renewed = connection.invoke::<i64>(&call, "renewal");
                watch.note(within(timeout, renewed).await)
            });
        }
        while let Some(done) = calls.join_next().await {
            if let Ok(Err(err)) = done {
                crate::observe::slot_call_failed(&err);
            }
        }
    }
}
