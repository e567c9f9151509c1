//! What every part of the layer reads: the configuration its services
//! share, the policy a request was judged by, and the predicate of
//! responses that count. It imports none of the parts that read it.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode};

use super::key::MissingKey;
use super::rejection::Rejection;
use super::response::QuotaUnit;
use super::view::PolicyView;

/// What every service of one layer shares, behind one `Arc`.
#[derive(Clone, Debug)]
pub(crate) struct LayerConfig {
    /// The layer's own policy, and what the layer derives from it.
    pub(crate) own: Arc<PolicyView>,
    /// Whether accepted responses carry the headers: as asked, else unless
    /// in shadow mode.
    pub(crate) headers_on_success: bool,
    pub(super) headers_asked: Option<bool>,
    /// Judge and record, but let every request through.
    pub(crate) shadow: bool,
    /// Whether accepted requests carry their decision: as asked, else only
    /// in shadow mode, where it is how a handler learns what would happen.
    pub(crate) decision_extension: bool,
    pub(super) extension_asked: Option<bool>,
    pub(crate) missing_key: MissingKey,
    pub(crate) rejection: Rejection,
    pub(crate) count_only: Option<CountOnly>,
    pub(crate) quota_unit: QuotaUnit,
    /// How far ahead a refused request waits for its turn, if at all.
    pub(crate) wait: Option<Duration>,
    /// What `Retry-After` a refusal for requests in flight names.
    pub(crate) in_flight_retry: Duration,
}

impl LayerConfig {
    /// Whether the future of an accepted request reads this configuration
    /// once the inner service has answered, for the RateLimit headers.
    /// Otherwise the future does without it, and the request takes no
    /// reference count.
    pub(crate) fn read_after_response(&self) -> bool {
        self.headers_on_success
    }

    /// How far ahead a refused request waits for its turn: never in
    /// shadow mode, which delays nothing.
    pub(crate) fn waits(&self) -> Option<Duration> {
        self.wait.filter(|_| !self.shadow)
    }
}

/// The policy a request was judged by: the layer's own (no extra reference
/// count on the hot path), or one a plan picked, viewed for this request.
#[derive(Debug)]
pub(crate) enum Chosen {
    Layer,
    Plan(Box<PolicyView>),
}

impl Chosen {
    pub(crate) fn get<'a>(&'a self, config: &'a LayerConfig) -> &'a PolicyView {
        match self {
            Self::Layer => &config.own,
            Self::Plan(view) => view,
        }
    }
}

type ResponseMatches = dyn Fn(StatusCode, &HeaderMap) -> bool + Send + Sync;

/// The predicate of [`SlidingWindowLayer::count_only`].
#[derive(Clone)]
pub(crate) struct CountOnly(pub(super) Arc<ResponseMatches>);

impl CountOnly {
    pub(crate) fn matches(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        (self.0)(status, headers)
    }
}

impl std::fmt::Debug for CountOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CountOnly(..)")
    }
}
