-- tower-sliding-window: the sliding window counter and the fixed window.
-- One script for every policy of these algorithms: the limits come as
-- arguments. The stored state and the replies are in docs/design.md,
-- "The Redis store".
--
-- KEYS[1]  the key's state
-- KEYS[2]  until when (µs) the key serves a penalty; read and written only
--          when ARGV[4] is not 0
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  units. Judging: the request's cost, recorded if every limit has
--          room for it; 0 judges a request of one unit and records nothing.
--          Settling: the units to charge (negative: to give back).
-- ARGV[3]  '' to judge; to settle, the time (µs) the request was judged at
-- ARGV[4]  the penalty in µs a refusal starts (0: none)
-- ARGV[5]  'c' for the sliding counter, 'f' for the fixed window
-- ARGV[6], ARGV[7], ...  each limit's max and window in µs
--
-- Judging, the reply is {1 accepted or 0 refused, now, then for each limit
-- the previous window's count and the current one's, as the request was
-- judged against them} (the fixed window's previous counts are 0), or
-- {2, now, the penalty's end} for a key serving a penalty. Settling, it is
-- {1}, or {0} for a key gone, which has nothing to give back.
--
--   redis-cli --eval window.lua k , '' 1 '' 0 c 10 1000000 100 60000000
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local units, settle_at, penalty = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local sliding = ARGV[5] == 'c'
local n = (#ARGV - 5) / 2
if penalty > 0 and not settle_at then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end

-- The limits; the greatest common divisor of the windows (the packed
-- state's unit of time); each count's bits in the packed state.
local max, w, bits = {}, {}, {}
local longest, unit, count_bits = 0, 0, 0
for i = 1, n do
  local m, win = tonumber(ARGV[4 + 2 * i]), tonumber(ARGV[5 + 2 * i])
  max[i], w[i] = m, win
  if win > longest then longest = win end
  local a, b = win, unit
  while b > 0 do a, b = b, a % b end
  unit = a
  local _, e = math.frexp(m)
  bits[i] = e
  count_bits = count_bits + e
end
if sliding then count_bits = 2 * count_bits end
-- The TTL in ms: twice the longest window (once for the fixed window),
-- which a state needs at most after the window it was renewed in.
local span = longest
if sliding then span = 2 * longest end
local ttl = math.ceil(span / 1000) + 1
local lifetime = ttl * 1000

-- The packed state (one integer below 2^53) is used where the counts leave
-- its index bits enough to span the key's lifetime and a clock stepping
-- back 2^31 ms, and to read up to 2^31 ms ahead; else 12 bytes a limit.
local modulus, ahead
if count_bits < 53 then
  local m, a = 2 ^ (53 - count_bits), math.ceil(2147483648000 / unit)
  if (m - a - 1) * unit > lifetime + 2147483648000 then modulus, ahead = m, a end
end

local raw = redis.call('GET', KEYS[1])
local k, p, c = {}, {}, {}
local fresh = true
if modulus then
  -- Anything but a whole number in [0, 2^53) reads as a fresh key.
  local v = raw and tonumber(raw)
  if v and v >= 0 and v < 9007199254740992 and v % 1 == 0 then
    fresh = false
    for i = n, 1, -1 do
      local size = 2 ^ bits[i]
      c[i] = v % size
      v = (v - c[i]) / size
      if sliding then
        p[i] = v % size
        v = (v - p[i]) / size
      else
        p[i] = 0
      end
    end
    local u = (now - now % unit) / unit
    local behind = (u % modulus - v) % modulus
    if behind < modulus - ahead then u = u - behind else u = u + (modulus - behind) end
    for i = 1, n do
      local units_per_window = w[i] / unit
      k[i] = (u - u % units_per_window) / units_per_window
    end
  end
elseif raw and #raw == 12 * n then
  -- Per limit the window index modulo 2^32 and the two counts, 4 bytes
  -- each: a value of any other length reads as a fresh key.
  fresh = false
  local fields = {struct.unpack('<' .. string.rep('I4', 3 * n), raw)}
  for i = 1, n do
    local now_k = (now - now % w[i]) / w[i]
    local behind = (now_k % 4294967296 - fields[3 * i - 2]) % 4294967296
    if behind < 2147483648 or behind * w[i] <= lifetime then
      k[i] = now_k - behind
    else
      k[i] = now_k + (4294967296 - behind)
    end
    p[i], c[i] = fields[3 * i - 1], fields[3 * i]
  end
end
if fresh then
  for i = 1, n do k[i], p[i], c[i] = 0, 0, 0 end
else
  -- A clock that stepped back is judged at the latest window counted in.
  for i = 1, n do
    if k[i] * w[i] > now then now = k[i] * w[i] end
  end
end
if settle_at and fresh and units < 0 then return {0} end

-- a * b <= c * d for integers below 2^53 whose products may not be: the
-- products on 16-bit limbs, least significant first.
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
end

-- Every window rolled to now's; the request judged against each.
local cost = units
if units == 0 then cost = 1 end
local reply = {1, now}
local rolled, allowed = false, true
for i = 1, n do
  local elapsed = now % w[i]
  local now_k = (now - elapsed) / w[i]
  if now_k ~= k[i] then
    if sliding and now_k == k[i] + 1 then p[i] = c[i] else p[i] = 0 end
    c[i], k[i], rolled = 0, now_k, true
  end
  reply[1 + 2 * i], reply[2 + 2 * i] = p[i], c[i]
  local room = max[i] - cost
  if settle_at then
    -- A settling judges nothing.
  elseif c[i] > room then
    allowed = false
  elseif p[i] > 0 then
    -- The previous window's count, weighted by the part of it still inside
    -- the sliding window: previous * (w - elapsed) / w <= room - current.
    -- Its right side is below 2^53 where (max - 1) * w is, and a left side
    -- that rounds is then larger whichever way it rounds.
    if (max[i] - 1) * w[i] < 9007199254740992 then
      if p[i] * (w[i] - elapsed) > (room - c[i]) * w[i] then allowed = false end
    elseif not fits(p[i], w[i] - elapsed, room - c[i], w[i]) then
      allowed = false
    end
  end
end

if settle_at then
  -- What the request did not use goes back to the window it was counted
  -- in, if that is still the current or the previous one; an excess is
  -- charged to the current one, as far as each limit.
  if units < 0 then
    for i = 1, n do
      local counted_in = (settle_at - settle_at % w[i]) / w[i]
      if k[i] == counted_in then
        c[i] = c[i] - math.min(-units, c[i])
      elseif sliding and k[i] == counted_in + 1 then
        p[i] = p[i] - math.min(-units, p[i])
      end
    end
  else
    for i = 1, n do c[i] = math.min(c[i] + units, max[i]) end
  end
elseif not allowed then
  reply[1] = 0
  if units > 0 and penalty > 0 then
    redis.call('SET', KEYS[2], string.format('%d', now + penalty),
      'PX', string.format('%d', math.ceil(penalty / 1000) + 1))
  end
  return reply
elseif units == 0 then
  return reply
else
  for i = 1, n do c[i] = c[i] + units end
end

-- The state written back. The packed integer goes as decimal text printed
-- by '%d' (through a C long: a 64-bit Redis), which Redis keeps inside the
-- key's object.
local stored
if modulus then
  local v, shift = 0, 1
  for i = n, 1, -1 do
    local size = 2 ^ bits[i]
    v = v + c[i] * shift
    shift = shift * size
    if sliding then
      v = v + p[i] * shift
      shift = shift * size
    end
  end
  stored = string.format('%d', v + (now - now % unit) / unit % modulus * shift)
else
  local fields = {}
  for i = 1, n do
    fields[3 * i - 2], fields[3 * i - 1], fields[3 * i] = k[i] % 4294967296, p[i], c[i]
  end
  stored = struct.pack('<' .. string.rep('I4', 3 * n), unpack(fields))
end
-- The TTL is renewed only when a window rolls (or the key is new).
if rolled or fresh then
  redis.call('SET', KEYS[1], stored, 'PX', string.format('%d', ttl))
else
  redis.call('SET', KEYS[1], stored, 'KEEPTTL')
end
if settle_at then return {1} end
return reply
