//! Keys of bounded length from text a client chooses.
//!
//! A store keeps every live key's text, so a key taken as it is from a
//! header lets a client choose how much memory it costs. Text past a bound
//! is kept as a digest of all of it instead: a fixed size, the same on
//! every instance and after every restart, so stores shared between
//! instances still agree on the key.

use std::borrow::Cow;
use std::fmt::Write;

use sha2::{Digest, Sha256};

/// What starts every digested key. Text that starts with it is digested
/// too, whatever its length, so no kept text can read as a digest and two
/// different texts never share a key.
const DIGEST_MARK: &str = "sha256:";

/// The length, in bytes, of a digested key: the mark and 64 hex digits.
pub const DIGEST_LEN: usize = DIGEST_MARK.len() + 64;

/// The longest text [`HeaderKey`](crate::extract::HeaderKey) keeps as it
/// is, in bytes.
pub const DEFAULT_KEY_BOUND: usize = 128;

/// `text` as a key of bounded length: `text` itself while it is at most
/// `max_len` bytes long, else `sha256:` and the hex SHA-256 of `text`
/// ([`DIGEST_LEN`] bytes, whatever `max_len`).
///
/// Use it in a key closure that returns text a client chooses (a header, a
/// query parameter, a field of a body), so that a key costs a store at
/// most `max_len` (or [`DIGEST_LEN`]) bytes. Equal texts always give equal
/// keys, on every instance and across restarts; different texts never
/// share one, short or long (text that itself starts with `sha256:` is
/// digested too, so a kept text cannot pose as a digest).
///
/// ```
/// use tower_sliding_window::{bound_key, Limit, SlidingWindowLayer};
///
/// let per_tenant = SlidingWindowLayer::new(Limit::per_minute(600), |req: &http::Request<()>| {
///     let tenant = req.uri().query()?.strip_prefix("tenant=")?;
///     Some(bound_key(tenant, 64).into_owned())
/// });
/// assert_eq!(bound_key("acme", 64), "acme");
/// assert!(bound_key(&"x".repeat(65_536), 64).starts_with("sha256:"));
/// ```
pub fn bound_key(text: &str, max_len: usize) -> Cow<'_, str> {
    if must_digest(text, max_len) {
        Cow::Owned(digest(text))
    } else {
        Cow::Borrowed(text)
    }
}

/// Bounds the key written to `out` from byte `start` on, in place: the
/// same rule as [`bound_key`], for a name built in one buffer.
pub(crate) fn bound_tail(out: &mut String, start: usize, max_len: usize) {
    if must_digest(&out[start..], max_len) {
        let digested = digest(&out[start..]);
        out.truncate(start);
        out.push_str(&digested);
    }
}

fn must_digest(text: &str, max_len: usize) -> bool {
    text.len() > max_len || text.starts_with(DIGEST_MARK)
}

fn digest(text: &str) -> String {
    let mut out = String::with_capacity(DIGEST_LEN);
    out.push_str(DIGEST_MARK);
    for byte in Sha256::digest(text.as_bytes()) {
        // Writing into a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_and_long_text_is_digested() {
        assert_eq!(bound_key("", 4), "");
        assert_eq!(bound_key("abcd", 4), "abcd");
        // SHA-256("abcde"), as `printf abcde | sha256sum` prints it.
        assert_eq!(
            bound_key("abcde", 4),
            "sha256:36bbe50ed96841d10443bcb670d6554f0a34b761be67ec9c4a8ad2c0c44ca42c"
        );
        assert_eq!(bound_key("abcde", 4).len(), DIGEST_LEN);
    }

    #[test]
    fn text_that_looks_like_a_digest_is_digested_too() {
        let long = bound_key("abcde", 4).into_owned();
        let posed = bound_key(&long, 1_000);
        assert_ne!(posed, long);
        assert!(posed.starts_with(DIGEST_MARK));
    }

    #[test]
    fn bounding_in_place_matches_bound_key() {
        for text in ["k", "abcde", "sha256:x"] {
            let mut out = String::from("p:{");
            out.push_str(text);
            bound_tail(&mut out, 3, 4);
            assert_eq!(out, format!("p:{{{}", bound_key(text, 4)));
        }
    }
}
