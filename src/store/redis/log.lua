-- Sliding window log: a ring of the most recent accepted timestamps, as
-- many as the largest limit, judged for every limit of a policy at once.
--
-- KEYS[1]  the ring: 8 bytes of header (index of the oldest stamp, number
--          of stamps; 4 bytes each), then 8 bytes per stamp
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  ring capacity: the largest max; negative to judge without recording
-- ARGV[3]  TTL in milliseconds, set on every accepted request
-- ARGV[4..] max, window (microseconds) for each limit
--
-- Returns {0, now, blocking stamp or -1 per limit} when refused, or
-- {1, now, then per limit the stamps inside its window and the oldest of
-- them (or -1)} when accepted and recorded.

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local cap = tonumber(ARGV[2])
local peek = cap < 0
if peek then cap = -cap end
local n = (#ARGV - 3) / 2
local key = KEYS[1]

-- Rings up to 2,048 stamps (16 KiB) are read whole, which costs one call
-- instead of one per stamp looked at; larger ones a stamp at a time, so
-- that a decision stays O(log n) however large the limit.
local whole = nil
if cap <= 2048 then
  whole = redis.call('GET', key) or ''
  if #whole < 8 then whole = '' end
end
local header
if whole then
  header = string.sub(whole, 1, 8)
else
  header = redis.call('GETRANGE', key, 0, 7)
end
local head, len = 0, 0
if #header == 8 then
  head, len = struct.unpack('<I4I4', header)
end
if len > cap or head >= cap or (len < cap and head ~= 0) then
  head, len = 0, 0
end

local function stamp(i)
  local at = head + i
  if at >= cap then at = at - cap end
  local s
  if whole then
    s = string.sub(whole, 9 + at * 8, 16 + at * 8)
  else
    s = redis.call('GETRANGE', key, 8 + at * 8, 15 + at * 8)
  end
  return (struct.unpack('<i8', s))
end

-- The index of the oldest stamp still inside a window of `w` at `now`.
local function first_inside(w)
  local oldest_counted = now - w
  local low, high = 0, len
  while low < high do
    local mid = math.floor((low + high) / 2)
    if stamp(mid) < oldest_counted then low = mid + 1 else high = mid end
  end
  return low
end

if len > 0 then
  local newest = stamp(len - 1)
  if newest > now then now = newest end
end

local allowed = 1
local blocking = {}
for i = 1, n do
  local max = tonumber(ARGV[2 + 2 * i])
  local w = tonumber(ARGV[3 + 2 * i])
  blocking[i] = -1
  if len >= max then
    local b = stamp(len - max)
    if b + w >= now then
      blocking[i] = b
      allowed = 0
    end
  end
end
if allowed == 0 then
  local reply = {0, now}
  for i = 1, n do reply[#reply + 1] = blocking[i] end
  return reply
end

if peek then
  -- Counts as if this request were recorded: one more in every window. A
  -- full ring would drop its oldest stamp, which (the request fitting) lies
  -- outside every window.
  local reply = {1, now}
  for i = 1, n do
    local low = first_inside(tonumber(ARGV[3 + 2 * i]))
    reply[#reply + 1] = len - low + 1
    if low < len then
      reply[#reply + 1] = stamp(low)
    else
      reply[#reply + 1] = now
    end
  end
  return reply
end

local slot
if len < cap then
  slot = len
  len = len + 1
else
  slot = head
  head = head + 1
  if head >= cap then head = 0 end
end
local header_bytes = struct.pack('<I4I4', head, len)
local stamp_bytes = struct.pack('<i8', now)
if whole then
  -- The local copy follows the write, for the counts below.
  local before = string.sub(whole, 9, 8 + slot * 8)
  local after = string.sub(whole, 17 + slot * 8)
  whole = header_bytes .. before .. stamp_bytes .. after
end
if whole and cap <= 128 then
  -- Small rings are rewritten whole, so Redis allocates exactly their size.
  redis.call('SET', key, whole, 'PX', ARGV[3])
else
  redis.call('SETRANGE', key, 0, header_bytes)
  redis.call('SETRANGE', key, 8 + slot * 8, stamp_bytes)
  redis.call('PEXPIRE', key, ARGV[3])
end

local reply = {1, now}
for i = 1, n do
  local low = first_inside(tonumber(ARGV[3 + 2 * i]))
  reply[#reply + 1] = len - low
  if low < len then
    reply[#reply + 1] = stamp(low)
  else
    reply[#reply + 1] = -1
  end
end
return reply
