//! The script of the sliding log: `lua/log.lua` filled for one policy, its
//! limits, ring size and TTL as constants in the text. The ring, its
//! trailer and the replies are described in docs/design.md.

use crate::policy::Policy;

use super::scripts::{header, joined, per_limit, Mode};
use super::template::{fill, Vars};

const TEMPLATE: &str = include_str!("lua/log.lua");
const SETTLE_TEMPLATE: &str = include_str!("lua/log_settle.lua");
const COST_TEMPLATE: &str = include_str!("lua/log_cost.lua");
const RING_WHOLE: &str = include_str!("lua/ring_whole.lua");

/// The largest ring read whole, and rewritten whole while it grows: a
/// small ring costs Redis less copied into Lua at once than read a few
/// bytes at a time, a large one more. The Redis bench's log rows (limits
/// of 100 and 1,000, read in ranges) and the stored-state tests of rings
/// on either side of the bound guard it.
pub(super) const READ_WHOLE_UP_TO: u32 = 32;

/// The largest ring read in ranges that the stamp filling it rewrites to
/// size, once in the key's life. The rewrite copies the whole string in
/// and out of Lua while Redis serves no one else, in time linear in the
/// ring; a larger ring keeps the room it grew in place (Redis adds at most
/// as much again, and at most 1 MiB).
pub(super) const REWRITE_WHEN_FULL_UP_TO: u32 = 4_096;

/// Where the trailer's part for each limit starts: after the ring's head
/// and length (4 bytes each) and the newest stamp (8).
pub(super) const LIMITS_AT: usize = 16;

/// Bytes of the trailer per limit: a cursor (4), its stamp and the next (8
/// each).
pub(super) const PER_LIMIT: usize = 20;

/// Bytes in the trailer of a log of `limits` limits: the reply to a
/// request accepted and recorded, after the request's stamp where the two
/// were written together.
pub(super) const fn trailer_len(limits: usize) -> usize {
    LIMITS_AT + PER_LIMIT * limits
}

/// The script judging requests of one unit under `policy` (a sliding log),
/// recording those it accepts if `record`.
pub(super) fn source(policy: &Policy, record: bool) -> String {
    let n = policy.limits().len();
    let cap = policy.largest_max();
    let trailer = trailer_len(n);
    let trailer_fields = trailer_fields(n);
    let each = |template: &str| per_limit(n, template);
    let state = format!("head, len, newest, {}", each("u#, s#, t#"));
    let whole = cap <= READ_WHOLE_UP_TO;
    let mode = if record { Mode::Record } else { Mode::Peek };
    let vars = ring_vars(policy, mode)
        .value("trailer_fields", &trailer_fields)
        .value("last_slot", cap - 1)
        .value("longest", policy.longest_window_micros())
        .value("oldest", each("o#"))
        .value("nows", per_limit(n, "now"))
        .value("judged", each("len - u# + 1, o#"))
        .value("judged_format", "i8i8".repeat(n))
        .value("cursors", each("u#"))
        .value("cursors_less_one", each("u# - 1"))
        // The state as recorded: this request's stamp is the newest.
        .value("recorded_state", state.replace("newest", "now"))
        .value("restart", per_limit(n, "0, asked, -1"))
        .value("ring_bytes", u64::from(cap) * 8)
        .value("string_bytes", u64::from(cap) * 8 + trailer as u64)
        .value(
            "whole_length_holds",
            if whole {
                format!(" and #whole == 8 * len + {trailer}")
            } else {
                String::new()
            },
        )
        .value(
            "cursors_hold",
            joined(n, "", " and u# <= len and (u# + 1 < len and t# >= -2 and t# ~= -1 or u# + 1 >= len and t# == -1)"),
        )
        .value("any_full", {
            let full: Vec<String> = policy
                .limits()
                .iter()
                .enumerate()
                .map(|(i, limit)| format!("len - u{} >= {}", i + 1, limit.max()))
                .collect();
            full.join(" or ")
        })
        .value("stamp_at", read(whole, "'<i8'", 7))
        .value("two_stamps_at", read(whole, "'<i8i8'", 15))
        .flag("whole", whole)
        .flag("rewrite_when_full", cap <= REWRITE_WHEN_FULL_UP_TO);
    fill(TEMPLATE, &vars, &limit_vars(policy))
}

/// The script judging and recording requests of more than one unit under
/// `policy` (a sliding log).
pub(super) fn cost_source(policy: &Policy) -> String {
    let n = policy.limits().len();
    let vars = ring_vars(policy, Mode::RecordCost).value("cursors", per_limit(n, "u#, s#, t#"));
    fill(COST_TEMPLATE, &vars, &limit_vars(policy))
}

/// The script settling a request under `policy` (a sliding log).
pub(super) fn settle_source(policy: &Policy) -> String {
    let n = policy.limits().len();
    let vars = ring_vars(policy, Mode::Settle).value("cursors", per_limit(n, "0, oldest, next"));
    fill(SETTLE_TEMPLATE, &vars, &[])
}

/// What every log script knows of the ring under `policy`: the state's
/// names, a fresh state, the trailer's size and format, the capacity, how
/// a refusal names the stamps that block it, and the lines that read the
/// ring whole.
fn ring_vars(policy: &Policy, mode: Mode) -> Vars {
    let n = policy.limits().len();
    let vars = header("sliding window log", policy, mode)
        .value(
            "state",
            format!("head, len, newest, {}", per_limit(n, "u#, s#, t#")),
        )
        .value("fresh", format!("0, 0, -1, {}", per_limit(n, "0, -1, -1")))
        .value("trailer", trailer_len(n))
        .value("trailer_format", format!("<{}", trailer_fields(n)))
        .value("cap", policy.largest_max())
        .value("blocked", per_limit(n, "b#"))
        .value("none_blocked", per_limit(n, "-1"))
        .value("blocked_format", "i8".repeat(n));
    // The lines that read the ring whole, for the scripts that rewrite it.
    let ring_whole = fill(RING_WHOLE, &vars, &[]);
    vars.value("ring_whole", ring_whole.trim_end())
}

/// The trailer's fields for `n` limits, as `struct.pack` spells them.
fn trailer_fields(n: usize) -> String {
    format!("I4I4i8{}", "I4i8i8".repeat(n))
}

/// Each limit's window and maximum, for the lines written once per limit.
fn limit_vars(policy: &Policy) -> Vec<Vars> {
    policy
        .limits()
        .iter()
        .enumerate()
        .map(|(i, limit)| {
            Vars::default()
                .value("i", i + 1)
                .value("w", limit.window_micros())
                .value("max", limit.max())
        })
        .collect()
}

/// The Lua expression unpacking, by `format`, the stamps from the ring's
/// slot `at` on (`last` bytes past its start): from the string read
/// `whole`, or from a range of it.
fn read(whole: bool, format: &str, last: u32) -> String {
    if whole {
        format!("struct.unpack({format}, whole, 1 + at * 8)")
    } else {
        format!(
            "struct.unpack({format}, redis.call('GETRANGE', key, format('%d', at * 8), format('%d', {last} + at * 8)))"
        )
    }
}
