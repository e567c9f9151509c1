//! The Lua script of the sliding counter and the fixed window, written for
//! one policy: its limits, TTL and mode are constants in the text.
//!
//! Redis runs this script on every request, so it is written for Redis's
//! CPU. A script shared by every policy would have to take the policy in as
//! an argument (each argument costs Redis about 1,800 instructions, even
//! empty, before a `struct.unpack` to read it) and walk the limits in
//! loops and function calls. Written per policy, it takes no argument but
//! an optional time, holds every number as a constant, and judges each
//! limit in straight-line code: about a fifth of the server's work per call
//! less, measured under callgrind (`bench/redis-callgrind.sh`). The price is
//! one cached script in Redis per policy shape (and one more for peeking),
//! loaded on first use.
//!
//! What the script does, for each call:
//!
//! * **Time.** `ARGV[1]`, now in microseconds from the client's clock, or,
//!   without it, the server's `TIME`.
//! * **State.** Where the policy's counts are small, `KEYS[1]` holds one
//!   integer (`integer_state`), and anything but a whole number below 2^53
//!   is read as a fresh key. Otherwise it holds, per limit, the fixed
//!   window index modulo
//!   2^32 and the previous and current counts, 4 bytes each, little-endian:
//!   twelve bytes keep a one-limit key within Redis's smallest string
//!   allocation, and a value of any other length is read as a fresh key. The
//!   index is rebuilt from now: fewer than 2^31 windows behind now's is an
//!   older window, as usual; more is either a clock that stepped back (the
//!   stored window is ahead of now) or, for a short window beside a very
//!   long one, a window older than 2^31 that the key outlived, and only the
//!   latter fits in the key's lifetime. That is exact unless one limit's
//!   window is over 2^31 times shorter than another's (1 ms beside 25
//!   days), where a long idle time or a clock stepping back by more than
//!   2^31 short windows can be misread.
//! * **Clock steps back.** A request is judged no earlier than the start of
//!   the latest window already counted in: `now` moves up to each limit's
//!   before any limit is judged.
//! * **Judging.** Every limit rolls its windows to now's, and the request
//!   fits when `current + 1 <= max` and, for the sliding counter,
//!   `previous * (w - elapsed) <= (max - current - 1) * w`. Lua's numbers
//!   are doubles, exact below 2^53; the comparison is plain wherever
//!   `(max - 1) * w` stays below 2^53 (a product that rounds is then larger
//!   than anything it is compared with), else the script carries an exact
//!   product on 16-bit limbs.
//! * **Recording.** All limits or none: an accepted request adds one to
//!   every current count. The TTL is set only when a window rolls (or the
//!   key is new): the request that rolls it comes after the window opened,
//!   and a state matters for at most two windows from that opening.
//! * **Reply.** One string (an array reply costs Redis more than all the
//!   arithmetic): a byte for the verdict (1 accepted), now (8 bytes), then
//!   the state in the binary layout with windows rolled to now, counting
//!   the request if it was accepted and recorded, before it otherwise (in
//!   the binary layout, the reply's tail is what is stored). The client
//!   derives remaining quota and retry-after from it, through the same core
//!   as the memory store.

use std::fmt::Write;

use crate::algorithm::Algorithm;
use crate::policy::Policy;

use super::integer_state::IntegerState;
use super::scripts::{per_limit, preamble, ttl_millis};

/// Lua's numbers are exact integers below 2 to this power.
pub(super) const EXACT_BITS: u32 = 53;

/// Lua's numbers are exact integers below this.
const EXACT: u128 = 1 << EXACT_BITS;

