//! Redis key names: `prefix:{user key}:v5:name/signature`, as
//! [`names`](super::super::names) writes them, with the version of the
//! stored format.

use std::borrow::Cow;

use crate::limit::duration_name;
use crate::policy::Policy;
use crate::store::names::escape_into;
pub(super) use crate::store::names::{escape, key_name};

/// The version of the stored format, part of every key's name: a release
/// that changes how any state is stored raises it, so that its keys never
/// meet ones an older release wrote, even while both run side by side.
const FORMAT_VERSION: &str = "v5";

/// The part of a key's name after the user's key, for a policy with the
/// escaped `name` (if it has one) and `signature`.
pub(super) fn suffix(name: Option<&str>, signature: &str) -> String {
    let mut out = format!("{FORMAT_VERSION}:");
    escape_into(&mut out, name, signature);
    out
}

/// `policy`'s signature, and for a bucket or a log under local quota the
/// `hold` its chunks are spent over (`;h` and a duration), which every
/// call on its keys must judge by: stores with another hold, or none,
/// keep keys of their own.
pub(super) fn signature(policy: &Policy, hold: u64) -> Cow<'_, str> {
    match hold {
        0 => Cow::Borrowed(policy.signature()),
        hold => Cow::Owned(format!("{};h{}", policy.signature(), duration_name(hold))),
    }
}

/// The key holding until when the state at `name` serves a penalty: the
/// same hash tag, so the same hash slot.
pub(super) fn penalty_key(name: &str) -> String {
    format!("{name}:penalty")
}

/// The sorted set of the in-flight slots of the state at `name`: the same
/// hash tag, so the same hash slot.
pub(super) fn leases_key(name: &str) -> String {
    format!("{name}:leases")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_colons_and_control_bytes_cannot_break_the_tag() {
        let plain = suffix(None, "l1/1s");
        assert_eq!(
            key_name("p", &"a}b{c:d", &plain),
            "p:{a%7Db%7Bc:d}:v5:l1/1s"
        );
        let named = suffix(Some("lo{g}in"), "l1/1s");
        assert_eq!(key_name("p", &"k", &named), "p:{k}:v5:lo%7Bg%7Din/l1/1s");
        assert_eq!(key_name("p", &"nul\0", &plain), "p:{nul%00}:v5:l1/1s");
        // The escape character is itself escaped, so these stay apart.
        assert_ne!(key_name("p", &"%7B", &plain), key_name("p", &"{", &plain));
    }

    #[test]
    fn a_long_key_is_named_by_its_digest_inside_the_tag() {
        let plain = suffix(None, "l1/1s");
        let long = "k".repeat(65_536);
        let name = key_name("p", &long, &plain);
        assert!(name.starts_with("p:{sha256:"), "{name}");
        assert!(name.ends_with("}:v5:l1/1s"), "{name}");
        assert!(name.len() < 100, "{name}");
        let mut other = long.clone();
        other.replace_range(30_000..30_001, "j");
        assert_ne!(key_name("p", &other, &plain), name);
        assert_eq!(key_name("p", &long, &plain), name);
        // 256 escaped bytes are kept; escaping counts: 86 braces are 258.
        assert!(key_name("p", &"k".repeat(256), &plain).contains("{kkk"));
        assert!(key_name("p", &"{".repeat(86), &plain).starts_with("p:{sha256:"));
    }
}
