//! One key for every request: a limit on the service as a whole.

use crate::layer::KeyExtractor;

/// Counts every request under one key, for a limit on the whole service
/// (per store: with a [`RedisStore`](crate), across all its instances), for
/// requests of any type.
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl<R> KeyExtractor<R> for Global {
    type Key = &'static str;

    fn extract(&self, _: &R) -> Option<&'static str> {
        Some("global")
    }
}
