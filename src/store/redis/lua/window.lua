-- tower-sliding-window: the sliding window counter and the fixed window,
-- judged as src/algorithm/counter.rs and fixed.rs judge them, for every
-- policy of these algorithms (the limits come as arguments).
-- KEYS[1]  the state: per limit, in order, struct.pack('<i8I4I4', window,
--          previous, current), the fixed window's index (now // w) and the
--          counts of the window before it (0 for the fixed window) and of it
-- KEYS[2]  until when (µs) the key serves a penalty (used if ARGV[5] ~= 0)
-- ARGV[1], ARGV[2]  now and the in-flight cap, read by lease.lua, which is
--          joined before this script and refuses for the cap
-- ARGV[3]  judging: the cost, recorded if every limit has room (0: judge one
--          unit, record nothing); settling: units to charge (< 0: give back)
-- ARGV[4]  '' to judge; to settle, the time (µs) the request was judged at
-- ARGV[5]  the penalty in µs a refusal starts (0: none)
-- ARGV[6]  'c' for the sliding counter, 'f' for the fixed window
-- ARGV[7], ARGV[8], ...  each limit's max and window in µs
-- Judging, the reply is {1 accepted or 0 refused, now, then per limit the
-- previous and current counts the request was judged against}, or {2, now,
-- the penalty's end} for a key serving a penalty; an accepted request
-- takes its in-flight slot. Settling: {1}, or {0}
-- for a key gone.
--   cat lease.lua window.lua > /tmp/window.lua
--   redis-cli --eval /tmp/window.lua k , '' '' 1 '' 0 c 10 1000000 100 60000000
local units, sliding = ARGV[3] + 0, ARGV[6] == 'c'
local settle_at = ARGV[4] ~= '' and ARGV[4] + 0
local penalty = ARGV[5] ~= '0' and ARGV[5] + 0
local n = (#ARGV - 6) / 2
if penalty and not settle_at then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end
-- Tables sized at once for two limits: growing them costs Redis more.
local max, win, window, previous, current = {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}
local longest = 0
for i = 1, n do
  max[i], win[i] = ARGV[5 + 2 * i] + 0, ARGV[6 + 2 * i] + 0
  if win[i] > longest then longest = win[i] end
end
-- The TTL in ms, rounded up, plus one: twice the longest window (once for
-- the fixed window), as long as a state matters after its last roll.
local span = sliding and 2 * longest or longest
local ttl = (span - span % 1000) / 1000 + 1
if span % 1000 > 0 then ttl = ttl + 1 end
-- A record is read as it was written: a whole window index at most 2^31
-- windows ahead of now's (a clock that stepped back as far), counts no
-- larger than their limit, and no previous count for the fixed window.
-- Anything else under the key reads as fresh.
local raw = redis.call('GET', KEYS[1])
local fresh = not raw or #raw ~= 16 * n
for i = 1, n do
  if not fresh then
    window[i], previous[i], current[i] = struct.unpack('<i8I4I4', raw, 16 * i - 15)
    local k = window[i]
    fresh = not (k >= 0 and k - now / win[i] <= 2147483648
      and previous[i] <= (sliding and max[i] or 0) and current[i] <= max[i])
  end
end
if fresh then
  if settle_at and units < 0 then return {0} end
  for i = 1, n do window[i], previous[i], current[i] = 0, 0, 0 end
else
  -- A clock that stepped back is judged at the latest window counted in.
  for i = 1, n do if window[i] * win[i] > now then now = window[i] * win[i] end end
end

local function limbs(x, y) -- x · y on 16-bit limbs, least significant first
  local xs, ys, sum = {}, {}, {0, 0, 0, 0, 0, 0, 0, 0, 0}
  for l = 1, 4 do
    xs[l], ys[l] = x % 65536, y % 65536
    x, y = (x - xs[l]) / 65536, (y - ys[l]) / 65536
  end
  for l = 1, 4 do
    local carry = 0
    for m = 1, 5 do
      local v = sum[l + m - 1] + (ys[m] or 0) * xs[l] + carry
      carry = math.floor(v / 65536)
      sum[l + m - 1] = v - carry * 65536
    end
  end
  return sum
end

-- p · a > b · w, exactly: in doubles while one product is below 2^53 (a
-- product past it stays past it when rounded), else on limbs.
local function exceeds(p, a, b, w)
  local lhs, rhs = p * a, b * w
  if lhs < 9007199254740992 or rhs < 9007199254740992 then return lhs > rhs end
  local x, y = limbs(p, a), limbs(b, w)
  for l = 9, 1, -1 do if x[l] ~= y[l] then return x[l] > y[l] end end
  return false
end

-- Every window rolled to now's; the request fits each if current + cost <=
-- max and previous · (w - elapsed) / w <= max - cost - current: the previous
-- window weighted by how much of it the sliding window still covers.
local cost = units == 0 and 1 or units
local reply = {1, now, 0, 0, 0, 0}
local rolled, allowed = fresh, true
for i = 1, n do
  local elapsed = now % win[i]
  local k = (now - elapsed) / win[i]
  if k ~= window[i] then
    previous[i] = (sliding and k == window[i] + 1) and current[i] or 0
    current[i], window[i], rolled = 0, k, true
  end
  reply[1 + 2 * i], reply[2 + 2 * i] = previous[i], current[i]
  local room = max[i] - cost - current[i]
  if not settle_at and (room < 0 or exceeds(previous[i], win[i] - elapsed, room, win[i])) then
    allowed = false
  end
end
reply[3 + 2 * n] = nil -- Redis reads an array up to its first nil
if settle_at then
  -- What was not used goes back to the window it was counted in, if still
  -- the current or previous one; an excess is charged as far as each max.
  for i = 1, n do
    local counted_in = (settle_at - settle_at % win[i]) / win[i]
    if units >= 0 then
      current[i] = math.min(current[i] + units, max[i])
    elseif window[i] == counted_in then
      current[i] = current[i] - math.min(-units, current[i])
    elseif sliding and window[i] == counted_in + 1 then
      previous[i] = previous[i] - math.min(-units, previous[i])
    end
  end
elseif not allowed then
  reply[1] = 0
  if units > 0 and penalty then
    redis.call('SET', KEYS[2], string.format('%d', now + penalty),
      'PX', string.format('%d', math.ceil(penalty / 1000) + 1))
  end
  return reply
elseif units == 0 then
  return reply
else
  for i = 1, n do current[i] = current[i] + units end
end
local records = {}
for i = 1, n do records[i] = struct.pack('<i8I4I4', window[i], previous[i], current[i]) end
-- The TTL is renewed only when a window rolls (or the key is new).
if rolled then
  redis.call('SET', KEYS[1], table.concat(records), 'PX', string.format('%d', ttl))
else
  redis.call('SET', KEYS[1], table.concat(records), 'KEEPTTL')
end
if leases then take() end
if settle_at then return {1} end
return reply
