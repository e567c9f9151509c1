//! A header's value as the key: API keys, tenant ids.

use std::borrow::Cow;

use http::header::HeaderName;
use http::Request;

use crate::bounded_key::{bound_key, DEFAULT_KEY_BOUND};
use crate::error::ConfigError;

/// Keys requests by the value of one header, e.g. `x-api-key`.
///
/// A missing or empty header gives no key (see
/// [`MissingKey`](crate::MissingKey)). When a request repeats the header,
/// the first value counts. Values are used as text; bytes that are not
/// visible ASCII, and `%`, are written as `%XX`, so distinct values can
/// never share a key even if they are not UTF-8.
///
/// The client chooses the value, so a key longer than
/// [`max_len`](HeaderKey::max_len) bytes (128 by default) is kept as its
/// SHA-256 digest instead (see [`bound_key`](crate::bound_key)): a key
/// costs the store a bounded size, however long the header.
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    max_len: usize,
}

impl HeaderKey {
    /// Keys by the header called `name`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `name` is not a valid header name.
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        let name = HeaderName::try_from(name)
            .map_err(|_| ConfigError::Extractor(format!("{name:?} is not a valid header name")))?;
        Ok(Self {
            name,
            max_len: DEFAULT_KEY_BOUND,
        })
    }

    /// Keeps keys of up to `max_len` bytes (after escaping) as they are,
    /// and digests longer ones.
    pub fn max_len(mut self, max_len: usize) -> Self {
        self.max_len = max_len;
        self
    }
}

impl HeaderKey {
    /// The request's key, if it has one: what the layer counts it under.
    pub fn extract<B>(&self, request: &Request<B>) -> Option<String> {
        let value = request.headers().get(&self.name)?.as_bytes();
        if value.is_empty() {
            return None;
        }
        let key = escape(value);
        match bound_key(&key, self.max_len) {
            Cow::Borrowed(_) => Some(key),
            Cow::Owned(digest) => Some(digest),
        }
    }
}

super::reads_requests!(HeaderKey => String);

/// The value as text, with `%` and bytes that are not visible ASCII (or a
/// space) written as `%XX`.
fn escape(value: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut key = String::with_capacity(value.len());
    for &byte in value {
        if (byte.is_ascii_graphic() && byte != b'%') || byte == b' ' {
            key.push(char::from(byte));
        } else {
            key.push('%');
            key.push(char::from(HEX[usize::from(byte >> 4)]));
            key.push(char::from(HEX[usize::from(byte & 0xF)]));
        }
    }
    key
}
