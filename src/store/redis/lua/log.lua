-- tower-sliding-window: the sliding log, for requests of one unit. One
-- script for every policy of this algorithm: the limits come as
-- arguments. The ring, its trailer and the replies are in docs/design.md,
-- "The Redis store".
--
-- KEYS[1]  the key's state: a ring of 8-byte stamps, then a trailer (the
--          ring's head and length, the newest stamp, and per limit a
--          cursor, its stamp and the next)
-- KEYS[2]  until when (µs) the key serves a penalty; read and written only
--          when ARGV[4] is not 0
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  1 judges a request of one unit and records it if accepted; 0
--          judges it and records nothing
-- ARGV[3]  '' (settling is log_rewrite.lua's)
-- ARGV[4]  the penalty in µs a refusal starts (0: none)
-- ARGV[5]  'l'
-- ARGV[6], ARGV[7], ...  each limit's max and window in µs
--
-- The reply is {1, now, then for each limit the stamps inside its window
-- with this request's, and the oldest of them} when accepted, {0, now, then
-- for each limit the stamp that blocks it or -1} when refused, and {2, now,
-- the penalty's end} for a key serving a penalty.
--
--   redis-cli --eval log.lua k , '' 1 '' 0 l 10 1000000 100 60000000
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local record, penalty = ARGV[2] ~= '0', tonumber(ARGV[4])
local n = (#ARGV - 5) / 2
if penalty > 0 then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end
local key = KEYS[1]
local format = string.format

-- The limits; the ring holds as many stamps as the largest max.
local max, w = {}, {}
local cap, longest = 0, 0
for i = 1, n do
  local m, win = tonumber(ARGV[4 + 2 * i]), tonumber(ARGV[5 + 2 * i])
  max[i], w[i] = m, win
  if m > cap then cap = m end
  if win > longest then longest = win end
end
local ttl = format('%d', math.ceil(2 * longest / 1000) + 1)
local trailer = 16 + 20 * n
local trailer_format = '<I4I4i8' .. string.rep('I4i8i8', n)
-- A small ring costs Redis less copied into Lua at once than read a few
-- bytes at a time, a large one more.
local whole_ring = cap <= 32

local whole, fields
if whole_ring then
  whole = redis.call('GET', key) or ''
  if #whole >= trailer then fields = {struct.unpack(trailer_format, whole, #whole - trailer + 1)} end
else
  local read = redis.call('GETRANGE', key, -trailer, -1)
  if #read >= trailer then fields = {struct.unpack(trailer_format, read)} end
end
-- A trailer that does not hold together reads as a fresh key: a ring
-- larger than its slots, a cursor past the stamps, a next stamp where
-- there is none or none where there is one, or a ring read whole whose
-- string is not as long as its trailer says.
local head, len, newest
local u, s, t = {}, {}, {}
local holds = false
if fields then
  head, len, newest = fields[1], fields[2], fields[3]
  holds = len <= cap and head < cap and (len == cap or head == 0)
    and (not whole_ring or #whole == 8 * len + trailer)
  for i = 1, n do
    local cursor, next = fields[1 + 3 * i], fields[3 + 3 * i]
    u[i], s[i], t[i] = cursor, fields[2 + 3 * i], next
    holds = holds and cursor <= len
      and (cursor + 1 < len and next >= -2 and next ~= -1 or cursor + 1 >= len and next == -1)
  end
end
if not holds then
  head, len, newest = 0, 0, -1
  for i = 1, n do u[i], s[i], t[i] = 0, -1, -1 end
end
-- The time asked for, kept for a key that turns out to be no state of
-- ours, whose newest stamp must not hold its clock.
local asked = now
if len > 0 and newest > now then now = newest end

-- The stamp in the ring's slot `at`, and with it the next slot's (-2 for
-- none), from the string read whole or a range of it.
local function stamp(at)
  if whole_ring then return struct.unpack('<i8', whole, 1 + at * 8) end
  return struct.unpack('<i8', redis.call('GETRANGE', key, format('%d', at * 8), format('%d', 7 + at * 8)))
end
local function two_stamps(at)
  if whole_ring then return struct.unpack('<i8i8', whole, 1 + at * 8) end
  return struct.unpack('<i8i8', redis.call('GETRANGE', key, format('%d', at * 8), format('%d', 15 + at * 8)))
end

-- A cursor whose stamp left the window moves to the oldest stamp inside
-- it: one step if its next stamp, known, is inside; else galloping, then
-- halving.
for i = 1, n do
  if u[i] < len and s[i] < now - w[i] then
    if t[i] >= 0 and t[i] >= now - w[i] then
      u[i], s[i], t[i] = u[i] + 1, t[i], -2
    else
      local oldest_counted, low = now - w[i], u[i] + 1
      if t[i] >= 0 then low = low + 1 end
      local high, step, seen, after = low, 1, -1, -2
      if high < len then
        local at = head + high
        if at >= cap then at = at - cap end
        if high + 1 < len and at + 1 < cap then
          seen, after = two_stamps(at)
        else
          seen = stamp(at)
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
          if at >= cap then at = at - cap end
          seen = stamp(at)
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
          if at >= cap then at = at - cap end
          found = stamp(at)
          if found < oldest_counted then low = mid + 1 else high, seen = mid, found end
        end
      end
      u[i], s[i], t[i] = low, seen, after
    end
    if u[i] + 1 >= len then t[i] = -1 end
  end
end

-- Refused when any limit holds its max inside its window: the reply names
-- the stamp that blocks each full limit.
local refused = false
for i = 1, n do
  if len - u[i] >= max[i] then refused = true end
end
if refused then
  local reply = {0, now}
  for i = 1, n do
    reply[2 + i] = -1
    if len - u[i] >= max[i] then
      local at = head + len - max[i]
      if at >= cap then at = at - cap end
      reply[2 + i] = stamp(at)
    end
  end
  if record and penalty > 0 then
    redis.call('SET', KEYS[2], format('%d', now + penalty),
      'PX', format('%d', math.ceil(penalty / 1000) + 1))
  end
  return reply
end

local reply = {1, now}
if not record then
  for i = 1, n do
    reply[1 + 2 * i], reply[2 + 2 * i] = len - u[i] + 1, now
    if u[i] < len then reply[2 + 2 * i] = s[i] end
  end
  return reply
end

-- The new stamp is inside every window: a cursor that had no stamp inside
-- its window now has this one, and a cursor on the newest has it as next.
for i = 1, n do
  if u[i] == len then s[i] = now elseif t[i] == -1 then t[i] = now end
end
-- The TTL is renewed when the newest stamp enters a new span of the
-- longest window.
local renew = len == 0 or newest - newest % longest ~= now - now % longest
local slot, grows
if len < cap then
  slot = len
  len = len + 1
  grows = true
else
  slot = head
  head = head + 1
  if head == cap then head = 0 end
  -- The oldest stamp goes, so every cursor counts one fewer before it.
  for i = 1, n do u[i] = u[i] - 1 end
end
local state = {head, len, now}
for i = 1, n do
  state[1 + 3 * i], state[2 + 3 * i], state[3 + 3 * i] = u[i], s[i], t[i]
  reply[1 + 2 * i], reply[2 + 2 * i] = len - u[i], s[i]
end
-- A stamp in the ring's last slot lies right before the trailer: the two
-- are packed and written at once.
local written, written_at, written_to
if grows or slot == cap - 1 then
  written = struct.pack('<i8', now) .. struct.pack(trailer_format, unpack(state))
  -- A ring read whole is rewritten whole while it grows. A ring read in
  -- ranges is rewritten whole by a fresh key's first stamp and, up to
  -- 4,096 stamps, by the stamp that fills it, so that it keeps no spare
  -- room; a larger one keeps the room it grows in place.
  local rewrite
  if whole_ring then
    if grows then rewrite = string.sub(whole, 1, slot * 8) .. written end
  elseif grows and slot == 0 then
    rewrite = written
  elseif grows and len == cap and cap <= 4096 then
    rewrite = string.sub(redis.call('GET', key), 1, slot * 8) .. written
  end
  if rewrite then
    if renew then
      redis.call('SET', key, rewrite, 'PX', ttl)
    else
      redis.call('SET', key, rewrite, 'KEEPTTL')
    end
    return reply
  end
  written_at, written_to = format('%d', slot * 8), 8 * len + trailer
else
  -- A full ring's other slots: the stamp and the trailer apart.
  written = struct.pack(trailer_format, unpack(state))
  redis.call('SETRANGE', key, format('%d', slot * 8), struct.pack('<i8', now))
  written_at, written_to = format('%d', cap * 8), 8 * cap + trailer
end
-- SETRANGE answers with the string's length, which shows a string longer
-- than its trailer says: no state of ours, it starts afresh with this
-- request's stamp alone, at the time asked for.
if redis.call('SETRANGE', key, written_at, written) ~= written_to then
  state = {0, 1, asked}
  reply = {1, asked}
  for i = 1, n do
    state[1 + 3 * i], state[2 + 3 * i], state[3 + 3 * i] = 0, asked, -1
    reply[1 + 2 * i], reply[2 + 2 * i] = 1, asked
  end
  redis.call('SET', key, struct.pack('<i8', asked) .. struct.pack(trailer_format, unpack(state)), 'PX', ttl)
  return reply
end
if renew then redis.call('PEXPIRE', key, ttl) end
return reply
