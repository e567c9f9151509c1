//! Outages: the Redis nodes this instance found unreachable. Calls for
//! their keys are answered by the failure policy at once, not each after
//! its own timeout, until the heartbeat's probe finds the node again.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::Poll;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::store::{StoreError, StoreErrorKind};

/// A Redis node, as the store tells them apart: `host:port` on a Cluster
/// whose slots it knows, else `""` (the single server, or the whole
/// Cluster before its slots are known).
pub(super) type Node = Arc<str>;

/// The node `""`: the single server, or the whole Cluster.
pub(super) fn whole() -> Node {
    static WHOLE: LazyLock<Node> = LazyLock::new(|| Node::from(""));
    Arc::clone(&WHOLE)
}

#[derive(Default)]
pub(super) struct Outage {
    /// The nodes found unreachable, and not answering since.
    down: Mutex<Vec<Node>>,
    /// Whether `down` holds any node: read first by every call, so that a
    /// store whose nodes all answer never reads the list.
    any_down: AtomicBool,
    /// Wakes the calls in flight when a node is found down: they were sent
    /// before anyone knew, and need not wait out their timeout.
    went_down: Notify,
    /// How many outages have ended, every node answering again: the
    /// failure policy's fallback windows last one outage.
    ended: AtomicU64,
}

impl Outage {
    fn any_down(&self) -> bool {
        self.any_down.load(Ordering::Acquire)
    }

    /// Whether `node` is down.
    pub(super) fn is_down(&self, node: &Node) -> bool {
        self.any_down() && self.down.lock().contains(node)
    }

    /// The nodes down now, for the probe.
    pub(super) fn down_nodes(&self) -> Vec<Node> {
        self.down.lock().clone()
    }

    pub(super) fn mark_down(&self, node: Node) {
        let mut down = self.down.lock();
        if !down.contains(&node) {
            crate::observe::node_down(&node);
            down.push(node);
            self.any_down.store(true, Ordering::Release);
            self.went_down.notify_waiters();
        }
    }

    /// `node` answered: its keys go back to Redis, and once no node is
    /// down the outage has ended.
    pub(super) fn answered(&self, node: &Node) {
        if !self.any_down() {
            return;
        }
        let mut down = self.down.lock();
        if let Some(at) = down.iter().position(|n| n == node) {
            crate::observe::node_up(node);
            down.swap_remove(at);
        }
        if down.is_empty() {
            self.any_down.store(false, Ordering::Release);
            self.ended.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The error a call for a key on a node known to be down answers with.
    pub(super) fn error(node: &Node) -> StoreError {
        let node = if node.is_empty() { "Redis" } else { node };
        let message = format!(
            "{node} is unreachable; answering by the failure policy until it answers a probe"
        );
        StoreError::new(message, None).with_kind(StoreErrorKind::Connection)
    }

    /// How many outages have ended.
    pub(super) fn ended(&self) -> u64 {
        self.ended.load(Ordering::Relaxed)
    }

    /// `call`'s outcome, or an error as soon as another call finds `node`
    /// down.
    pub(super) async fn unless_down<T>(
        &self,
        node: &Node,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let mut call = pin!(call);
        let mut down = pin!(self.until_down(node));
        poll_fn(|cx| match call.as_mut().poll(cx) {
            Poll::Ready(outcome) => Poll::Ready(outcome),
            Poll::Pending => down.as_mut().poll(cx).map(|()| Err(Self::error(node))),
        })
        .await
    }

    async fn until_down(&self, node: &Node) {
        loop {
            // Taken before looking, so that a node marked in between
            // still wakes it.
            let marked = self.went_down.notified();
            if self.is_down(node) {
                return;
            }
            marked.await;
        }
    }
}
