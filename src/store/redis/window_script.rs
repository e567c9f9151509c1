//! The script of the sliding counter and the fixed window: `lua/window.lua`
//! filled for one policy, its limits, TTL and mode as constants in the text.
//! The state it keeps and the reply it sends are in docs/design.md.

use crate::algorithm::Algorithm;
use crate::policy::Policy;

use super::integer_state::IntegerState;
use super::scripts::{header, joined, per_limit, ttl_millis, Mode};
use super::template::{fill, Vars};

const TEMPLATE: &str = include_str!("lua/window.lua");

/// Lua's numbers are exact integers below 2 to this power.
pub(super) const EXACT_BITS: u32 = 53;

/// Lua's numbers are exact integers below this.
const EXACT: u128 = 1 << EXACT_BITS;

/// The script judging requests under `policy` (a sliding counter or fixed
/// window) in `mode`.
pub(super) fn source(policy: &Policy, mode: Mode) -> String {
    let sliding = policy.algorithm() == Algorithm::SlidingCounter;
    let limits: Vec<(u64, u64)> = policy
        .limits()
        .iter()
        .map(|limit| (u64::from(limit.max()), limit.window_micros()))
        .collect();
    let n = limits.len();
    let lifetime = ttl_millis(policy).saturating_mul(1_000);
    let each = |template: &str| per_limit(n, template);
    let integer = IntegerState::for_policy(policy, lifetime);
    let kind = if sliding {
        "sliding window counter"
    } else {
        "fixed window"
    };
    let cost = if mode == Mode::RecordCost {
        "cost"
    } else {
        "1"
    };
    // Settling charges the excess to each window, as far as its limit.
    let counted = if mode == Mode::Settle {
        limits
            .iter()
            .enumerate()
            .map(|(i, (max, _))| format!("math.min(c{} + extra, {max})", i + 1))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        each(&format!("c# + {cost}"))
    };
    let all_fit = if mode == Mode::Settle {
        "true".to_owned()
    } else {
        joined(n, " and ", "f#")
    };
    let vars = header(kind, policy, mode)
        .value("state", each("k#, p#, c#"))
        .value("zeros", per_limit(3 * n, "0"))
        .value("bytes", 12 * n)
        .value("words", "I4".repeat(3 * n))
        .value("lifetime", lifetime)
        .value(
            "decode",
            integer
                .as_ref()
                .map_or_else(String::new, |integer| integer.decode().join("\n  ")),
        )
        .value("all_fit", all_fit)
        .value("currents", each("c#"))
        .value("currents_counted", counted)
        .value("packed", format!(", {}", each("k# % 4294967296, p#, c#")))
        .value(
            "stored",
            integer
                .as_ref()
                .map_or_else(|| "string.sub(reply, 10)".to_owned(), IntegerState::encode),
        )
        .flag("integer", integer.is_some())
        .flag("sliding", sliding)
        .flag(
            "exact_fits",
            sliding && limits.iter().any(|&(max, w)| !plain(max, w)),
        );
    let limits: Vec<Vars> = limits
        .iter()
        .enumerate()
        .map(|(i, &(max, w))| {
            Vars::default()
                .value("i", i + 1)
                .value("w", w)
                .value("max", max)
                .value(
                    "room",
                    if mode == Mode::RecordCost {
                        format!("{max} - cost")
                    } else {
                        (max - 1).to_string()
                    },
                )
                .flag("plain", plain(max, w))
        })
        .collect();
    fill(TEMPLATE, &vars, &limits)
}

/// Whether `previous * (w - elapsed) <= (max - current - cost) * w` can be
/// compared in doubles as written: the right side is at most
/// `(max - 1) * w`, as a cost is at least 1, exact below 2^53, and a left side that rounds is at
/// least 2^53, so larger whichever way it rounds.
fn plain(max: u64, w: u64) -> bool {
    u128::from(max.saturating_sub(1)) * u128::from(w) < EXACT
}
