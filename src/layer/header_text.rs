//! Header values cut from a chunk of text each thread shares among its
//! responses, so that writing one costs no allocation of its own.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};
use http::HeaderValue;

/// Bytes in a chunk: some forty `RateLimit` values, so two allocations (the
/// chunk and its reference count) serve forty responses. A value keeps its
/// whole chunk alive as long as anything holds it.
const CHUNK: usize = 1024;

thread_local! {
    /// What is left of this thread's chunk.
    static LEFT: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// The header value `parts` make when joined, or `None` if that is no valid
/// header value.
///
/// The value is marked sensitive, which HTTP/2's header compression honours
/// by never adding it to a connection's table: there it would keep its whole
/// chunk alive while the connection lasts, some sixty chunks for a 4 KiB
/// table. Values that change from response to response gain nothing from
/// that table anyway.
// Inlined so that the parts' lengths are known where it is called, and
// the fixed parts are copied without a call.
#[inline(always)]
pub(crate) fn joined(parts: &[&[u8]]) -> Option<HeaderValue> {
    let len = parts.iter().map(|part| part.len()).sum();
    let cut = |left: &mut BytesMut| -> Bytes {
        if left.capacity() < len {
            *left = BytesMut::with_capacity(CHUNK.max(len));
        }
        for part in parts {
            left.extend_from_slice(part);
        }
        left.split().freeze()
    };
    // A thread whose chunk is gone (it is exiting) or in use (which no
    // caller here can cause) writes the value on its own.
    let text = LEFT
        .try_with(|left| left.try_borrow_mut().ok().map(|mut left| cut(&mut left)))
        .ok()
        .flatten()
        .unwrap_or_else(|| Bytes::from(parts.concat()));
    let mut value = HeaderValue::from_maybe_shared(text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_cut_in_a_row_keep_their_own_text() {
        let first = joined(&[b"\"1s\";r=", b"9", b";t=1"]).unwrap();
        let second = joined(&[b"\"1m\";r=", b"99", b";t=60"]).unwrap();
        assert_eq!(first, "\"1s\";r=9;t=1");
        assert_eq!(second, "\"1m\";r=99;t=60");
        assert!(first.is_sensitive() && second.is_sensitive());
    }

    #[test]
    fn a_value_larger_than_a_chunk_gets_a_chunk_of_its_size() {
        let long = vec![b'a'; CHUNK * 3];
        let value = joined(&[&long, b"z"]).unwrap();
        assert_eq!(value.len(), CHUNK * 3 + 1);
        assert_eq!(joined(&[b"after"]).unwrap(), "after");
    }

    #[test]
    fn text_that_is_no_header_value_is_refused() {
        assert!(joined(&[b"line\r\nbreak"]).is_none());
        // The refused text does not spill into the next value.
        assert_eq!(joined(&[b"clean"]).unwrap(), "clean");
    }

    #[test]
    fn many_values_cross_chunks_intact() {
        let values: Vec<(String, HeaderValue)> = (0..500)
            .map(|i| {
                let text = format!("\"w\";r={i};t={}", i % 7);
                let value = joined(&[text.as_bytes()]).unwrap();
                (text, value)
            })
            .collect();
        for (text, value) in values {
            assert_eq!(value, text.as_str());
        }
    }
}
