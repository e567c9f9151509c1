//! One key for every request: a limit on the service as a whole.

use http::Request;

use crate::layer::KeyExtractor;

/// Counts every request under one key, for a limit on the whole service
/// (per store: with a [`RedisStore`](crate), across all its instances).
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl<B> KeyExtractor<B> for Global {
    type Key = &'static str;

    fn extract(&self, _: &Request<B>) -> Option<&'static str> {
        Some("global")
    }
}
