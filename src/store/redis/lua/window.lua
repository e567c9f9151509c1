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
-- Numbers are read from ARGV by arithmetic on the strings, which costs Redis
-- less than calls to tonumber.
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local units, sliding = ARGV[2] + 0, ARGV[5] == 'c'
local settle_at = ARGV[3] ~= '' and ARGV[3] + 0
local penalty = ARGV[4] ~= '0' and ARGV[4] + 0
local n = (#ARGV - 5) / 2
if penalty and not settle_at then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end

-- Each limit's fields in one table, 6 a limit from st[6i - 5]: max,
-- window, the size of a count in the packed state (the power of two above
-- max), and the window index, previous and current counts. One table,
-- sized at once for two limits, costs Redis less than one per field. Also
-- the greatest common divisor of the windows (the packed state's unit of
-- time), and the bits all counts take.
local st = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
local longest, unit, count_bits = 0, 0, 0
for i = 1, n do
  local m, win = ARGV[4 + 2 * i] + 0, ARGV[5 + 2 * i] + 0
  -- The bits of m (below 2^32) and 2 to their power, m halved by powers
  -- of two (exact in doubles).
  local x, bits, size = m, 1, 2
  if x >= 65536 then x, bits, size = x / 65536, bits + 16, size * 65536 end
  if x >= 256 then x, bits, size = x / 256, bits + 8, size * 256 end
  if x >= 16 then x, bits, size = x / 16, bits + 4, size * 16 end
  if x >= 4 then x, bits, size = x / 4, bits + 2, size * 4 end
  if x >= 2 then bits, size = bits + 1, size * 2 end
  st[6 * i - 5], st[6 * i - 4], st[6 * i - 3] = m, win, size
  st[6 * i - 2], st[6 * i - 1], st[6 * i] = 0, 0, 0
  if win > longest then longest = win end
  local a, b = win, unit
  while b > 0 do a, b = b, a % b end
  unit = a
  count_bits = count_bits + bits
end
-- The TTL in ms, rounded up, plus one: twice the longest window (once for
-- the fixed window), which a state needs at most after the window it was
-- renewed in.
local span = longest
if sliding then
  span = 2 * longest
  count_bits = 2 * count_bits
end
local ttl = (span - span % 1000) / 1000 + 1
if span % 1000 > 0 then ttl = ttl + 1 end
local lifetime = ttl * 1000

-- The packed state (one integer below 2^53) is used where the counts leave
-- its index bits enough to span the key's lifetime and a clock stepping
-- back 2^31 ms, and to read up to 2^31 ms ahead; else 12 bytes a limit.
local modulus, ahead
if count_bits < 53 then
  local m = 2 ^ (53 - count_bits)
  local a = (2147483648000 - 2147483648000 % unit) / unit
  if a * unit < 2147483648000 then a = a + 1 end
  if (m - a - 1) * unit > lifetime + 2147483648000 then modulus, ahead = m, a end
end

local raw = redis.call('GET', KEYS[1])
local fresh = true
if modulus then
  -- Anything but a whole number in [0, 2^53) reads as a fresh key.
  local v = raw and tonumber(raw)
  if v and v >= 0 and v < 9007199254740992 and v % 1 == 0 then
    fresh = false
    for i = n, 1, -1 do
      local size, count = st[6 * i - 3]
      count = v % size
      st[6 * i] = count
      v = (v - count) / size
      if sliding then
        count = v % size
        st[6 * i - 1] = count
        v = (v - count) / size
      end
    end
    local u = (now - now % unit) / unit
    local behind = (u % modulus - v) % modulus
    if behind < modulus - ahead then u = u - behind else u = u + (modulus - behind) end
    for i = 1, n do
      local units_per_window = st[6 * i - 4] / unit
      st[6 * i - 2] = (u - u % units_per_window) / units_per_window
    end
  end
elseif raw and #raw == 12 * n then
  -- Per limit the window index modulo 2^32 and the two counts, 4 bytes
  -- each: a value of any other length reads as a fresh key.
  fresh = false
  for i = 1, n do
    local win = st[6 * i - 4]
    local stored, previous, current = struct.unpack('<I4I4I4', raw, 12 * i - 11)
    local now_k = (now - now % win) / win
    local behind = (now_k % 4294967296 - stored) % 4294967296
    if behind < 2147483648 or behind * win <= lifetime then
      st[6 * i - 2] = now_k - behind
    else
      st[6 * i - 2] = now_k + (4294967296 - behind)
    end
    st[6 * i - 1], st[6 * i] = previous, current
  end
end
if not fresh then
  -- A clock that stepped back is judged at the latest window counted in.
  for i = 1, n do
    local start = st[6 * i - 2] * st[6 * i - 4]
    if start > now then now = start end
  end
elseif settle_at and units < 0 then
  return {0}
end

-- Every window rolled to now's; the request judged against each.
local cost = units
if units == 0 then cost = 1 end
local reply = {1, now, 0, 0, 0, 0}
local rolled, allowed = false, true
for i = 1, n do
  local max, win, k, previous, current = st[6 * i - 5], st[6 * i - 4], st[6 * i - 2], st[6 * i - 1], st[6 * i]
  local elapsed = now % win
  local now_k = (now - elapsed) / win
  if now_k ~= k then
    if sliding and now_k == k + 1 then previous = current else previous = 0 end
    current, rolled = 0, true
    st[6 * i - 2], st[6 * i - 1], st[6 * i] = now_k, previous, current
  end
  reply[1 + 2 * i], reply[2 + 2 * i] = previous, current
  local room = max - cost
  if settle_at then
    -- A settling judges nothing.
  elseif current > room then
    allowed = false
  elseif previous > 0 then
    -- The previous window's count, weighted by the part of it still inside
    -- the sliding window: previous * (w - elapsed) / w <= room - current.
    -- In doubles while one product is below 2^53, exact there, as a
    -- product past it stays past it when rounded.
    local lhs, rhs = previous * (win - elapsed), (room - current) * win
    if lhs < 9007199254740992 or rhs < 9007199254740992 then
      if lhs > rhs then allowed = false end
    else
      -- Both products past 2^53, where doubles round: compared exactly, on
      -- 16-bit limbs, least significant first (nine limbs each).
      local function product(x, y)
        local xs, ys, sum = {}, {}, {0, 0, 0, 0, 0, 0, 0, 0, 0}
        for l = 1, 4 do
          xs[l], ys[l] = x % 65536, y % 65536
          x, y = (x - xs[l]) / 65536, (y - ys[l]) / 65536
        end
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
      local x, y = product(previous, win - elapsed), product(room - current, win)
      for l = 9, 1, -1 do
        if x[l] ~= y[l] then
          if x[l] > y[l] then allowed = false end
          break
        end
      end
    end
  end
end
-- Redis reads an array up to its first nil.
reply[3 + 2 * n] = nil

if settle_at then
  -- What the request did not use goes back to the window it was counted
  -- in, if that is still the current or the previous one; an excess is
  -- charged to the current one, as far as each limit.
  for i = 1, n do
    if units < 0 then
      local win = st[6 * i - 4]
      local counted_in = (settle_at - settle_at % win) / win
      if st[6 * i - 2] == counted_in then
        st[6 * i] = st[6 * i] - math.min(-units, st[6 * i])
      elseif sliding and st[6 * i - 2] == counted_in + 1 then
        st[6 * i - 1] = st[6 * i - 1] - math.min(-units, st[6 * i - 1])
      end
    else
      st[6 * i] = math.min(st[6 * i] + units, st[6 * i - 5])
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
  for i = 1, n do st[6 * i] = st[6 * i] + units end
end

-- The state written back. The packed integer goes as decimal text printed
-- by '%d' (through a C long: a 64-bit Redis), which Redis keeps inside the
-- key's object.
local stored
if modulus then
  local v, shift = 0, 1
  for i = n, 1, -1 do
    local size = st[6 * i - 3]
    v = v + st[6 * i] * shift
    shift = shift * size
    if sliding then
      v = v + st[6 * i - 1] * shift
      shift = shift * size
    end
  end
  stored = string.format('%d', v + (now - now % unit) / unit % modulus * shift)
else
  stored = struct.pack('<I4I4I4', st[4] % 4294967296, st[5], st[6])
  for i = 2, n do
    stored = stored .. struct.pack('<I4I4I4', st[6 * i - 2] % 4294967296, st[6 * i - 1], st[6 * i])
  end
end
-- The TTL is renewed only when a window rolls (or the key is new).
if rolled or fresh then
  redis.call('SET', KEYS[1], stored, 'PX', string.format('%d', ttl))
else
  redis.call('SET', KEYS[1], stored, 'KEEPTTL')
end
if settle_at then return {1} end
return reply
