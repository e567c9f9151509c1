-- tower-sliding-window: the sliding window log, judged as
-- src/algorithm/log.rs judges it, for every policy of this algorithm (the
-- limits come as arguments).
-- KEYS[1]  the stamps of accepted requests, oldest first: struct.pack('<i8',
--          stamp) each (µs), at most the largest max of them, none older
--          than the longest window needs
-- ARGV  as lease.lua and state.lua, joined before this script, read them
-- Judging, the reply is {1, now, then per limit the stamps inside its
-- window with this request's and the oldest of them} when accepted, {0,
-- now, then per limit the stamp that blocks it or -1} when refused, or {2,
-- now, the penalty's end} for a key serving a penalty. Settling: {1}, or
-- {0} for a key gone.
--   cat lease.lua state.lua log.lua > /tmp/log.lua
--   redis-cli --eval /tmp/log.lua k , '' '' 1 '' 0 l 10 1000000 100 60000000
-- The log keeps as many stamps as the largest max (capacity_for), and none
-- outside the longest window: neither ever counts again.
local max, win = {0, 0}, {0, 0}
local capacity, longest = 0, 0
for i = 1, n do
  max[i], win[i] = ARGV[5 + 2 * i] + 0, ARGV[6 + 2 * i] + 0
  if max[i] > capacity then capacity = max[i] end
  if win[i] > longest then longest = win[i] end
end

-- A value that is not whole stamps, or holds more than the log keeps, is no
-- state of ours and reads as a fresh key.
local stamps = redis.call('GET', KEYS[1]) or ''
if #stamps % 8 ~= 0 or #stamps > 8 * capacity then stamps = '' end
local len = #stamps / 8
if len == 0 and settle_at and units < 0 then return {0} end
local function stamp(i) -- the i-th oldest, from 0
  return (struct.unpack('<i8', stamps, 8 * i + 1))
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

-- Writes the stamps from the `from`-th oldest on, then `more` at now, at
-- most `capacity` of them. The TTL runs to the end of the longest limit's
-- window after now's, in ms rounded up, plus one: as long as a stamp of
-- now's window counts. Like the counter's, it is renewed only when a write
-- falls in another such window than the newest stamp stored (or the key
-- is new).
local function record(from, more)
  more = math.min(more, capacity)
  from = math.max(from, len + more - capacity)
  local kept = string.sub(stamps, 8 * from + 1) .. string.rep(struct.pack('<i8', now), more)
  local window = (now - now % longest) / longest
  if not newest or (newest - newest % longest) / longest ~= window then
    local ttl = (window + 2) * longest - now
    redis.call('SET', KEYS[1], kept, 'PX', (ttl - ttl % 1000) / 1000 + 1)
  else
    redis.call('SET', KEYS[1], kept, 'KEEPTTL')
  end
end

if settle_at and units < 0 then
  -- Gives back as many of the request's stamps, the newest equal to its
  -- time, as it did not use; then the stamps the longest window no longer
  -- reaches from the newest before, as every store does.
  local last = count_before(settle_at + 1)
  local back = math.min(last - count_before(settle_at), -units)
  if back > 0 then
    stamps = string.sub(stamps, 1, 8 * (last - back)) .. string.sub(stamps, 8 * last + 1)
    len = len - back
    local forgotten = count_before(newest - longest)
    record(forgotten, 0)
  end
  return {1}
elseif settle_at then
  record(count_before(now - longest), units)
  return {1}
end

-- blocking: a limit keeps `cost` more units out while its (max - cost +
-- 1)-th newest stamp is inside its window, closed at both ends.
local cost = math.max(units, 1)
-- Replies are sized for two limits at once: growing a table costs Redis
-- more than filling one.
local reply, refused = {0, now, -1, -1, 0, 0}, false
for i = 1, n do
  local need = max[i] - cost + 1
  reply[2 + i] = -1
  if len >= need then
    reply[2 + i] = stamp(len - need)
    if reply[2 + i] + win[i] >= now then refused = true end
  end
end
reply[3 + n] = nil -- Redis reads an array up to its first nil
if refused then
  if start_penalty then start_penalty() end
  return reply
end

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
if units > 0 then record(forgotten, units) end
if leases and units > 0 then take() end
return reply
