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
-- Numbers are read from ARGV by arithmetic on the strings, which costs Redis
-- less than calls to tonumber.
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local record, penalty = ARGV[2] ~= '0', ARGV[4] ~= '0' and ARGV[4] + 0
local n = (#ARGV - 5) / 2
if penalty then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end
local key = KEYS[1]
local format, pack, unpack = string.format, struct.pack, struct.unpack

-- Each limit's fields in one table, 5 a limit from st[5i - 4]: max,
-- window, and from the trailer its cursor, the cursor's stamp and the next.
-- One table, sized at once for two limits, costs Redis less than one per
-- field. The ring holds as many stamps as the largest max.
local st = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
local cap, longest = 0, 0
for i = 1, n do
  local m, win = ARGV[4 + 2 * i] + 0, ARGV[5 + 2 * i] + 0
  st[5 * i - 4], st[5 * i - 3] = m, win
  if m > cap then cap = m end
  if win > longest then longest = win end
end
local trailer = 16 + 20 * n
-- A small ring costs Redis less copied into Lua at once than read a few
-- bytes at a time, a large one more.
local whole_ring = cap <= 32

local whole, read, at
if whole_ring then
  whole = redis.call('GET', key) or ''
  read, at = whole, #whole - trailer + 1
else
  read, at = redis.call('GETRANGE', key, -trailer, -1), 1
end
-- A trailer that does not hold together reads as a fresh key: a ring
-- larger than its slots, a cursor past the stamps, a next stamp where
-- there is none or none where there is one, or a ring read whole whose
-- string is not as long as its trailer says.
local head, len, newest
local holds = #read >= trailer and at >= 1
if holds then
  head, len, newest = unpack('<I4I4i8', read, at)
  holds = len <= cap and head < cap and (len == cap or head == 0)
    and (not whole_ring or #whole == 8 * len + trailer)
  for i = 1, n do
    local cursor, stamp, next = unpack('<I4i8i8', read, at - 4 + 20 * i)
    st[5 * i - 2], st[5 * i - 1], st[5 * i] = cursor, stamp, next
    holds = holds and cursor <= len
      and (cursor + 1 < len and next >= -2 and next ~= -1 or cursor + 1 >= len and next == -1)
  end
end
if not holds then
  head, len, newest = 0, 0, -1
  for i = 1, n do st[5 * i - 2], st[5 * i - 1], st[5 * i] = 0, -1, -1 end
end
-- The time asked for, kept for a key that turns out to be no state of
-- ours, whose newest stamp must not hold its clock.
local asked = now
if len > 0 and newest > now then now = newest end

-- A cursor whose stamp left the window moves to the oldest stamp inside
-- it: one step if its next stamp, known, is inside; else galloping, then
-- halving. A stamp is read from the ring's slot `slot`, in the string read
-- whole or a range of it.
for i = 1, n do
  local u, s, t, oldest_counted = st[5 * i - 2], st[5 * i - 1], st[5 * i], now - st[5 * i - 3]
  if u < len and s < oldest_counted then
    if t >= 0 and t >= oldest_counted then
      u, s, t = u + 1, t, -2
    else
      local low = u + 1
      if t >= 0 then low = low + 1 end
      local high, step, seen, after = low, 1, -1, -2
      if high < len then
        local slot = head + high
        if slot >= cap then slot = slot - cap end
        if high + 1 < len and slot + 1 < cap then
          if whole_ring then
            seen, after = unpack('<i8i8', whole, 1 + slot * 8)
          else
            seen, after = unpack('<i8i8', redis.call('GETRANGE', key, format('%d', slot * 8), format('%d', 15 + slot * 8)))
          end
        elseif whole_ring then
          seen = unpack('<i8', whole, 1 + slot * 8)
        else
          seen = unpack('<i8', redis.call('GETRANGE', key, format('%d', slot * 8), format('%d', 7 + slot * 8)))
        end
        if seen >= oldest_counted then
          step = 0
        else
          seen, after, low, high, step = -1, -2, high + 1, high + 1, 2
        end
      end
      if step > 0 then
        while high < len do
          local slot = head + high
          if slot >= cap then slot = slot - cap end
          if whole_ring then
            seen = unpack('<i8', whole, 1 + slot * 8)
          else
            seen = unpack('<i8', redis.call('GETRANGE', key, format('%d', slot * 8), format('%d', 7 + slot * 8)))
          end
          if seen >= oldest_counted then break end
          seen = -1
          low = high + 1
          high = high + step
          step = step * 2
        end
        if high > len then high = len end
        while low < high do
          local mid, found = (low + high - (low + high) % 2) / 2
          local slot = head + mid
          if slot >= cap then slot = slot - cap end
          if whole_ring then
            found = unpack('<i8', whole, 1 + slot * 8)
          else
            found = unpack('<i8', redis.call('GETRANGE', key, format('%d', slot * 8), format('%d', 7 + slot * 8)))
          end
          if found < oldest_counted then low = mid + 1 else high, seen = mid, found end
        end
      end
      u, s, t = low, seen, after
    end
    if u + 1 >= len then t = -1 end
    st[5 * i - 2], st[5 * i - 1], st[5 * i] = u, s, t
  end
end

-- Refused when any limit holds its max inside its window: the reply names
-- the stamp that blocks each full limit.
local refused = false
for i = 1, n do
  if len - st[5 * i - 2] >= st[5 * i - 4] then refused = true end
end
if refused then
  local reply = {0, now, -1, -1}
  for i = 1, n do
    local max = st[5 * i - 4]
    reply[2 + i] = -1
    if len - st[5 * i - 2] >= max then
      local slot = head + len - max
      if slot >= cap then slot = slot - cap end
      if whole_ring then
        reply[2 + i] = unpack('<i8', whole, 1 + slot * 8)
      else
        reply[2 + i] = unpack('<i8', redis.call('GETRANGE', key, format('%d', slot * 8), format('%d', 7 + slot * 8)))
      end
    end
  end
  -- Redis reads an array up to its first nil.
  reply[3 + n] = nil
  if record and penalty then
    redis.call('SET', KEYS[2], format('%d', now + penalty),
      'PX', format('%d', math.ceil(penalty / 1000) + 1))
  end
  return reply
end

local reply = {1, now, 0, 0, 0, 0}
reply[3 + 2 * n] = nil
if not record then
  for i = 1, n do
    local u = st[5 * i - 2]
    reply[1 + 2 * i], reply[2 + 2 * i] = len - u + 1, now
    if u < len then reply[2 + 2 * i] = st[5 * i - 1] end
  end
  return reply
end

-- The new stamp is inside every window: a cursor that had no stamp inside
-- its window now has this one, and a cursor on the newest has it as next.
for i = 1, n do
  if st[5 * i - 2] == len then st[5 * i - 1] = now elseif st[5 * i] == -1 then st[5 * i] = now end
end
-- The TTL is renewed when the newest stamp enters a new span of the
-- longest window.
local renew = len == 0 or newest - newest % longest ~= now - now % longest
local ttl = 2 * longest
ttl = (ttl - ttl % 1000) / 1000 + 1
if 2 * longest % 1000 > 0 then ttl = ttl + 1 end
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
  for i = 1, n do st[5 * i - 2] = st[5 * i - 2] - 1 end
end
local written = pack('<I4I4i8', head, len, now)
for i = 1, n do
  local u, s = st[5 * i - 2], st[5 * i - 1]
  written = written .. pack('<I4i8i8', u, s, st[5 * i])
  reply[1 + 2 * i], reply[2 + 2 * i] = len - u, s
end
-- A stamp in the ring's last slot lies right before the trailer: the two
-- are written at once.
local written_at, written_to
if grows or slot == cap - 1 then
  written = pack('<i8', now) .. written
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
      redis.call('SET', key, rewrite, 'PX', format('%d', ttl))
    else
      redis.call('SET', key, rewrite, 'KEEPTTL')
    end
    return reply
  end
  written_at, written_to = format('%d', slot * 8), 8 * len + trailer
else
  -- A full ring's other slots: the stamp and the trailer apart.
  redis.call('SETRANGE', key, format('%d', slot * 8), pack('<i8', now))
  written_at, written_to = format('%d', cap * 8), 8 * cap + trailer
end
-- SETRANGE answers with the string's length, which shows a string longer
-- than its trailer says: no state of ours, it starts afresh with this
-- request's stamp alone, at the time asked for.
if redis.call('SETRANGE', key, written_at, written) ~= written_to then
  written = pack('<i8I4I4i8', asked, 0, 1, asked)
  reply = {1, asked}
  for i = 1, n do
    written = written .. pack('<I4i8i8', 0, asked, -1)
    reply[1 + 2 * i], reply[2 + 2 * i] = 1, asked
  end
  redis.call('SET', key, written, 'PX', format('%d', ttl))
  return reply
end
if renew then redis.call('PEXPIRE', key, format('%d', ttl)) end
return reply