/// The script judging requests under `policy` (a sliding counter or fixed
/// window), recording those it accepts if `record`.
pub(super) fn source(policy: &Policy, record: bool) -> String {
    let sliding = policy.algorithm() == Algorithm::SlidingCounter;
    let limits: Vec<(u64, u64)> = policy
        .limits()
        .iter()
        .map(|limit| (u64::from(limit.max()), limit.window_micros()))
        .collect();
    let n = limits.len();
    let ttl = ttl_millis(policy);
    let lifetime = ttl.saturating_mul(1_000);
    let each = |template: &str| per_limit(n, template);
    let state = each("k#, p#, c#");
    let words = "I4".repeat(3 * n);
    let integer = IntegerState::for_policy(policy, lifetime);
    let stored = match &integer {
        Some(integer) => integer.encode(),
        None => "string.sub(reply, 10)".to_owned(),
    };

    let kind = if sliding {
        "sliding window counter"
    } else {
        "fixed window"
    };
    let mut lua = preamble(kind, policy, record);
    let mut line = |text: &str| {
        lua.push_str(text);
        lua.push('\n');
    };
    if sliding && limits.iter().any(|&(max, w)| !plain(max, w)) {
        line(EXACT_FITS);
    }
    line("local raw = redis.call('GET', KEYS[1])");
    line(&format!("local {state} = {}", vec!["0"; 3 * n].join(", ")));
    match &integer {
        // A state of any other length reads as a fresh key.
        None => {
            line(&format!("local fresh = not raw or #raw ~= {}", 12 * n));
            line("if not fresh then");
            line(&format!("  {state} = struct.unpack('<{words}', raw)"));
            line("  local k, behind");
            for (i, &(_, w)) in limits.iter().enumerate() {
                let i = i + 1;
                line(&format!("  k = (now - now % {w}) / {w}"));
                line(&format!("  behind = (k % 4294967296 - k{i}) % 4294967296"));
                line(&format!(
                    "  if behind < 2147483648 or behind * {w} <= {lifetime} then k{i} = k - behind else k{i} = k + (4294967296 - behind) end"
                ));
            }
        }
        // Anything but a whole number in range reads as a fresh key.
        Some(integer) => {
            line("local v = raw and tonumber(raw)");
            line(&format!(
                "local fresh = not (v and v >= 0 and v < {EXACT} and v % 1 == 0)"
            ));
            line("if not fresh then");
            for statement in integer.decode() {
                line(&format!("  {statement}"));
            }
        }
    }
    for (i, &(_, w)) in limits.iter().enumerate() {
        let i = i + 1;
        line(&format!("  if k{i} * {w} > now then now = k{i} * {w} end"));
    }
    line("end");
    line("local rolled, elapsed, k = false");
    for (i, &(max, w)) in limits.iter().enumerate() {
        let i = i + 1;
        line(&format!("elapsed = now % {w}"));
        line(&format!("k = (now - elapsed) / {w}"));
        line(&format!("if k ~= k{i} then"));
        if sliding {
            line(&format!(
                "  if k == k{i} + 1 then p{i} = c{i} else p{i} = 0 end"
            ));
        } else {
            line(&format!("  p{i} = 0"));
        }
        line(&format!("  c{i}, k{i}, rolled = 0, k, true"));
        line("end");
        line(&format!("local f{i} = c{i} < {max}"));
        if sliding {
            let fits = if plain(max, w) {
                format!("p{i} * ({w} - elapsed) <= ({} - c{i}) * {w}", max - 1)
            } else {
                format!("fits(p{i}, {w} - elapsed, {} - c{i}, {w})", max - 1)
            };
            line(&format!("if f{i} and p{i} > 0 then f{i} = {fits} end"));
        }
    }
    line(&format!(
        "local allowed = {}",
        (1..=n)
            .map(|i| format!("f{i}"))
            .collect::<Vec<_>>()
            .join(" and ")
    ));
    if record {
        line("if allowed then");
        line(&format!("  {} = {}", each("c#"), each("c# + 1")));
        line("end");
    }
    let mut packed = String::new();
    for i in 1..=n {
        let _ = write!(packed, ", k{i} % 4294967296, p{i}, c{i}");
    }
    line(&format!(
        "local reply = struct.pack('<BI8{words}', allowed and 1 or 0, now{packed})"
    ));
    if record {
        line("if allowed then");
        // The TTL goes as text: Redis 7.0 prints a number handed to
        // `redis.call` with `%.17g`, some 2,000 instructions.
        line("  if rolled or fresh then");
        line(&format!(
            "    redis.call('SET', KEYS[1], {stored}, 'PX', '{ttl}')"
        ));
        line("  else");
        line(&format!(
            "    redis.call('SET', KEYS[1], {stored}, 'KEEPTTL')"
        ));
        line("  end");
        line("end");
    }
    line("return reply");
    lua
}

/// Whether `previous * (w - elapsed) <= (max - current - 1) * w` can be
/// compared in doubles as written: the right side is at most
/// `(max - 1) * w`, exact below 2^53, and a left side that rounds is at
/// least 2^53, so larger whichever way it rounds.
fn plain(max: u64, w: u64) -> bool {
    u128::from(max.saturating_sub(1)) * u128::from(w) < EXACT
}

/// `a * b <= c * d` for integers below 2^53 whose products may not be:
/// the products on 16-bit limbs, nine limbs each, least significant first.
const EXACT_FITS: &str = "\
local function fits(a, b, c, d)
  local lhs, rhs = a * b, c * d
  if lhs < 9007199254740992 then return rhs >= 9007199254740992 or lhs <= rhs end
  if rhs < 9007199254740992 then return false end
  local function product(x, y)
    local xs, ys = {}, {}
    for l = 1, 4 do
      xs[l], ys[l] = x % 65536, y % 65536
      x, y = (x - xs[l]) / 65536, (y - ys[l]) / 65536
    end
    local sum = {0, 0, 0, 0, 0, 0, 0, 0, 0}
    for l = 1, 4 do
      local carry = 0
      for m = 1, 4 do
        local v = sum[l + m - 1] + xs[l] * ys[m] + carry
        carry = math.floor(v / 65536)
        sum[l + m - 1] = v - carry * 65536
      end
      local at = l + 4
      while carry > 0 do
        local v = sum[at] + carry
        carry = math.floor(v / 65536)
        sum[at] = v - carry * 65536
        at = at + 1
      end
    end
    return sum
  end
  local x, y = product(a, b), product(c, d)
  for l = 9, 1, -1 do
    if x[l] ~= y[l] then return x[l] < y[l] end
  end
  return true
end";
