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
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  's' for the sliding counter, 'f' for the fixed window; in capitals
--          ('S', 'F') to judge without recording
-- ARGV[3]  TTL in milliseconds, set on every accepted request
-- ARGV[4..] max, window (microseconds) for each limit
--
-- Returns {allowed, now, then window, previous, current per limit}: the
-- state the request was judged against (windows rolled, before counting
-- it), from which the client derives remaining quota and retry-after.

-- Lua numbers are doubles: exact to 2^53 and no further. The weighted test
-- multiplies counts by windows, so it is done on base-2^16 limbs.
local function limbs(x)
  local out = {}
  for i = 1, 4 do
    local r = math.fmod(x, 65536)
    out[i] = r
    x = (x - r) / 65536
  end
  return out
end

local function mul(a, b)
  local x, y = limbs(a), limbs(b)
  local p = {0, 0, 0, 0, 0, 0, 0, 0, 0}
  for i = 1, 4 do
    local carry = 0
    for j = 1, 4 do
      local v = p[i + j - 1] + x[i] * y[j] + carry
      carry = math.floor(v / 65536)
      p[i + j - 1] = v - carry * 65536
    end
    local k = i + 4
    while carry > 0 do
      local v = p[k] + carry
      carry = math.floor(v / 65536)
      p[k] = v - carry * 65536
      k = k + 1
    end
  end
  return p
end

local function le(p, q)
  for i = 9, 1, -1 do
    if p[i] ~= q[i] then
      return p[i] < q[i]
    end
  end
  return true
end

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local sliding = ARGV[2] == 's' or ARGV[2] == 'S'
local peek = ARGV[2] == 'S' or ARGV[2] == 'F'
local n = (#ARGV - 3) / 2

local WRAP = 4294967296
local lifetime = tonumber(ARGV[3]) * 1000
local EXACT = 9007199254740992
local raw = redis.call('GET', KEYS[1])
local windows, previous, current = {}, {}, {}
for i = 1, n do
  local w = tonumber(ARGV[3 + 2 * i])
  local k = (now - math.fmod(now, w)) / w
  if raw and #raw == 12 * n then
    local stored
    stored, previous[i], current[i] = struct.unpack('<I4I4I4', raw, 1 + (i - 1) * 12)
    local behind = math.fmod(math.fmod(k, WRAP) - stored + WRAP, WRAP)
    -- Less than 2^31 windows behind: an older window, as usual. More is
    -- either a clock that stepped back (the stored window is ahead of now) or,
    -- for a short window beside a very long one, a window older than 2^31
    -- that the key outlived; only the latter fits in the key's lifetime.
    if behind < WRAP / 2 or behind * w <= lifetime then
      windows[i] = k - behind
    else
      windows[i] = k + (WRAP - behind)
    end
  else
    windows[i], previous[i], current[i] = 0, 0, 0
  end
end
-- A clock that stepped back is judged at the start of the latest window
-- already counted in, never earlier.
for i = 1, n do
  local since = windows[i] * tonumber(ARGV[3 + 2 * i])
  if since > now then
    now = since
  end
end

local allowed = 1
for i = 1, n do
  local max = tonumber(ARGV[2 + 2 * i])
  local w = tonumber(ARGV[3 + 2 * i])
  local elapsed = math.fmod(now, w)
  local k = (now - elapsed) / w
  if k ~= windows[i] then
    if sliding and k == windows[i] + 1 then
      previous[i] = current[i]
    else
      previous[i] = 0
    end
    current[i] = 0
    windows[i] = k
  end
  local fits = current[i] + 1 <= max
  if fits and sliding then
    local carried = previous[i] * (w - elapsed)
    local room = (max - current[i] - 1) * w
    if carried < EXACT and room < EXACT then
      -- Both products are below 2^53, where doubles are exact integers.
      fits = carried <= room
    else
      fits = le(mul(previous[i], w - elapsed), mul(max - current[i] - 1, w))
    end
  end
  if not fits then
    allowed = 0
  end
end

local reply = {allowed, now}
for i = 1, n do
  reply[2 + 3 * i - 2] = windows[i]
  reply[2 + 3 * i - 1] = previous[i]
  reply[2 + 3 * i] = current[i]
end
if allowed == 1 and not peek then
  local packed
  if n == 1 then
    packed = struct.pack('<I4I4I4', math.fmod(windows[1], WRAP), previous[1], current[1] + 1)
  else
    local parts = {}
    for i = 1, n do
      parts[i] = struct.pack('<I4I4I4', math.fmod(windows[i], WRAP), previous[i], current[i] + 1)
    end
    packed = table.concat(parts)
  end
  redis.call('SET', KEYS[1], packed, 'PX', ARGV[3])
end
return reply
