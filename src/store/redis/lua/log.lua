-- tower-sliding-window: {{kind}} for {{signature}} ({{mode}}), TTL {{ttl}} ms
-- The sliding window log, for one policy whose limits are the constants
-- below. KEYS[1] holds a ring of 8-byte stamps, then a trailer: the ring's
-- head and length, the newest stamp, and per limit a cursor, its stamp and
-- the next (docs/design.md, "Redis"). ARGV[1], if given, is now in µs.
{{now}}
--@if penalty
{{penalty_check}}
--@end
local key = KEYS[1]
local format = string.format
local {{state}}
--@if whole
local whole = redis.call('GET', key) or ''
if #whole >= {{trailer}} then
  {{state}} = struct.unpack('{{trailer_format}}', whole, #whole - {{trailer}} + 1)
--@else
local trailer = redis.call('GETRANGE', key, '-{{trailer}}', '-1')
if #trailer >= {{trailer}} then
  {{state}} = struct.unpack('{{trailer_format}}', trailer)
--@end
end
-- A trailer that does not hold together reads as a fresh key: a ring
-- larger than its slots, a cursor past the stamps, a next stamp where
-- there is none or none where there is one, or a ring read whole whose
-- string is not as long as its trailer says.
if not (len and len <= {{cap}} and head < {{cap}} and (len == {{cap}} or head == 0){{whole_length_holds}}{{cursors_hold}}) then
  {{state}} = {{fresh}}
end
-- The time asked for, kept for a key that turns out to be no state of
-- ours, whose newest stamp must not hold its clock.
local asked = now
if len > 0 and newest > now then now = newest end
-- A cursor whose stamp left the window moves to the oldest stamp inside
-- it: one step if its next stamp, known, is inside; else galloping, then
-- halving. Stamps are read in place (the ring's slot `at`, from the whole
-- string or a range of it): a local function would be built afresh, with
-- its upvalues, on every call.
--@each
if u{{i}} < len and s{{i}} < now - {{w}} then
  if t{{i}} >= 0 and t{{i}} >= now - {{w}} then
    u{{i}}, s{{i}}, t{{i}} = u{{i}} + 1, t{{i}}, -2
  else
    local oldest_counted, low = now - {{w}}, u{{i}} + 1
    if t{{i}} >= 0 then low = low + 1 end
    local high, step, seen, after = low, 1, -1, -2
    if high < len then
      local at = head + high
      if at >= {{cap}} then at = at - {{cap}} end
      if high + 1 < len and at + 1 < {{cap}} then
        seen, after = {{two_stamps_at}}
      else
        seen = {{stamp_at}}
      end
      if seen >= oldest_counted then
        step = 0
      else
        seen, after, low, high, step = -1, -2, high + 1, high + 1, 2
      end
    end
    if step > 0 then
      while high < len do
        local at = head + high
        if at >= {{cap}} then at = at - {{cap}} end
        seen = {{stamp_at}}
        if seen >= oldest_counted then break end
        seen = -1
        low = high + 1
        high = high + step
        step = step * 2
      end
      if high > len then high = len end
      while low < high do
        local mid, found = (low + high - (low + high) % 2) / 2
        local at = head + mid
        if at >= {{cap}} then at = at - {{cap}} end
        found = {{stamp_at}}
        if found < oldest_counted then low = mid + 1 else high, seen = mid, found end
      end
    end
    u{{i}}, s{{i}}, t{{i}} = low, seen, after
  end
  if u{{i}} + 1 >= len then t{{i}} = -1 end
end
--@end
-- Refused when any limit holds its max inside its window: the reply names
-- the stamp that blocks each full limit.
if {{any_full}} then
  local {{blocked}} = {{none_blocked}}
  --@each
  if len - u{{i}} >= {{max}} then
    local at = head + len - {{max}}
    if at >= {{cap}} then at = at - {{cap}} end
    b{{i}} = {{stamp_at}}
  end
  --@end
  --@if penalty
  --@if record
  redis.call('SET', KEYS[2], format('%d', now + {{penalty}}), 'PX', '{{penalty_ttl}}')
  --@end
  --@end
  return struct.pack('<Bi8{{blocked_format}}', 0, now, {{blocked}})
end
--@if not record
-- Accepted, judged only: each window's count with this request, and its
-- oldest stamp.
local {{oldest}} = {{nows}}
--@each
if u{{i}} < len then o{{i}} = s{{i}} end
--@end
return struct.pack('<Bi8{{judged_format}}', 1, now, {{judged}})
--@else
-- The new stamp is inside every window: a cursor that had no stamp inside
-- its window now has this one, and a cursor on the newest has it as next.
--@each
if u{{i}} == len then s{{i}} = now elseif t{{i}} == -1 then t{{i}} = now end
--@end
-- The TTL is renewed when the newest stamp enters a new span of the
-- longest window.
local renew = len == 0 or newest - newest % {{longest}} ~= now - now % {{longest}}
local slot, grows
if len < {{cap}} then
  slot = len
  len = len + 1
  grows = true
else
  slot = head
  head = head + 1
  if head == {{cap}} then head = 0 end
  -- The oldest stamp goes, so every cursor counts one fewer before it.
  {{cursors}} = {{cursors_less_one}}
end
-- A stamp in the ring's last slot lies right before the trailer: the two
-- are packed and written at once, and make the reply.
local written, written_at, written_to
if grows or slot == {{last_slot}} then
  written = struct.pack('<i8{{trailer_fields}}', now, {{recorded_state}})
  --@if whole
  -- A ring read whole is rewritten whole while it grows.
  if grows then
    local whole = string.sub(whole, 1, slot * 8) .. written
  --@else
  --@if rewrite_when_full
  -- A fresh key's first stamp, and the stamp that fills the ring, rewrite
  -- the string to size.
  if grows and (slot == 0 or len == {{cap}}) then
    local whole = written
    if slot > 0 then
      whole = string.sub(redis.call('GET', key), 1, slot * 8) .. whole
    end
  --@else
  -- A fresh key's first stamp rewrites the string; a ring this large then
  -- keeps the room it grows in place.
  if grows and slot == 0 then
    local whole = written
  --@end
  --@end
    if renew then
      redis.call('SET', key, whole, 'PX', '{{ttl}}')
    else
      redis.call('SET', key, whole, 'KEEPTTL')
    end
    return written
  end
  written_at, written_to = format('%d', slot * 8), 8 * len + {{trailer}}
else
  -- A full ring's other slots: the stamp and the trailer apart, and the
  -- trailer alone as the reply.
  written = struct.pack('{{trailer_format}}', {{recorded_state}})
  redis.call('SETRANGE', key, format('%d', slot * 8), struct.pack('<i8', now))
  written_at, written_to = '{{ring_bytes}}', {{string_bytes}}
end
-- SETRANGE answers with the string's length, which shows a string longer
-- than its trailer says: no state of ours, it starts afresh with this
-- request's stamp alone, at the time asked for.
if redis.call('SETRANGE', key, written_at, written) ~= written_to then
  written = struct.pack('<i8{{trailer_fields}}', asked, 0, 1, asked, {{restart}})
  redis.call('SET', key, written, 'PX', '{{ttl}}')
  return written
end
if renew then redis.call('PEXPIRE', key, '{{ttl}}') end
return written
--@end
