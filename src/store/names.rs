//! Names for a key's state in a shared store: `prefix:{user key}:suffix`,
//! the suffix naming the policy value (its name and signature).
//!
//! The user's key sits inside a hash tag, so every policy's state for one
//! client lives in one Redis Cluster slot. It is escaped so that no user
//! key can end the tag early or make two different keys share a name.
//! A key whose escaped text runs past [`MAX_KEY_LEN`] bytes is named by its
//! digest (see [`bound_key`](crate::bound_key)), so a name's length stays
//! bounded however long the key a client chose.

use std::fmt::{self, Display, Write};

use crate::bounded_key::bound_tail;

/// The longest escaped user key kept as it is in a name, in bytes.
pub(crate) const MAX_KEY_LEN: usize = 256;

/// Writes text with `%`, `{`, `}` and control bytes percent-encoded; every
/// other character passes as is. Decoding is unambiguous because `%` itself
/// is encoded, so distinct inputs always give distinct outputs.
struct Escaping<'a>(&'a mut String);

impl Write for Escaping<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            match c {
                '%' | '{' | '}' | '\u{0}'..='\u{1f}' | '\u{7f}' => {
                    write!(self.0, "%{:02X}", u32::from(c))?;
                }
                _ => self.0.push(c),
            }
        }
        Ok(())
    }
}

/// Escapes `text` as [`key_name`] does; used for the prefix.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let _ = Escaping(&mut out).write_str(text);
    out
}

/// Writes a policy value's part of a name to `out`: its `name`, escaped,
/// and a slash (if it has a name), then its `signature`.
pub(crate) fn escape_into(out: &mut String, name: Option<&str>, signature: &str) {
    if let Some(name) = name {
        let _ = Escaping(out).write_str(name);
        out.push('/');
    }
    out.push_str(signature);
}

/// The name for `key` under the policy whose `suffix` is given; `prefix`
/// is already escaped.
pub(crate) fn key_name(prefix: &str, key: &impl Display, suffix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + suffix.len() + 24);
    out.push_str(prefix);
    out.push_str(":{");
    let start = out.len();
    // Writing into a String cannot fail; a Display impl that reports an
    // error just leaves its key shorter, still escaped and tagged.
    let _ = write!(Escaping(&mut out), "{key}");
    bound_tail(&mut out, start, MAX_KEY_LEN);
    out.push_str("}:");
    out.push_str(suffix);
    out
}
