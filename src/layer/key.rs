//! Turning a request into the key its quota is counted under.

use http::Request;

/// Picks the key a request is counted under: a client IP, an API key, a user
/// id, or one constant for a global limit.
///
/// Any `Fn(&Request<B>) -> Option<K>` is a `KeyExtractor`. `None` means the
/// request carries no key; what happens then is set with
/// [`SlidingWindowLayer::on_missing_key`](crate::SlidingWindowLayer::on_missing_key).
pub trait KeyExtractor<B> {
    /// The key type: anything the store can hash and compare
    /// (`String`, `&'static str`, `IpAddr`, `u64`, …).
    type Key;

    /// The request's key, if it has one.
    fn extract(&self, request: &Request<B>) -> Option<Self::Key>;
}

impl<F, B, K> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<K>,
{
    type Key = K;

    fn extract(&self, request: &Request<B>) -> Option<K> {
        self(request)
    }
}

/// What the layer does with a request whose key extractor returned `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissingKey {
    /// Answer `400 Bad Request` (gRPC: `INVALID_ARGUMENT`) without calling the
    /// inner service, so that unkeyed requests cannot slip past the limit.
    #[default]
    Reject,
    /// Pass the request through unlimited. Only for extractors whose `None`
    /// means "not subject to this limit".
    Allow,
}
