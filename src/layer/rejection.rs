//! How a refused HTTP request is answered.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};

use crate::algorithm::Decision;

type BuildResponse = dyn Fn(&Decision) -> Response<Bytes> + Send + Sync;

/// The answer to a request the limits refused. gRPC requests always get a
/// trailers-only `RESOURCE_EXHAUSTED`, whatever is chosen here.
///
/// Every style gets `Retry-After`, `RateLimit-Policy` and `RateLimit` (a
/// custom response keeps any of these it set itself).
///
/// ```
/// use bytes::Bytes;
/// use http::{Response, StatusCode};
/// use tower_sliding_window::{Limit, Rejection, SlidingWindowLayer};
///
/// let key = |_: &http::Request<()>| Some("everyone");
/// let problem_json = SlidingWindowLayer::new(Limit::per_second(5), key).rejection(Rejection::problem_json());
/// let teapot = SlidingWindowLayer::new(Limit::per_second(5), key).rejection(Rejection::custom(|decision| {
///     let mut response = Response::new(Bytes::from(format!("slow down: {:?}", decision.retry_after())));
///     *response.status_mut() = StatusCode::IM_A_TEAPOT;
///     response
/// }));
/// ```
#[derive(Clone)]
pub struct Rejection {
    pub(crate) status: StatusCode,
    pub(crate) style: Style,
}

#[derive(Clone)]
pub(crate) enum Style {
    PlainText,
    ProblemJson,
    Custom(Arc<BuildResponse>),
}

impl Rejection {
    /// `429` with a one-line `text/plain` body (the default).
    pub fn plain_text() -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            style: Style::PlainText,
        }
    }

    /// `429` with an RFC 9457 `application/problem+json` body of the type
    /// `quota-exceeded` registered by draft-ietf-httpapi-ratelimit-headers.
    pub fn problem_json() -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            style: Style::ProblemJson,
        }
    }

    /// A response built by `build` from the decision.
    pub fn custom<F>(build: F) -> Self
    where
        F: Fn(&Decision) -> Response<Bytes> + Send + Sync + 'static,
    {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            style: Style::Custom(Arc::new(build)),
        }
    }

    /// The same style with another status code (e.g. `503` for clients that
    /// only back off on that); a custom response keeps its own.
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }
}

impl Default for Rejection {
    fn default() -> Self {
        Self::plain_text()
    }
}

impl fmt::Debug for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let style = match self.style {
            Style::PlainText => "PlainText",
            Style::ProblemJson => "ProblemJson",
            Style::Custom(_) => "Custom",
        };
        f.debug_struct("Rejection")
            .field("status", &self.status)
            .field("style", &style)
            .finish()
    }
}
