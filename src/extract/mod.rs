//! Ready-made key extractors: the peer's IP, the client's IP behind trusted
//! proxies, a header value, or one global key.
//!
//! Each is a [`KeyExtractor`](crate::KeyExtractor) for requests with any
//! body, so it goes where a closure would:
//!
//! ```
//! use tower_sliding_window::extract::{ClientIp, HeaderKey, PeerIp};
//! use tower_sliding_window::{Limit, SlidingWindowLayer};
//!
//! let per_peer = SlidingWindowLayer::new(Limit::per_second(10), PeerIp::new());
//! let behind_nginx = SlidingWindowLayer::new(Limit::per_second(10), ClientIp::behind(["10.0.0.0/8"])?);
//! let per_api_key = SlidingWindowLayer::new(Limit::per_minute(600), HeaderKey::new("x-api-key")?);
//! # Ok::<(), tower_sliding_window::ConfigError>(())
//! ```

mod client_ip;
mod global;
mod header;
mod ip;
mod peer;

pub use self::client_ip::{ClientIp, ForwardedHeader};
pub use self::global::Global;
pub use self::header::HeaderKey;
pub use self::peer::PeerIp;

/// Implements [`KeyExtractor`](crate::KeyExtractor) for an extractor of
/// `http::Request`s of any body by its own `extract`, which callers reach
/// without naming the response type.
macro_rules! reads_requests {
    ($extractor:ty => $key:ty) => {
        impl<B, Res> $crate::KeyExtractor<http::Request<B>, Res> for $extractor {
            type Key = $key;

            #[inline]
            fn extract(&self, request: &http::Request<B>) -> Option<$key> {
                <$extractor>::extract(self, request)
            }
        }
    };
}
use reads_requests;
