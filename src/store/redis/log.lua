-- Sliding window log: a ring of the most recent accepted timestamps, as
-- many as the largest limit, judged for every limit of a policy at once.
--
-- KEYS[1]  the ring: a header (the index of the oldest stamp and the number
--          of stamps, 4 bytes each; the newest stamp, 8 bytes; per limit a
--          cursor, 4 bytes, and the stamp at it, 8 bytes), then 8 bytes
--          per stamp
-- ARGV     as read by arguments.lua, with the mode 'l' (or 'L' to judge
--          without recording) and a TTL of twice the longest window
--
-- Returns one string: a byte for the verdict (1 accepted), now (8 bytes),
-- then 8 signed bytes per limit: when refused, the stamp that blocks it (or
-- -1); when accepted, the stamps inside its window counting this request,
-- then the oldest of them.
--
-- Written for Redis's CPU: one string in and one out, and the TTL renewed only when the newest stamp enters a new span of
-- the longest window. A stamp is then at most one window younger than the
-- renewal, so the ring outlives it by at least one window, as it must.

-- `now`, `spec` and `n` come from arguments.lua, prepended.
local p = {struct.unpack('<c1I8' .. string.rep('I4I8', n), spec)}
local peek, ttl = p[1] == 'L', p[2]
-- Limit i's max and window are p[1 + 2i] and p[2 + 2i].
local cap, longest = 0, 0
for i = 1, n do
  if p[1 + 2 * i] > cap then cap = p[1 + 2 * i] end
  if p[2 + 2 * i] > longest then longest = p[2 + 2 * i] end
end
local key = KEYS[1]

-- Rings up to 128 stamps (1 KiB) are read and written whole: one call each
-- way, and Redis allocates exactly their size. Larger ones are read and
-- written a few bytes at a time, so that a decision stays O(1) amortized
-- (O(log n) at worst) however large the limit: copying a large ring in and
-- out of Lua costs more than the calls saved, chiefly in garbage collection.
local header_size = 16 + 12 * n
local header_format = '<I4I4i8' .. string.rep('I4i8', n)
local whole = nil
local header
if cap <= 128 then
  whole = redis.call('GET', key) or ''
  header = whole
else
  header = redis.call('GETRANGE', key, 0, header_size - 1)
end
-- h[1]: the index of the oldest stamp; h[2]: the number of stamps; h[3]:
-- the newest stamp (-1 if none); then per limit i, h[2 + 2i]: its cursor,
-- the number of stamps (oldest first) known to be outside its window, and
-- h[3 + 2i]: the stamp at the cursor (-1 if none), the oldest inside.
-- Windows only move forward (the time never goes below the newest stamp),
-- so cursors only move forward too, and mostly stay put or move by one.
local h
if #header >= header_size then
  h = {struct.unpack(header_format, header)}
end
local valid = h and h[2] <= cap and h[1] < cap and (h[2] == cap or h[1] == 0)
  and (not whole or #whole == header_size + 8 * h[2])
if valid then
  for i = 1, n do
    if h[2 + 2 * i] > h[2] then valid = false end
  end
end
if not valid then
  h = {0, 0, -1}
  for i = 1, n do
    h[2 + 2 * i], h[3 + 2 * i] = 0, -1
  end
end
local head, len = h[1], h[2]

local function stamp(i)
  local at = head + i
  if at >= cap then at = at - cap end
  if whole then
    return (struct.unpack('<i8', whole, header_size + 1 + at * 8))
  end
  local bytes = redis.call('GETRANGE', key, header_size + at * 8, header_size + 7 + at * 8)
  return (struct.unpack('<i8', bytes))
end

local newest = h[3]
if len > 0 and newest > now then now = newest end

-- Moves each cursor to the oldest stamp inside its window: no read while
-- the stamp at the cursor is still inside; else galloping, then halving.
for i = 1, n do
  local oldest_counted = now - p[2 + 2 * i]
  local low = h[2 + 2 * i]
  if low < len and h[3 + 2 * i] < oldest_counted then
    low = low + 1
    local high, step, seen = low, 1, -1
    while high < len do
      seen = stamp(high)
      if seen >= oldest_counted then break end
      seen = -1
      low = high + 1
      high = high + step
      step = step * 2
    end
    if high > len then high = len end
    while low < high do
      local mid = (low + high - (low + high) % 2) / 2
      local at = stamp(mid)
      if at < oldest_counted then
        low = mid + 1
      else
        high, seen = mid, at
      end
    end
    h[2 + 2 * i], h[3 + 2 * i] = low, seen
  end
end

local allowed = 1
local values = {}
for i = 1, n do
  local max = p[1 + 2 * i]
  values[i] = -1
  if len - h[2 + 2 * i] >= max then
    values[i] = stamp(len - max)
    allowed = 0
  end
end
if allowed == 0 then
  return struct.pack('<Bi8' .. string.rep('i8', n), 0, now, unpack(values))
end

-- Counts as they stand once this request is recorded: one more in every
-- window. A full ring drops its oldest stamp, which (the request fitting)
-- lies outside every window.
for i = 1, n do
  values[2 * i - 1] = len - h[2 + 2 * i] + 1
  if h[2 + 2 * i] < len then
    values[2 * i] = h[3 + 2 * i]
  else
    values[2 * i] = now
  end
end
local reply = struct.pack('<Bi8' .. string.rep('i8i8', n), 1, now, unpack(values))
if peek then
  return reply
end

-- The new stamp is inside every window, so a cursor that had no stamp
-- inside its window now has this one as the oldest inside.
for i = 1, n do
  if h[2 + 2 * i] == len then h[3 + 2 * i] = now end
end
local slot
if len < cap then
  slot = len
  len = len + 1
else
  -- The oldest stamp goes, so every cursor counts one fewer before it.
  slot = head
  head = head + 1
  if head >= cap then head = 0 end
  for i = 1, n do h[2 + 2 * i] = h[2 + 2 * i] - 1 end
end
local renew = h[2] == 0 or newest - newest % longest ~= now - now % longest
h[1], h[2], h[3] = head, len, now
local header_bytes = struct.pack(header_format, unpack(h, 1, 3 + 2 * n))
local stamp_bytes = struct.pack('<i8', now)
if whole then
  local at = header_size + slot * 8
  whole = header_bytes .. string.sub(whole, header_size + 1, at) .. stamp_bytes
    .. string.sub(whole, at + 9, header_size + len * 8)
  if renew then
    redis.call('SET', key, whole, 'PX', ttl)
  else
    redis.call('SET', key, whole, 'KEEPTTL')
  end
else
  redis.call('SETRANGE', key, 0, header_bytes)
  redis.call('SETRANGE', key, header_size + slot * 8, stamp_bytes)
  if renew then
    redis.call('PEXPIRE', key, ttl)
  end
end
return reply
