-- Sliding window counter and fixed window, every limit of a policy at once.
--
-- KEYS[1]  the key's state: per limit, the fixed window index modulo 2^32
--          and the previous and current counts, 4 bytes each
--
-- Twelve bytes a limit keep a one-limit key within Redis's smallest string
-- allocation. The index is stored modulo 2^32 and rebuilt from now (see the
-- rule below). That is exact unless one limit's window is over 2^31 times
-- shorter than another's (1 ms beside 25 days), where a long idle time or a
-- clock stepping back by more than 2^31 short windows can be misread.
-- ARGV     as read by arguments.lua; the mode is 's' for the sliding
--          counter, 'f' for the fixed window, in capitals ('S', 'F') to
--          judge without recording; the TTL is how long a state lasts once a
--          request moved it into its newest windows
--
-- Returns one string: a byte for the verdict (1 accepted), now (8 bytes),
-- then the state in the stored layout with windows rolled to now: counting
-- the request if it was accepted and recorded (the reply's tail is then
-- what is stored), before it otherwise. The client derives remaining quota
-- and retry-after from it.
--
-- The script runs on every request, so it is written for Redis's CPU: one
-- string in and one out (an array reply costs Redis more than all the
-- arithmetic here), few calls into C (each struct call costs about as much
-- as a GET, so the stored state is the reply's tail, not packed again),
-- locals rather than tables for the usual one or two limits, and the TTL
-- set only when a window rolls (or the key is new): the request that rolls
-- it comes after the window opened, and a state matters for at most two
-- windows from that opening.

-- `now`, `spec` and `n` come from arguments.lua, prepended.
-- One struct call for the whole policy when it has one or two limits: a
-- call costs more than the numbers it reads.
local mode, ttl, m1, w1, m2, w2
if n == 1 then
  mode, ttl, m1, w1 = struct.unpack('<c1I8I4I8', spec)
elseif n == 2 then
  mode, ttl, m1, w1, m2, w2 = struct.unpack('<c1I8I4I8I4I8', spec)
else
  mode, ttl = struct.unpack('<c1I8', spec)
end
local sliding = mode == 's' or mode == 'S'
local record = mode == 's' or mode == 'f'

local WRAP = 4294967296
local EXACT = 9007199254740992
local lifetime = ttl * 1000

local raw = redis.call('GET', KEYS[1])
local fresh = not raw or #raw ~= 12 * n

-- The full index of the fixed window of `w` µs whose index modulo 2^32 is
-- `stored`, rebuilt from now. Less than 2^31 windows behind now's: an
-- older window, as usual. More is either a clock that stepped back (the
-- stored window is ahead of now) or, for a short window beside a very long
-- one, a window older than 2^31 that the key outlived; only the latter fits
-- in the key's lifetime. Lua's % is exact here: both operands are integers
-- below 2^53.
local function unwrap(stored, w)
  local k = (now - now % w) / w
  local behind = (k % WRAP - stored) % WRAP
  if behind < WRAP / 2 or behind * w <= lifetime then
    return k - behind
  end
  return k + (WRAP - behind)
end

-- One limit (`max` requests a `w` µs window) at now, from its full window
-- index `k0` and counts: rolls the window to now's, then tells whether one
-- more request fits. Returns that, the window index modulo 2^32, the
-- rolled counts and whether the window rolled.
local function judge(max, w, k0, previous, current)
  local elapsed = now % w
  local k = (now - elapsed) / w
  local rolled = false
  if k ~= k0 then
    if sliding and k == k0 + 1 then
      previous = current
    else
      previous = 0
    end
    current, rolled = 0, true
  end
  local fits = current + 1 <= max
  if fits and sliding and previous > 0 then
    local carried = previous * (w - elapsed)
    local room = (max - current - 1) * w
    -- Below 2^53 doubles are exact integers, and a product rounded to 2^53
    -- or more was at least 2^53 before rounding: only two products that
    -- large need exact arithmetic.
    if carried < EXACT then
      fits = room >= EXACT or carried <= room
    elseif room < EXACT then
      fits = false
    else
      -- Beyond 2^53 doubles lose integers: a * b on base-2^16 limbs, as
      -- nine limbs, least significant first (rare: for limits in the
      -- billions, so the function is made only here).
      local function product(a, b)
        local x, y = {}, {}
        for l = 1, 4 do
          x[l], y[l] = a % 65536, b % 65536
          a, b = (a - x[l]) / 65536, (b - y[l]) / 65536
        end
        local sum = {0, 0, 0, 0, 0, 0, 0, 0, 0}
        for l = 1, 4 do
          local carry = 0
          for m = 1, 4 do
            local v = sum[l + m - 1] + x[l] * y[m] + carry
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
      local lhs, rhs = product(previous, w - elapsed), product(max - current - 1, w)
      for l = 9, 1, -1 do
        if lhs[l] ~= rhs[l] then
          fits = lhs[l] < rhs[l]
          break
        end
      end
    end
  end
  return fits, k % WRAP, previous, current, rolled
end

-- A clock that stepped back is judged at the start of the latest window
-- already counted in, never earlier: `now` moves up to each limit's
-- before any is judged.
local reply, allowed, rolled
if n == 1 then
  local k1, p1, c1 = 0, 0, 0
  if not fresh then
    k1, p1, c1 = struct.unpack('<I4I4I4', raw)
    k1 = unwrap(k1, w1)
    if k1 * w1 > now then now = k1 * w1 end
  end
  allowed, k1, p1, c1, rolled = judge(m1, w1, k1, p1, c1)
  if allowed and record then c1 = c1 + 1 end
  reply = struct.pack('<BI8I4I4I4', allowed and 1 or 0, now, k1, p1, c1)
elseif n == 2 then
  local k1, p1, c1, k2, p2, c2 = 0, 0, 0, 0, 0, 0
  if not fresh then
    k1, p1, c1, k2, p2, c2 = struct.unpack('<I4I4I4I4I4I4', raw)
    k1, k2 = unwrap(k1, w1), unwrap(k2, w2)
    if k1 * w1 > now then now = k1 * w1 end
    if k2 * w2 > now then now = k2 * w2 end
  end
  local f1, f2, r1, r2
  f1, k1, p1, c1, r1 = judge(m1, w1, k1, p1, c1)
  f2, k2, p2, c2, r2 = judge(m2, w2, k2, p2, c2)
  allowed, rolled = f1 and f2, r1 or r2
  if allowed and record then c1, c2 = c1 + 1, c2 + 1 end
  reply = struct.pack('<BI8I4I4I4I4I4I4', allowed and 1 or 0, now, k1, p1, c1, k2, p2, c2)
else
  -- Limit i's max and window are p[2i - 1] and p[2i]; its window index,
  -- previous and current count s[3i - 2], s[3i - 1] and s[3i].
  local p = {struct.unpack('<' .. string.rep('I4I8', n), spec, 10)}
  local s = {}
  if fresh then
    for j = 1, 3 * n do s[j] = 0 end
  else
    s = {struct.unpack('<' .. string.rep('I4', 3 * n), raw)}
    for i = 1, n do
      s[3 * i - 2] = unwrap(s[3 * i - 2], p[2 * i])
    end
    for i = 1, n do
      local since = s[3 * i - 2] * p[2 * i]
      if since > now then now = since end
    end
  end
  allowed, rolled = true, false
  for i = 1, n do
    local j = 3 * i - 2
    local fits, r
    fits, s[j], s[j + 1], s[j + 2], r = judge(p[2 * i - 1], p[2 * i], s[j], s[j + 1], s[j + 2])
    allowed, rolled = allowed and fits, rolled or r
  end
  if allowed and record then
    for j = 3, 3 * n, 3 do s[j] = s[j] + 1 end
  end
  reply = struct.pack('<BI8' .. string.rep('I4', 3 * n), allowed and 1 or 0, now, unpack(s, 1, 3 * n))
end

if allowed and record then
  if rolled or fresh then
    redis.call('SET', KEYS[1], string.sub(reply, 10), 'PX', ttl)
  else
    redis.call('SET', KEYS[1], string.sub(reply, 10), 'KEEPTTL')
  end
end
return reply
