//! The in-flight slots a remote store holds, kept renewed while their
//! requests run, so that only a crashed instance's slots lapse; and the
//! guard that releases a slot whose taking went unseen. `CasStore` and the
//! Redis store share both.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

/// How a store renews the slots it holds.
pub(crate) trait Renew: Send + Sync + 'static {
    /// Where a slot is held: what its renewal needs.
    type Place;

    /// Renews each slot in `held`, by lease id, to last a lease from now.
    fn renew(&self, held: Vec<(u64, Self::Place)>) -> impl Future<Output = ()> + Send;
}

/// The slots one store (and its clones) holds, by lease id, at places `P`
/// that `R` renews.
pub(crate) struct LeaseBook<R, P> {
    renewer: R,
    /// A third of a lease: a slot is renewed twice before it could lapse.
    every: Duration,
    held: Mutex<HashMap<u64, P>>,
    /// Whether the renewal task runs.
    renewing: AtomicBool,
}

impl<P: Clone + Send + 'static, R: Renew<Place = P>> LeaseBook<R, P> {
    pub(crate) fn new(renewer: R, lease: Duration) -> Arc<Self> {
        Arc::new(Self {
            renewer,
            every: lease / 3,
            held: Mutex::default(),
            renewing: AtomicBool::new(false),
        })
    }

    /// Keeps the slot `id` held at `place` renewed until it is released,
    /// from a task on the tokio runtime that runs while the book lives.
    pub(crate) fn hold(self: &Arc<Self>, id: u64, place: P) {
        self.held.lock().insert(id, place);
        if self.renewing.swap(true, Ordering::Relaxed) {
            return;
        }
        // Made before the task, so that a task dropped unpolled (its
        // runtime shut down) still lets the next slot start another.
        let running = Running(Arc::downgrade(self));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(keep_renewed(running));
        }
    }

    /// Stops renewing the slot `id`.
    pub(crate) fn release(&self, id: u64) {
        self.held.lock().remove(&id);
    }
}

/// Renews every slot held, every third of a lease, until the book is
/// dropped. A task dropped with its runtime lets the next slot held start
/// another.
async fn keep_renewed<P: Clone + Send + 'static, R: Renew<Place = P>>(running: Running<R, P>) {
    loop {
        let Some(every) = running.0.upgrade().map(|book| book.every) else {
            return;
        };
        tokio::time::sleep(every).await;
        let Some(book) = running.0.upgrade() else {
            return;
        };
        let held: Vec<_> = book
            .held
            .lock()
            .iter()
            .map(|(&id, place)| (id, place.clone()))
            .collect();
        if !held.is_empty() {
            book.renewer.renew(held).await;
        }
    }
}

/// The renewal task's mark on its book, taken off when the task ends.
struct Running<R, P>(Weak<LeaseBook<R, P>>);

impl<R, P> Drop for Running<R, P> {
    fn drop(&mut self) {
        if let Some(book) = self.0.upgrade() {
            book.renewing.store(false, Ordering::Relaxed);
        }
    }
}

/// A slot taken by a call whose outcome is not yet seen: released by
/// `release` unless [`seen`](Unseen::seen) first, so that a call that
/// fails, is dropped or answers nonsense gives its slot back.
pub(crate) struct Unseen<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Unseen<F> {
    /// A slot taken, if `release` is some.
    pub(crate) fn new(release: Option<F>) -> Self {
        Self(release)
    }

    /// The call's outcome was read: the slot stays held.
    pub(crate) fn seen(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for Unseen<F> {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            release();
        }
    }
}
