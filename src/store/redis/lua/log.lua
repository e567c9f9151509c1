-- tower-sliding-window: the sliding window log, judged as
-- src/algorithm/log.rs judges it, for every policy (limits as arguments).
-- KEYS[1]  the stamps of accepted requests, struct.pack('<i8', stamp) each
--          (µs), at most the largest max: up to 128 oldest first; more in a
--          ring, as log.rs's VecDeque, behind struct.pack('<I4I4', head,
--          len): the oldest's place and how many are held
-- ARGV  as lease.lua and state.lua read them. Takes their `now` (raised for a
--       clock that stepped back), `units`, `settle_at`, `n` and `hold` (added
--       to every window); sets `reply`, `refused`, `state`, `span` for tail.lua
-- Judging, the reply is {1, now, then per limit the stamps inside its
-- window with this request's and the oldest of them} when accepted, {0,
-- now, then per limit the stamp that blocks it or -1} when refused, or {2,
-- now, the penalty's end} for a key serving a penalty. Settling: {1}, or
-- {0} for a key gone.
--   cat lease.lua state.lua log.lua tail.lua > /tmp/log.lua
--   redis-cli --eval /tmp/log.lua k , '' '' 1 '' 0 l 10 1000000 100 60000000
local max, win = {0, 0}, {0, 0}
local capacity, longest = 0, 0 -- the most stamps kept (capacity_for)
for i = 1, n do
  max[i], win[i] = ARGV[5 + 2 * i] + 0, ARGV[6 + 2 * i] + hold
  if max[i] > capacity then capacity = max[i] end
  if win[i] > longest then longest = win[i] end
end
-- A log of up to SMALL stamps is its stamps alone, read and written whole.
-- A larger one is a ring behind a head, read and written a few stamps at a
-- time, so that a call costs about the same whatever the limit. Offsets go
-- as text made with %d: Redis would print a number as a float.
local SMALL = 128
local value = redis.call('GETRANGE', KEYS[1], '0', '1032') -- 8 + 8 * SMALL + 1 bytes
local whole = #value <= 8 * SMALL
local base, head, len, size = 0, 0, #value / 8, #value / 8
if not whole then
  base, size = 8, (redis.call('STRLEN', KEYS[1]) - 8) / 8
  head, len = struct.unpack('<I4I4', value)
end
-- A value that is none of these, or holds more than the log keeps, is fresh.
if size % 1 ~= 0 or (head > 0 and head >= size) or len > size or len > capacity then
  value, whole, base, size, head, len = '', true, 0, 0, 0, 0
end
if len == 0 and settle_at and units < 0 then return {0} end
-- The i-th oldest stamp, from 0: a small log's at once, a ring's by offset.
local function stamp(i) return (struct.unpack('<i8', value, 8 * i + 1)) end
if not whole then
  stamp = function(i)
    local at = base + 8 * ((head + i) % size)
    if at + 8 <= #value then return (struct.unpack('<i8', value, at + 1)) end
    local from, to = string.format('%d', at), string.format('%d', at + 7)
    return (struct.unpack('<i8', redis.call('GETRANGE', KEYS[1], from, to)))
  end
end
-- How many stamps are older than `cutoff`: the oldest first, then strides
-- that double, then halving the last stride. Every stamp kept is inside the
-- longest window when written, so that is a read or two for most calls.
local function count_before(cutoff)
  local low, stride = 0, 1
  while low + stride <= len and stamp(low + stride - 1) < cutoff do
    low, stride = low + stride, stride * 2
  end
  local high = math.min(low + stride - 1, len)
  while low < high do
    local mid = (low + high - (low + high) % 2) / 2
    if stamp(mid) < cutoff then low = mid + 1 else high = mid end
  end
  return low
end
-- A clock that stepped back is judged at the newest stamp instead.
local newest = len > 0 and stamp(len - 1)
if newest and newest > now then now = newest end

-- The TTL runs to the end of the longest limit's window after now's, as long
-- as a stamp of now's window counts, renewed when now is in another window.
local window = (now - now % longest) / longest
local renewal = (window + 2) * longest - now
if newest and (newest - newest % longest) / longest == window then renewal = nil end
local from, more, upto, cut = nil, 0, nil, 0
if settle_at and units < 0 then
  -- Gives back the request's stamps (the newest equal to its time) it did
  -- not use, and those the longest window no longer reaches: rewritten.
  local last = count_before(settle_at + 1)
  cut = math.min(last - count_before(settle_at), -units)
  if cut == 0 then return {1} end
  from, upto = count_before(newest - longest), last
elseif settle_at then
  from, more = count_before(now - longest), units
else
  -- blocking: a limit keeps `cost` more units out while its (max - cost +
  -- 1)-th newest stamp is inside its window, closed at both ends.
  local cost = math.max(units, 1)
  -- Sized for two limits: growing a table costs more than filling one.
  reply = {0, now, -1, -1, 0, 0}
  for i = 1, n do
    local need = max[i] - cost + 1
    reply[2 + i] = -1
    if len >= need then
      reply[2 + i] = stamp(len - need)
      if reply[2 + i] + win[i] >= now then refused = true end
    end
  end
  reply[3 + n] = nil -- Redis reads an array up to its first nil
  if not refused then
    -- quota: per limit, the stamps inside its window once this request is
    -- counted, and the oldest of them.
    reply[1] = 1
    local forgotten = 0
    for i = 1, n do
      local outside = count_before(now - win[i])
      if win[i] == longest then forgotten = outside end
      reply[1 + 2 * i] = len - outside + cost
      reply[2 + 2 * i] = outside < len and stamp(outside) or now
    end
    reply[3 + 2 * n] = nil
    if units == 0 then return reply end
    from, more = forgotten, units
  end
end

-- Recording, once a branch set `from`: drops the `from` oldest stamps (and,
-- settling, the `cut` before the `upto`-th), appends `more` at now, at most
-- `capacity` held; written whole (`state`) or in place. A ring has room for
-- twice what it held when written whole (as log.rs doubles its room), and
-- is written whole again when full, a quarter full or cut.
if from then
  more = math.min(more, capacity)
  from = math.max(from, len + more - capacity)
  local kept, added = len - from, string.rep(struct.pack('<i8', now), more)
  if whole or cut > 0 or kept + more > size or 4 * (kept + more) <= size then
    if not whole then -- the ring read whole, oldest first
      if #value < base + 8 * size then value = redis.call('GET', KEYS[1]) end
      local first = base + 1 + 8 * head
      value = string.sub(value, first) .. string.sub(value, base + 1, first - 1)
    end
    if not upto or upto < from then upto = from end
    state = string.sub(value, 8 * upto + 1, 8 * len) .. added
    if cut > 0 then state = string.sub(value, 8 * from + 1, 8 * (upto - cut)) .. state end
    local held = #state / 8
    if held > SMALL then
      local padding = string.rep('\0', 8 * (math.min(capacity, 2 * held) - held))
      state = struct.pack('<I4I4', 0, held) .. state .. padding
    end
  else
    local first = (head + from) % size
    local tail = (first + kept) % size
    local fits = math.min(more, size - tail)
    local at = string.format('%d', 8 + 8 * tail)
    if fits > 0 then redis.call('SETRANGE', KEYS[1], at, string.sub(added, 1, 8 * fits)) end
    if more > fits then redis.call('SETRANGE', KEYS[1], '8', string.sub(added, 8 * fits + 1)) end
    redis.call('SETRANGE', KEYS[1], '0', struct.pack('<I4I4', first, kept + more))
  end
end
span = renewal
