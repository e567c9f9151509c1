//! The Lua script of the sliding log, written for one policy: its limits,
//! ring size and TTL are constants in the text, as in `window_script`.
//!
//! A script shared by every policy had to take the policy in as an argument,
//! unpack it into a table and walk the limits in loops, and Redis printed
//! every number the script handed to `redis.call` with `%.17g`, about 2,000
//! instructions each. Written per policy, the script takes no argument but
//! the optional time, passes its constant offsets and TTL as string
//! literals, prints the offsets it computes with `%d`, and keeps each
//! limit's cursor in a local of its own.
//!
//! The state under `KEYS[1]` is one string:
//!
//! * the ring: 8 bytes per stamp, in microseconds, up to as many slots as
//!   the largest limit; a ring that is not full starts at slot 0 and holds
//!   no empty slot;
//! * then a trailer: the ring index of the oldest stamp and the number of
//!   stamps (4 bytes each), the newest stamp (8 bytes), then per limit a
//!   cursor (4 bytes: how many stamps, oldest first, are known to be
//!   outside its window), the stamp at that cursor (8 bytes; -1 if none)
//!   and the stamp after it (8 bytes; -1 if none, -2 if not known).
//!   Integers are little-endian.
//!
//! The fixed part comes last so that a growing ring's new stamp and the
//! trailer are one write at the string's end: `GETRANGE` finds the trailer
//! from the end (negative offsets) without knowing the ring's length. (With
//! the fixed part first, as this script had it before, every growing write
//! took two `SETRANGE`s.)
//!
//! A trailer that does not hold together (a ring larger than its slots, a
//! cursor past the stamps, a next stamp where there is none or none where
//! there is one, or, for a ring read whole, a length that does not match)
//! reads as a fresh key. So does a ring read whole whose string is not as
//! long as its trailer says. A ring read in ranges is not read whole: a
//! string longer than its trailer says is found at its first write
//! (`SETRANGE` answers with the length), which starts the key afresh with
//! that request's stamp and time (not the trailer's newest stamp, which
//! could lie in the future); until then, and for as long as it only
//! refuses (refusals write nothing), it is judged by that trailer. A
//! shorter one has its end padded with zeros by the next write, or makes
//! the script fail where it reads a stamp past the end, until it expires.
//! Nothing in the layout names its version: a state written in an earlier
//! layout may pass these checks and be misread until it expires.
//!
//! What the script does, for each call:
//!
//! * **Time.** `ARGV[1]`, now in microseconds from the client's clock, or,
//!   without it, the server's `TIME`; never earlier than the newest stamp,
//!   so that a clock stepping back cannot make recorded requests look newer.
//! * **Reading.** Rings up to [`READ_WHOLE_UP_TO`] stamps are read whole,
//!   in one `GET`. Larger ones are read a few bytes at a time with
//!   `GETRANGE`, so that a decision stays O(1) amortised (O(log n) at worst)
//!   however large the limit: copying a large ring into Lua costs more than
//!   the calls it saves, chiefly in garbage collection.
//! * **Writing.** A full ring is written in place, whatever its size: the
//!   new stamp and the trailer, one `SETRANGE` each, or one for both when
//!   the stamp goes in the last slot (and a `PEXPIRE` when the TTL is
//!   renewed). Rewriting it whole, one `SET`, saves a call but
//!   builds the whole string in Lua and copies it into Redis: when rings up
//!   to 128 stamps were read whole, a full ring of 128 took 37 % more
//!   instructions a call written whole than in place, and the two were
//!   even only at four stamps.
//!   Rewritten whole, a string is allocated to size; grown in place, Redis
//!   gives it spare room, up to as much again. So a ring read whole is
//!   rewritten whole while it grows. A ring read in ranges grows in place,
//!   the new stamp and the trailer in one `SETRANGE`, but is rewritten
//!   whole at most twice: a fresh key (none, expired, or one whose trailer
//!   does not hold together) gets its first stamp and trailer in one `SET`
//!   with the TTL, and the stamp that fills a ring of up
//!   to [`REWRITE_WHEN_FULL_UP_TO`] stamps rewrites it to size, once in the
//!   key's life: that one decision costs time linear in the ring.
//! * **Cursors.** Windows only move forward, so cursors do too: a cursor
//!   whose stamp is still inside its window stays put without a read; one
//!   whose next stamp (kept in the trailer) is inside moves one without a
//!   read; else it gallops forward, then halves, to the oldest stamp
//!   inside, and a first probe that finds the window reads the stamp after
//!   it in the same call. A cursor moving one stamp at a time therefore
//!   reads the ring about every other step; one on the newest stamp learns its
//!   next as the next request is recorded, and reads nothing.
//! * **Judging.** A limit of `max` is full when `max` stamps are inside its
//!   window; the request is refused if any limit is full.
//! * **Recording.** An accepted request's stamp goes after the newest; a
//!   full ring drops its oldest stamp, which (the request fitting) is
//!   outside every window. The TTL is set on a fresh key, and renewed only
//!   when the newest stamp enters a new span of the longest window: a stamp
//!   is then at most one window younger than the renewal, and the TTL of two
//!   windows outlives it by one.
//! * **Reply.** One string. Refused: a byte for the verdict (0), now (8
//!   bytes), then per limit the stamp that blocks it (or -1), 8 signed
//!   bytes each. Accepted and recorded: the trailer as packed for writing,
//!   after the new stamp where the two were packed and written together
//!   (every write but a full ring's away from its last slot, unless that
//!   write starts the key afresh). The trailer
//!   holds all the client needs (now is the newest stamp; a limit's count,
//!   this request included, is the stamps from its cursor on, the oldest
//!   of them the cursor's stamp), so no reply is packed of its own.
//!   Accepted by the script that only judges: the verdict (1), now, then
//!   per limit the stamps inside its window counting this request and the
//!   oldest of them.

