//! Waiting for a turn: a store's decision that, under
//! [`wait_up_to`](crate::SlidingWindowLayer::wait_up_to), sleeps through a
//! refusal a short wait cures and asks again.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{sleep_until, Instant, Sleep};

use crate::algorithm::{leases, Decision, Origin};
use crate::observe;
use crate::store::{SlotFreed, StoreError};

/// Asks the store again for the same request: its key, policy and cost.
pub(crate) type AskAgain<F> = Box<dyn FnMut() -> F + Send>;

/// Asks the store for a signal that a slot of the request's key freed.
pub(crate) type SlotSignal = Box<dyn FnMut() -> Option<SlotFreed> + Send>;

/// A request's admission: the store's pending decision `F`, and, if the
/// layer waits, what waiting needs.
pub(crate) struct Admission<F> {
    check: F,
    wait: Option<Box<Wait<F>>>,
}

struct Wait<F> {
    again: AskAgain<F>,
    /// Under a cap, a signal that a slot freed: whichever of it and the
    /// sleep comes first ends the wait.
    signal: SlotSignal,
    freed: Option<SlotFreed>,
    /// No turn later than this is waited for: the request's arrival plus
    /// the layer's bound (`None` past the timer's range).
    deadline: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// When the current sleep began.
    slept_from: Instant,
    /// The sleeps so far, for the operators' figures.
    waited: Duration,
}

impl<F> Admission<F> {
    /// The store's decision, taken as it comes.
    pub(crate) fn once(check: F) -> Self {
        Self { check, wait: None }
    }

    /// The store's decision, waited on for up to `bound` from now.
    pub(crate) fn waiting(
        check: F,
        again: AskAgain<F>,
        signal: SlotSignal,
        bound: Duration,
    ) -> Self {
        let wait = Wait {
            again,
            signal,
            freed: None,
            deadline: Instant::now().checked_add(bound),
            sleep: None,
            slept_from: Instant::now(),
            waited: Duration::ZERO,
        };
        Self {
            check,
            wait: Some(Box::new(wait)),
        }
    }

    /// How long the request slept for its turns.
    pub(crate) fn waited(&self) -> Duration {
        self.wait
            .as_ref()
            .map_or(Duration::ZERO, |wait| wait.waited)
    }
}

impl<F> Future for Admission<F>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
{
    type Output = F::Output;

    // A layer that does not wait polls the store's future alone, as if
    // it were not wrapped.
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        match &mut this.wait {
            None => Pin::new(&mut this.check).poll(cx),
            Some(wait) => wait.poll_turn(&mut this.check, cx),
        }
    }
}

impl<F> Wait<F>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
{
    /// Polls `check`, sleeping through and asking again after each
    /// refusal whose turn comes before the deadline.
    fn poll_turn(&mut self, check: &mut F, cx: &mut Context<'_>) -> Poll<F::Output> {
        loop {
            if let Some(sleep) = &mut self.sleep {
                let freed = self
                    .freed
                    .as_mut()
                    .is_some_and(|f| f.as_mut().poll(cx).is_ready());
                if !freed {
                    ready!(sleep.as_mut().poll(cx));
                }
                // The sleep planned, or less if a freed slot ended it early.
                let planned = sleep.deadline().saturating_duration_since(self.slept_from);
                self.waited += self.slept_from.elapsed().min(planned);
                (self.sleep, self.freed) = (None, None);
                *check = (self.again)();
            }
            let outcome = ready!(Pin::new(&mut *check).poll(cx));
            let Ok(decision) = &outcome else {
                return Poll::Ready(outcome);
            };
            // A refusal that names no wait is not waited on: asking again at
            // once would only spin. No store knows when a slot frees, so a
            // request waiting for one asks again every 25 to 50 ms, and at
            // its deadline, unless its store signals a freed slot first.
            let in_flight = decision.origin() == Origin::InFlight;
            let retry_after = if in_flight {
                self.freed = (self.signal)();
                slot_poll()
            } else {
                decision.retry_after()
            };
            if !decision.wait_helps() || retry_after.is_zero() {
                return Poll::Ready(outcome);
            }
            // Outside a tokio runtime there is no timer to sleep on.
            if tokio::runtime::Handle::try_current().is_err() {
                observe::cannot_wait();
                return Poll::Ready(outcome);
            }
            let now = Instant::now();
            let turn = match (now.checked_add(retry_after), self.deadline) {
                (Some(turn), deadline) if deadline.is_none_or(|deadline| turn <= deadline) => turn,
                (_, Some(deadline)) if in_flight && deadline > now => deadline,
                _ => return Poll::Ready(outcome),
            };
            self.sleep = Some(Box::pin(sleep_until(turn)));
            self.slept_from = now;
        }
    }
}

/// How long a request waiting for an in-flight slot sleeps before asking
/// again, unless its store signals a freed slot first: 25 to 50 ms, spread
/// at random so that waiters released together do not ask together.
fn slot_poll() -> Duration {
    use std::hash::BuildHasher;
    let spread = foldhash::fast::FixedState::default().hash_one(leases::fresh_id());
    Duration::from_micros(25_000 + spread % 25_000)
}
