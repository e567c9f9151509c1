//! Redis key names: `prefix:{user key}:v3:name/signature`.
//!
//! The user's key sits inside a hash tag, so every policy's state for one
//! client lives in one cluster slot. It is escaped so that no user key can
//! end the tag early or make two different keys share a name.

use std::fmt::{self, Display, Write};

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
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let _ = Escaping(&mut out).write_str(text);
    out
}

/// The version of the stored format, part of every key's name: a release
/// that changes how any state is stored raises it, so that its keys never
/// meet ones an older release wrote, even while both run side by side.
const FORMAT_VERSION: &str = "v3";

/// The part of a key's name after the user's key, for a policy with the
/// escaped `name` (if it has one) and `signature`.
pub(super) fn suffix(name: Option<&str>, signature: &str) -> String {
    let mut out = format!("{FORMAT_VERSION}:");
    if let Some(name) = name {
        let _ = Escaping(&mut out).write_str(name);
        out.push('/');
    }
    out.push_str(signature);
    out
}

/// The Redis key for `key` under the policy whose [`suffix`] is given;
/// `prefix` is already escaped.
pub(super) fn key_name(prefix: &str, key: &impl Display, suffix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + suffix.len() + 24);
    out.push_str(prefix);
    out.push_str(":{");
    // Writing into a String cannot fail; a Display impl that reports an
    // error just leaves its key shorter, still escaped and tagged.
    let _ = write!(Escaping(&mut out), "{key}");
    out.push_str("}:");
    out.push_str(suffix);
    out
}

/// The key holding until when the state at `name` serves a penalty: the
/// same hash tag, so the same cluster slot.
pub(super) fn penalty_key(name: &str) -> String {
    format!("{name}:penalty")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_colons_and_control_bytes_cannot_break_the_tag() {
        let plain = suffix(None, "l1/1s");
        assert_eq!(
            key_name("p", &"a}b{c:d", &plain),
            "p:{a%7Db%7Bc:d}:v3:l1/1s"
        );
        let named = suffix(Some("lo{g}in"), "l1/1s");
        assert_eq!(key_name("p", &"k", &named), "p:{k}:v3:lo%7Bg%7Din/l1/1s");
        assert_eq!(key_name("p", &"nul\0", &plain), "p:{nul%00}:v3:l1/1s");
        // The escape character is itself escaped, so these stay apart.
        assert_ne!(key_name("p", &"%7B", &plain), key_name("p", &"{", &plain));
    }
}