use crate::policy::Policy;

use super::scripts::{per_limit, preamble, ttl_millis};

/// The largest ring read whole, and rewritten whole while it grows.
///
/// Under callgrind, full rings read whole took about 5 % fewer
/// redis-server instructions a call than read a few bytes at a time at 24
/// stamps, about 3 % fewer at 32, about as many at 48 and 64, and 18 % more
/// at 128. For one limit of 100, ring full: 55.7k read whole, 49.3k in
/// ranges, 13 % more.
pub(super) const READ_WHOLE_UP_TO: u32 = 32;

/// The largest ring read in ranges that the stamp filling it rewrites to
/// size. The rewrite copies the whole string in and out of Lua while Redis
/// serves no one else: timed with `SLOWLOG` (seven runs each), 82–156 µs
/// for 1,024 stamps, 227–294 µs for 4,096, 0.74–2.2 ms for 16,384 and
/// 5.6–10.1 ms for 131,072, where the same two calls on a 36-byte string
/// took 38–51 µs. A larger
/// ring keeps the room it grew in place (Redis adds at most as much again,
/// and at most 1 MiB).
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

/// The script judging requests under `policy` (a sliding log), recording
/// those it accepts if `record`.
pub(super) fn source(policy: &Policy, record: bool) -> String {
    let limits: Vec<(u32, u64)> = policy
        .limits()
        .iter()
        .map(|limit| (limit.max(), limit.window_micros()))
        .collect();
    let n = limits.len();
    let cap = limits.iter().map(|&(max, _)| max).max().unwrap_or(0);
    let longest = super::scripts::longest_micros(policy);
    let ttl = ttl_millis(policy);
    let trailer = trailer_len(n);
    let trailer_format = format!("<I4I4i8{}", "I4i8i8".repeat(n));
    let whole = cap <= READ_WHOLE_UP_TO;
    let each = |template: &str| per_limit(n, template);
    let state = format!("head, len, newest, {}", each("u#, s#, t#"));
    let fresh = format!("0, 0, -1, {}", vec!["0, -1, -1"; n].join(", "));

    let mut lua = preamble("sliding window log", policy, record);
    let mut line = |text: &str| {
        lua.push_str(text);
        lua.push('\n');
    };
    line("local key = KEYS[1]");
    line("local format = string.format");
    line(&format!("local {state}"));
    if whole {
        line("local whole = redis.call('GET', key) or ''");
        line(&format!("if #whole >= {trailer} then"));
        line(&format!(
            "  {state} = struct.unpack('{trailer_format}', whole, #whole - {} + 1)",
            trailer
        ));
    } else {
        // The last bytes, wherever the string ends.
        line(&format!(
            "local trailer = redis.call('GETRANGE', key, '-{trailer}', '-1')"
        ));
        line(&format!("if #trailer >= {trailer} then"));
        line(&format!(
            "  {state} = struct.unpack('{trailer_format}', trailer)"
        ));
    }
    line("end");
    let mut valid =
        format!("len and len <= {cap} and head < {cap} and (len == {cap} or head == 0)");
    if whole {
        valid.push_str(&format!(" and #whole == 8 * len + {trailer}"));
    }
    // A next stamp is known only where there is one.
    for i in 1..=n {
        valid.push_str(&format!(
            " and u{i} <= len and (u{i} + 1 < len and t{i} >= -2 and t{i} ~= -1 or u{i} + 1 >= len and t{i} == -1)"
        ));
    }
    line(&format!("if not ({valid}) then"));
    line(&format!("  {state} = {fresh}"));
    line("end");

    // Stamps are read in place rather than through local functions, which
    // Lua would build afresh (with their upvalues) on every call.
    let read = |var: &str, index: &str, indent: &str| -> String {
        let mut lines = vec![
            format!("local at = head + {index}"),
            format!("if at >= {cap} then at = at - {cap} end"),
        ];
        if whole {
            lines.push(format!("{var} = struct.unpack('<i8', whole, 1 + at * 8)"));
        } else {
            lines.push("at = at * 8".to_owned());
            lines.push(format!(
                "{var} = struct.unpack('<i8', redis.call('GETRANGE', key, format('%d', at), format('%d', at + 7)))"
            ));
        }
        format!("{indent}{}", lines.join(&format!("\n{indent}")))
    };
    // The time asked for, kept for a key that turns out to be no state of
    // ours, whose newest stamp must not hold its clock.
    line("local asked = now");
    line("if len > 0 and newest > now then now = newest end");

    // The stamp at `index` into `var` and, where the next one lies in the
    // following slot, that one into `next` in the same read (else `next`
    // stays unknown).
    let read_two = |var: &str, next: &str, index: &str, indent: &str| -> String {
        let (two, one) = if whole {
            (
                format!("{var}, {next} = struct.unpack('<i8i8', whole, 1 + at * 8)"),
                format!("{var} = struct.unpack('<i8', whole, 1 + at * 8)"),
            )
        } else {
            (
                format!("{var}, {next} = struct.unpack('<i8i8', redis.call('GETRANGE', key, format('%d', at * 8), format('%d', 15 + at * 8)))"),
                format!("{var} = struct.unpack('<i8', redis.call('GETRANGE', key, format('%d', at * 8), format('%d', 7 + at * 8)))"),
            )
        };
        [
            format!("local at = head + {index}"),
            format!("if at >= {cap} then at = at - {cap} end"),
            format!("if {index} + 1 < len and at + 1 < {cap} then"),
            format!("  {two}"),
            "else".to_owned(),
            format!("  {one}"),
            "end".to_owned(),
        ]
        .map(|text| format!("{indent}{text}"))
        .join("\n")
    };

    // A cursor whose stamp left the window moves to the oldest stamp inside
    // it (or past the newest): one step if its next stamp, known, is
    // inside; else galloping, then halving. A first probe that finds the
    // window reads the stamp after it too, so that a cursor moving one
    // stamp at a time reads the ring every other step. Its next stamp is
    // otherwise unknown, or none if there is none.
    for (i, &(_, w)) in limits.iter().enumerate() {
        let i = i + 1;
        line(&format!("if u{i} < len and s{i} < now - {w} then"));
        line(&format!("  if t{i} >= 0 and t{i} >= now - {w} then"));
        line(&format!("    u{i}, s{i}, t{i} = u{i} + 1, t{i}, -2"));
        line("  else");
        line(&format!(
            "    local oldest_counted, low = now - {w}, u{i} + 1"
        ));
        // A next stamp known to be outside need not be read again.
        line(&format!("    if t{i} >= 0 then low = low + 1 end"));
        line("    local high, step, seen, after = low, 1, -1, -2");
        line("    if high < len then");
        line(&read_two("seen", "after", "high", "      "));
        line("      if seen >= oldest_counted then");
        line("        step = 0");
        line("      else");
        line("        seen, after, low, high, step = -1, -2, high + 1, high + 1, 2");
        line("      end");
        line("    end");
        line("    if step > 0 then");
        line("      while high < len do");
        line(&read("seen", "high", "        "));
        line("        if seen >= oldest_counted then break end");
        line("        seen = -1");
        line("        low = high + 1");
        line("        high = high + step");
        line("        step = step * 2");
        line("      end");
        line("      if high > len then high = len end");
        line("      while low < high do");
        line("        local mid, found = (low + high - (low + high) % 2) / 2");
        line(&read("found", "mid", "        "));
        line(
            "        if found < oldest_counted then low = mid + 1 else high, seen = mid, found end",
        );
        line("      end");
        line("    end");
        line(&format!("    u{i}, s{i}, t{i} = low, seen, after"));
        line("  end");
        line(&format!("  if u{i} + 1 >= len then t{i} = -1 end"));
        line("end");
    }

    // Refused: the stamp blocking each full limit.
    let full: Vec<String> = limits
        .iter()
        .enumerate()
        .map(|(i, &(max, _))| format!("len - u{} >= {max}", i + 1))
        .collect();
    line(&format!("if {} then", full.join(" or ")));
    line(&format!(
        "  local {} = {}",
        each("b#"),
        vec!["-1"; n].join(", ")
    ));
    for (i, &(max, _)) in limits.iter().enumerate() {
        let i = i + 1;
        line(&format!("  if len - u{i} >= {max} then"));
        line(&read(&format!("b{i}"), &format!("len - {max}"), "    "));
        line("  end");
    }
    line(&format!(
        "  return struct.pack('<Bi8{}', 0, now, {})",
        "i8".repeat(n),
        each("b#")
    ));
    line("end");

    // Accepted, judged only: each window's count with this request, and
    // its oldest stamp. A recorded request's reply is the trailer as
    // written (after its stamp, where the two were written together).
    if !record {
        line(&format!(
            "local {} = {}",
            each("o#"),
            vec!["now"; n].join(", ")
        ));
        for i in 1..=n {
            line(&format!("if u{i} < len then o{i} = s{i} end"));
        }
        line(&format!(
            "return struct.pack('<Bi8{}', 1, now, {})",
            "i8i8".repeat(n),
            each("len - u# + 1, o#")
        ));
        return lua;
    }

    // The new stamp is inside every window: a cursor that had no stamp
    // inside its window now has this one, and a cursor on the newest stamp
    // has it as its next.
    for i in 1..=n {
        line(&format!(
            "if u{i} == len then s{i} = now elseif t{i} == -1 then t{i} = now end"
        ));
    }
    line(&format!(
        "local renew = len == 0 or newest - newest % {longest} ~= now - now % {longest}"
    ));
    line("local slot, grows");
    line(&format!("if len < {cap} then"));
    line("  slot = len");
    line("  len = len + 1");
    line("  grows = true");
    line("else");
    line("  slot = head");
    line("  head = head + 1");
    line(&format!("  if head == {cap} then head = 0 end"));
    // The oldest stamp goes, so every cursor counts one fewer before it.
    line(&format!("  {} = {}", each("u#"), each("u# - 1")));
    line("end");
    // The state as recorded: this request's stamp is the newest.
    let recorded_state = state.replace("newest", "now");
    // A key whose string turns out to be no state of ours starts afresh,
    // holding this request's stamp alone, at the time asked for.
    let restart = |indent: &str| -> String {
        [
            format!(
                "written = struct.pack('<i8{}', asked, 0, 1, asked, {})",
                &trailer_format[1..],
                vec!["0, asked, -1"; n].join(", ")
            ),
            format!("redis.call('SET', key, written, 'PX', '{ttl}')"),
            "return written".to_owned(),
        ]
        .map(|text| format!("{indent}{text}"))
        .join("\n")
    };
    // A stamp in the last slot a ring has (the one it grows into, or a full
    // ring's last) lies right before the trailer: the two are packed and
    // written at once, and make the reply.
    line(&format!("if grows or slot == {} then", cap - 1));
    line(&format!(
        "  local written = struct.pack('<i8{}', now, {})",
        &trailer_format[1..],
        recorded_state
    ));
    // Whole rewrites, as the module's docs give them: every growing write
    // of a ring read whole; of one read in ranges, a fresh key's first
    // stamp (three calls in one, and the write most keys of sparse clients
    // get, starting afresh each time their key expires) and, for a ring
    // small enough to copy at once, the stamp that fills it (so that no
    // room grown for it stays).
    if whole {
        line("  if grows then");
        line("    local whole = string.sub(whole, 1, slot * 8) .. written");
    } else if cap <= REWRITE_WHEN_FULL_UP_TO {
        line(&format!("  if grows and (slot == 0 or len == {cap}) then"));
        line("    local whole = written");
        line("    if slot > 0 then");
        line("      whole = string.sub(redis.call('GET', key), 1, slot * 8) .. whole");
        line("    end");
    } else {
        line("  if grows and slot == 0 then");
        line("    local whole = written");
    }
    line("    if renew then");
    line(&format!(
        "      redis.call('SET', key, whole, 'PX', '{ttl}')"
    ));
    line("    else");
    line("      redis.call('SET', key, whole, 'KEEPTTL')");
    line("    end");
    line("    return written");
    line("  end");
    // SETRANGE answers with the string's length, which shows a string
    // longer than its trailer says (written by no script of ours): its
    // trailer, read from the end, would never be overwritten, and the key
    // would be judged by it until it expired.
    line(&format!(
        "  if redis.call('SETRANGE', key, format('%d', slot * 8), written) ~= 8 * len + {trailer} then"
    ));
    line(&restart("    "));
    line("  end");
    line(&format!(
        "  if renew then redis.call('PEXPIRE', key, '{ttl}') end"
    ));
    line("  return written");
    line("end");
    // A full ring's other slots: the stamp and the trailer apart, and the
    // trailer alone as the reply.
    line(&format!(
        "local written = struct.pack('{trailer_format}', {})",
        recorded_state
    ));
    line("redis.call('SETRANGE', key, format('%d', slot * 8), struct.pack('<i8', now))");
    line(&format!(
        "if redis.call('SETRANGE', key, '{}', written) ~= {} then",
        u64::from(cap) * 8,
        u64::from(cap) * 8 + trailer as u64
    ));
    line(&restart("  "));
    line("end");
    line(&format!(
        "if renew then redis.call('PEXPIRE', key, '{ttl}') end"
    ));
    line("return written");
    lua
}
