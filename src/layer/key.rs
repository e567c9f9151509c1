//! Turning a request into the key its quota is counted under.

/// Picks the key a request of type `R` is counted under: a client IP, an
/// API key, a user id, a tenant, or one constant for a global limit.
///
/// Any `Fn(&R) -> Option<K>` is a `KeyExtractor<R>`, for HTTP requests and
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
pub trait KeyExtractor<R> {
    /// The key type: anything the store can hash and compare
    /// (`String`, `&'static str`, `IpAddr`, `u64`, …).
    type Key;

    /// The request's key, if it has one.
    fn extract(&self, request: &R) -> Option<Self::Key>;
}

impl<F, R, K> KeyExtractor<R> for F
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
