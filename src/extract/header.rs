//! A header's value as the key: API keys, tenant ids.

use http::header::HeaderName;
use http::Request;

use crate::error::ConfigError;
use crate::layer::KeyExtractor;

/// Keys requests by the value of one header, e.g. `x-api-key`.
///
/// A missing or empty header gives no key (see
/// [`MissingKey`](crate::MissingKey)). When a request repeats the header,
/// the first value counts. Values are used as text; bytes that are not
/// visible ASCII, and `%`, are written as `%XX`, so distinct values can
/// never share a key even if they are not UTF-8.
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
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
        Ok(Self { name })
    }
}

impl<B> KeyExtractor<Request<B>> for HeaderKey {
    type Key = String;

    fn extract(&self, request: &Request<B>) -> Option<String> {
        let value = request.headers().get(&self.name)?.as_bytes();
        if value.is_empty() {
            return None;
        }
        let mut key = String::with_capacity(value.len());
        for &byte in value {
            if (byte.is_ascii_graphic() && byte != b'%') || byte == b' ' {
                key.push(char::from(byte));
            } else {
                key.push_str(&format!("%{byte:02X}"));
            }
        }
        Some(key)
    }
}
