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
-- then the state the request was judged against (windows rolled, before
-- counting it) in the stored layout, from which the client derives
-- remaining quota and retry-after.
--
-- The script runs on every request, so it is written for Redis's CPU: one
-- string in and one out (an array reply costs Redis more than all the
-- arithmetic here), few calls into C, and the TTL set only when a window
-- rolls: the request that rolls it comes after the window opened, and a
-- state matters for at most two windows from that opening.

-- `now`, `spec` and `n` come from arguments.lua, prepended.
-- struct formats of the policy, the state and the reply; literal for the
-- usual one or two limits, since building them costs more than using them.
local spec_format, state_format, reply_format
if n == 1 then
  spec_format, state_format, reply_format = '<c1I8I4I8', '<I4I4I4', '<BI8I4I4I4'
elseif n == 2 then
  spec_format = '<c1I8I4I8I4I8'
  state_format, reply_format = '<I4I4I4I4I4I4', '<BI8I4I4I4I4I4I4'
else
  local per_limit = string.rep('I4', 3 * n)
  spec_format = '<c1I8' .. string.rep('I4I8', n)
  state_format, reply_format = '<' .. per_limit, '<BI8' .. per_limit
end
local p = {struct.unpack(spec_format, spec)}
local mode, ttl = p[1], p[2]
local sliding = mode == 's' or mode == 'S'
local peek = mode == 'S' or mode == 'F'

local WRAP = 4294967296
local EXACT = 9007199254740992
local lifetime = ttl * 1000

-- s[j], s[j + 1], s[j + 2] with j = 3i - 2: limit i's window, previous and
-- current count. Lua's % is exact here: both operands are integers below 2^53.
local raw = redis.call('GET', KEYS[1])
local s, fresh
if raw and #raw == 12 * n then
  s = {struct.unpack(state_format, raw)}
else
  s, fresh = {}, true
end
-- Limit i's max and window are p[1 + 2i] and p[2 + 2i].
for i = 1, n do
  local w = p[2 + 2 * i]
  local j = 3 * i - 2
  local k = (now - now % w) / w
  if fresh then
    s[j], s[j + 1], s[j + 2] = 0, 0, 0
  else
    local behind = (k % WRAP - s[j]) % WRAP
    -- Less than 2^31 windows behind: an older window, as usual. More is
    -- either a clock that stepped back (the stored window is ahead of now) or,
    -- for a short window beside a very long one, a window older than 2^31
    -- that the key outlived; only the latter fits in the key's lifetime.
    if behind < WRAP / 2 or behind * w <= lifetime then
      s[j] = k - behind
    else
      s[j] = k + (WRAP - behind)
    end
  end
end
-- A clock that stepped back is judged at the start of the latest window
-- already counted in, never earlier.
for i = 1, n do
  local since = s[3 * i - 2] * p[2 + 2 * i]
  if since > now then
    now = since
  end
end

local allowed, rolled = 1, fresh
for i = 1, n do
  local max, w = p[1 + 2 * i], p[2 + 2 * i]
  local j = 3 * i - 2
  local elapsed = now % w
  local k = (now - elapsed) / w
  if k ~= s[j] then
    if sliding and k == s[j] + 1 then
      s[j + 1] = s[j + 2]
    else
      s[j + 1] = 0
    end
    s[j], s[j + 2], rolled = k, 0, true
  end
  local previous, current = s[j + 1], s[j + 2]
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
      -- Beyond 2^53 doubles lose integers: multiply on base-2^16 limbs
      -- (rare, for limits in the billions, so defined only here).
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
      fits = true
      for l = 9, 1, -1 do
        if lhs[l] ~= rhs[l] then
          fits = lhs[l] < rhs[l]
          break
        end
      end
    end
  end
  if not fits then
    allowed = 0
  end
  s[j] = k % WRAP
end

local judged = struct.pack(reply_format, allowed, now, unpack(s, 1, 3 * n))
if allowed == 1 and not peek then
  for j = 3, 3 * n, 3 do
    s[j] = s[j] + 1
  end
  local state = struct.pack(state_format, unpack(s, 1, 3 * n))
  if rolled then
    redis.call('SET', KEYS[1], state, 'PX', ttl)
  else
    redis.call('SET', KEYS[1], state, 'KEEPTTL')
  end
end
return judged
