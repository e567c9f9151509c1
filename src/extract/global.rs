//! One key for every request: a limit on the service as a whole.

use crate::layer::KeyExtractor;

/// Counts every request under one key, for a limit on the whole service
/// (per store: with a [`RedisStore`](crate), across all its instances), for
/// requests of any type.
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl Global {
    /// The one key, whatever the request.
    pub fn extract<R>(&self, _: &R) -> Option<&'static str> {
        Some("global")
    }
}

impl<R, Res> KeyExtractor<R, Res> for Global {
    type Key = &'static str;

    fn extract(&self, request: &R) -> Option<&'static str> {
        Global::extract(self, request)
    }
}
