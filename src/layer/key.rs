//! Turning a request into the key its quota is counted under.

use std::borrow::Cow;
use std::sync::Arc;

use crate::policy::Policy;

/// Picks the key a request of type `R` is counted under: a client IP, an
/// API key, a user id, a tenant, or one constant for a global limit.
///
/// Any `Fn(&R) -> Option<K>` is a `KeyExtractor<R, Res>`, for HTTP requests and
/// for any other request type a tower `Service` takes (a job, an outbound
/// call). `None` means the request carries no key; what happens then is
/// set with
/// [`SlidingWindowLayer::on_missing_key`](crate::SlidingWindowLayer::on_missing_key).
/// The ready-made extractors in [`extract`](crate::extract) read
/// `http::Request`s of any body.
///
/// A store keeps every live key, so a key made of text the client
/// chooses (a header, a query parameter) must be bounded: return
/// [`bound_key(text, 128)`](crate::bound_key), which keeps short text and
/// digests long text, rather than the text itself.
///
/// A closure that returns a borrowed key (`Some(job.tenant)` with a
/// `&'static str` field) can trip a limitation of the compiler once the
/// service's future runs inside `tokio::spawn(async move { … })`
/// ("implementation of `Clone` is not general enough"): a `fn` item
/// (`fn tenant(job: &Job) -> Option<&'static str>`) or an owned key
/// (`String`) avoids it.
///
/// The layer reads more than the key through this trait where it is told
/// to: [`plan`](crate::SlidingWindowLayer::plan),
/// [`cost`](crate::SlidingWindowLayer::cost) and
/// [`settle`](crate::SlidingWindowLayer::settle) wrap the extractor in a
/// type that names what its closure reads, and answers the methods below
/// that have defaults. `Res` is the response type, which only a settle
/// reads: an extractor of your own is written for any
/// (`impl<B, Res> KeyExtractor<http::Request<B>, Res> for MyKey`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key requests of type `{R}` with responses of type `{Res}`",
    note = "a closure given to `plan_by_request`, `cost` or `settle` must name the service's own request and response types (`http::Request<axum::body::Body>` on axum)"
)]
pub trait KeyExtractor<R, Res> {
    /// The key type: anything the store can hash and compare
    /// (`String`, `&'static str`, `IpAddr`, `u64`, …).
    type Key;

    /// The request's key, if it has one.
    fn extract(&self, request: &R) -> Option<Self::Key>;

    /// The policy the request is judged by: by default the layer's own,
    /// `own`, which is the cheapest answer, borrowed.
    #[inline(always)]
    fn policy<'a>(&'a self, request: &R, key: &Self::Key, own: &'a Policy) -> Cow<'a, Policy> {
        let _ = (request, key);
        Cow::Borrowed(own)
    }

    /// The units the request reserves: by default one.
    #[inline(always)]
    fn cost(&self, request: &R) -> u32 {
        let _ = request;
        1
    }

    /// What reads the units a request really used from its response
    /// (where it gives `None`, the reservation stands), if anything does:
    /// responses are looked at only then. By default nothing.
    #[inline(always)]
    fn settle(&self) -> Option<&UnitsUsed<Res>> {
        None
    }
}

/// Reads the units a request really used from its response of type `Res`.
pub type UnitsUsed<Res> = Arc<dyn Fn(&Res) -> Option<u32> + Send + Sync>;

impl<F, R, Res, K> KeyExtractor<R, Res> for F
where
    F: Fn(&R) -> Option<K>,
{
    type Key = K;

    fn extract(&self, request: &R) -> Option<K> {
        self(request)
    }
}

/// What the layer does with a request whose key extractor returned `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissingKey {
    /// Refuse it without calling the inner service, so that unkeyed
    /// requests cannot slip past the limit: `400 Bad Request` (gRPC:
    /// `INVALID_ARGUMENT`), or under
    /// [`refuse_with_error`](crate::SlidingWindowLayer::refuse_with_error)
    /// a [`MissingKeyError`](crate::MissingKeyError).
    #[default]
    Reject,
    /// Pass the request through unlimited. Only for extractors whose `None`
    /// means "not subject to this limit".
    Allow,
}
