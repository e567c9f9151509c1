//! The errors a layer under
//! [`refuse_with_error`](crate::SlidingWindowLayer::refuse_with_error)
//! fails refused calls with.

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Decision, Origin};

/// A call the rate limit refused. Layers in error mode fail such calls
/// with it, boxed as a `tower::BoxError`; find it with
/// `error.downcast_ref::<RateLimited>()`.
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
/// use tower_sliding_window::{Limit, RateLimited, SlidingWindowLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let layer = SlidingWindowLayer::new(Limit::per_minute(1), |tenant: &&'static str| Some(*tenant))
///     .refuse_with_error();
/// let mut svc = ServiceBuilder::new()
///     .layer(layer)
///     .service(service_fn(|_: &str| async { Ok::<_, BoxError>("done") }));
///
/// assert_eq!(svc.ready().await.unwrap().call("acme").await.unwrap(), "done");
/// let error = svc.ready().await.unwrap().call("acme").await.unwrap_err();
/// let refused = error.downcast_ref::<RateLimited>().expect("refused by the limit");
/// assert!(refused.retry_after() > Duration::from_secs(59));
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RateLimited {
    decision: Decision,
}

impl RateLimited {
    pub(crate) fn new(decision: Decision) -> Self {
        Self { decision }
    }

    /// How long until the call would be let through, exactly, as the
    /// HTTP modes' `Retry-After` says it. Zero for a call that costs more
    /// than a limit's `max` ([`Origin::TooCostly`]), which no wait lets
    /// through: check [`Decision::wait_helps`] before retrying after it.
    pub fn retry_after(&self) -> Duration {
        self.decision.retry_after()
    }

    /// The store's decision, with the limit that refused and its quota.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.decision.limit;
        match self.decision.origin() {
            Origin::InFlight => write!(
                f,
                "rate limited: too many calls of this key in flight; retry after {:?}",
                self.retry_after()
            ),
            Origin::TooCostly => write!(f, "rate limited: the call costs more than {limit} allows"),
            Origin::StoreFull => {
                f.write_str("rate limited: the store is full and tracks no new key")
            }
            Origin::Penalty => write!(
                f,
                "rate limited: serving a penalty under {limit}; retry after {:?}",
                self.retry_after()
            ),
            _ => write!(
                f,
                "rate limited by {limit}; retry after {:?}",
                self.retry_after()
            ),
        }
    }
}

impl std::error::Error for RateLimited {}

/// A call whose request the key extractor found no key in, refused under
/// [`MissingKey::Reject`](crate::MissingKey::Reject) by a layer in error
/// mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MissingKeyError;

impl fmt::Display for MissingKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rate limit: the request carries no key to count it under")
    }
}

impl std::error::Error for MissingKeyError {}
