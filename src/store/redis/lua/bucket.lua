-- tower-sliding-window: the token bucket (GCRA). One script for every
-- policy of this algorithm: the limits come as arguments. The stored state
-- and the replies are in docs/design.md, "The Redis store".
--
-- A limit of max per W refills one token every T = W / max. Its arrival
-- time (TAT) is kept exact as micros µs plus rem max-ths of a µs (rem below
-- max); T is q µs plus r max-ths, q = floor(W / max), r = W mod max. A
-- request of cost c moves every limit's TAT to max(TAT, now) + c * T, and
-- passes if that is at most W ahead of now for every limit. No absolute
-- time is ever multiplied by max, so every figure stays an exact integer
-- in Lua's doubles (below 2^53) even with Unix-epoch times.
--
-- KEYS[1]  the key's state: each limit's TAT in decimal, in the policy's
--          order, separated by spaces: `micros`, or `micros+rem` when rem
--          is not 0 ('1780000000123456' for one limit, which Redis keeps
--          as an integer; '1780000000333333+1 1780000008571428+4' for two)
-- KEYS[2]  until when (µs) the key serves a penalty; read and written only
--          when ARGV[4] is not 0
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  units. Judging: the request's cost (at most every limit's max),
--          taken from every bucket if all hold it; 0 judges a request of
--          one unit and takes nothing. Settling: the units to charge
--          (negative: to give back).
-- ARGV[3]  '' to judge; to settle, the time (µs) the request was judged at
--          and its cost, separated by a space ('1780000000123456 5'): a
--          request gives back only the part of its cost not yet refilled
-- ARGV[4]  the penalty in µs a refusal starts (0: none)
-- ARGV[5]  'b'
-- ARGV[6], ARGV[7], ...  each limit's max and window in µs
--
-- Judging, the reply is {1 accepted or 0 refused, now, then for each limit
-- how far its TAT lay ahead of now when the request was judged, before it
-- was charged: max(TAT, now) - now, as µs and max-ths}, from which the
-- client works out the wait and the quota; or {2, now, the penalty's end}
-- for a key serving a penalty. Settling, it is {1}, or {0} for a key gone,
-- which has nothing to give back.
--
--   redis-cli --eval bucket.lua k , '' 1 '' 0 b 5 30000000
--   redis-cli --eval bucket.lua k , '' -2 '1780000000123456 3' 0 b 5 30000000
-- Numbers are read from ARGV by arithmetic on the strings, which costs Redis
-- less than calls to tonumber, and passed to Redis as text printed by '%d'
-- (through a C long: a 64-bit Redis), which costs it less than printing a
-- Lua number itself.
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
-- A cost of one, nearly every call's, is compared rather than parsed.
local units = 1
if ARGV[2] ~= '1' then units = ARGV[2] + 0 end
local settle_at, settle_cost
if ARGV[3] ~= '' then
  local at, cost = string.match(ARGV[3], '^(%d+) (%d+)$')
  if not at then return redis.error_reply('ARGV[3] must be "at cost" to settle') end
  settle_at, settle_cost = at + 0, cost + 0
end
local penalty = ARGV[4] ~= '0' and ARGV[4] + 0
local n = (#ARGV - 5) / 2
if penalty and not settle_at then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end

-- One limit, judged, with max below 2^26, so that cost * r (below max^2)
-- stays below 2^52: nearly every call. The same arithmetic as the loops
-- further down, which serve every other call, in locals, which cost Redis
-- less than the loops' table and index arithmetic.
local max, win
if n == 1 and not settle_at then max, win = ARGV[6] + 0, ARGV[7] + 0 end
if max and max < 67108864 then
  local micros, rem = 0, 0
  local raw = redis.call('GET', KEYS[1])
  if raw then
    -- `micros` (kept by Redis as an integer) or `micros+rem`; anything
    -- else reads as a fresh key.
    micros = tonumber(raw)
    if not micros then
      local m, r = string.match(raw, '^(%d+)%+(%d+)$')
      micros, rem = (m or 0) + 0, (r or 0) + 0
    end
    if not (micros >= 0 and micros < 9007199254740992 and micros % 1 == 0 and rem < max) then
      micros, rem = 0, 0
    end
  end
  if micros < now then micros, rem = now, 0 end
  local reply = {1, now, micros - now, rem}
  local cost = units
  if units == 0 then cost = 1 end
  local r = win % max
  local part = cost * r
  local part_rem = part % max
  micros, rem = micros + cost * ((win - r) / max) + (part - part_rem) / max, rem + part_rem
  if rem >= max then micros, rem = micros + 1, rem - max end
  local ahead = micros - now
  if ahead > win or (ahead == win and rem > 0) then
    reply[1] = 0
    if units > 0 and penalty then
      redis.call('SET', KEYS[2], string.format('%d', now + penalty),
        'PX', string.format('%d', math.ceil(penalty / 1000) + 1))
    end
    return reply
  elseif units == 0 then
    return reply
  end
  -- The TTL as below: until the TAT, rounded up to the ms, and 5 s more.
  if rem > 0 then ahead = ahead + 1 end
  local ttl = (ahead - ahead % 1000) / 1000 + 5000
  if ahead % 1000 > 0 then ttl = ttl + 1 end
  local stored
  if rem == 0 then
    stored = string.format('%d', micros)
  else
    stored = string.format('%d+%d', micros, rem)
  end
  redis.call('SET', KEYS[1], stored, 'PX', string.format('%d', ttl))
  return reply
end

-- k tokens' refill under a limit of max per win: k * win / max, as whole
-- µs and a remainder in max-ths. k is at most max, so k * q is at most win;
-- k * r is below max^2, which passes 2^52 (past which % and / on doubles
-- may round) only for limits over 67 million: there k is split in 16-bit
-- halves, each product below 2^48.
local function refill(k, max, win)
  local r = win % max
  local whole, part = k * ((win - r) / max), k * r
  if part < 4503599627370496 then
    local rem = part % max
    return whole + (part - rem) / max, rem
  end
  local low = k % 65536
  local high = (k - low) / 65536 * r
  local high_rem = high % max
  local rest = high_rem * 65536 + low * r
  local rem = rest % max
  return whole + (high - high_rem) / max * 65536 + (rest - rem) / max, rem
end

-- One table for the reply and, past its end, each limit's TAT (its micros
-- at st[2n + 1 + 2i], its rem next), as read and then as written: one
-- table, sized at once for two limits, costs Redis less than several.
local st = {1, now, 0, 0, 0, 0, 0, 0, 0, 0}
local tat = 2 * n + 1
for i = 1, n do st[tat + 2 * i], st[tat + 2 * i + 1] = 0, 0 end
-- Anything but the TATs this script writes, each a whole number below
-- 2^53 with its rem below its max, reads as a fresh key (TATs of 0: full
-- buckets).
local raw = redis.call('GET', KEYS[1])
local fresh = true
if raw then
  local v = n == 1 and tonumber(raw)
  if v then
    -- One limit's TAT in whole µs: the integer Redis keeps in the key.
    if v >= 0 and v < 9007199254740992 and v % 1 == 0 then
      st[tat + 2], fresh = v, false
    end
  else
    -- One match for every limit: `micros`, then '' or '+rem'.
    local f = {string.match(raw, '^(%d+)(%+?%d*)' .. string.rep(' (%d+)(%+?%d*)', n - 1) .. '$')}
    local valid = #f == 2 * n
    for i = 1, n do
      if not valid then break end
      local micros, rem = f[2 * i - 1] + 0, 0
      if f[2 * i] ~= '' then rem = tonumber(string.sub(f[2 * i], 2)) end
      valid = rem ~= nil and micros < 9007199254740992 and rem < ARGV[4 + 2 * i] + 0
      st[tat + 2 * i], st[tat + 2 * i + 1] = micros, rem
    end
    if valid then
      fresh = false
    else
      for j = 1, n do st[tat + 2 * j], st[tat + 2 * j + 1] = 0, 0 end
    end
  end
end

-- How far the latest TAT lies ahead of now once written, rounded up to the
-- µs: how long the state matters.
local ahead_max = 0
if not settle_at then
  -- Judging: every limit charged for the cost (one unit for a peek) from
  -- the later of its TAT and now; the reply holds where each started from.
  local cost = units
  if units == 0 then cost = 1 end
  for i = 1, n do
    local max, win = ARGV[4 + 2 * i] + 0, ARGV[5 + 2 * i] + 0
    local micros, rem = st[tat + 2 * i], st[tat + 2 * i + 1]
    if micros < now then micros, rem = now, 0 end
    st[1 + 2 * i], st[2 + 2 * i] = micros - now, rem
    local whole, part = refill(cost, max, win)
    micros, rem = micros + whole, rem + part
    if rem >= max then micros, rem = micros + 1, rem - max end
    local ahead = micros - now
    if ahead > win or (ahead == win and rem > 0) then st[1] = 0 end
    if rem > 0 then ahead = ahead + 1 end
    if ahead > ahead_max then ahead_max = ahead end
    st[tat + 2 * i], st[tat + 2 * i + 1] = micros, rem
  end
  if st[1] == 0 and units > 0 and penalty then
    -- A refusal takes nothing, and starts the penalty if there is one.
    redis.call('SET', KEYS[2], string.format('%d', now + penalty),
      'PX', string.format('%d', math.ceil(penalty / 1000) + 1))
  end
  if st[1] == 0 or units == 0 then
    -- Redis reads an array up to its first nil: the TATs are left out.
    st[tat + 2] = nil
    return st
  end
else
  if fresh and units < 0 then return {0} end
  for i = 1, n do
    local max, win = ARGV[4 + 2 * i] + 0, ARGV[5 + 2 * i] + 0
    local micros, rem = st[tat + 2 * i], st[tat + 2 * i + 1]
    if units < 0 then
      -- Give back the unused units' refill, (c - u) * T, but never the
      -- part of the request's charge that time has refilled already:
      -- at most at + c * T - now, with c at most the limit's max (a
      -- request of more was refused unjudged, so never taken whole).
      local back, back_rem = refill(-units, max, win)
      local left, left_rem = refill(math.min(settle_cost, max), max, win)
      left = settle_at + left - now
      if left < 0 then left, left_rem = 0, 0 end
      if left < back or (left == back and left_rem < back_rem) then back, back_rem = left, left_rem end
      if micros < back or (micros == back and rem <= back_rem) then
        micros, rem = 0, 0
      elseif rem >= back_rem then
        micros, rem = micros - back, rem - back_rem
      else
        micros, rem = micros - back - 1, rem + max - back_rem
      end
    else
      -- Charge the excess from the later of the TAT and now, but never
      -- past an empty bucket (now + W), unless the TAT is already later.
      -- A charge of more than max units would pass an empty bucket
      -- anyway (max * T = W).
      local from, from_rem = micros, rem
      if from < now then from, from_rem = now, 0 end
      local whole, part = refill(math.min(units, max), max, win)
      from, from_rem = from + whole, from_rem + part
      if from_rem >= max then from, from_rem = from + 1, from_rem - max end
      local cap, cap_rem = now + win, 0
      if micros > cap or (micros == cap and rem > 0) then cap, cap_rem = micros, rem end
      if from > cap or (from == cap and from_rem > cap_rem) then from, from_rem = cap, cap_rem end
      micros, rem = from, from_rem
    end
    local ahead = micros - now
    if rem > 0 then ahead = ahead + 1 end
    if ahead > ahead_max then ahead_max = ahead end
    st[tat + 2 * i], st[tat + 2 * i + 1] = micros, rem
  end
end

-- The state written back (a lone `micros` is kept by Redis as an
-- integer). Its TTL: until the latest TAT, rounded up to the ms (after
-- that every bucket is full, as for a fresh key), and 5 s more, the grace
-- the crate's stores keep bytes for, so that a clock reading a little
-- behind (a client clock that stepped back, a replica's after a failover)
-- still finds the state: it can be as short as one token's refill, where
-- the windows' lasts twice the longest window.
local stored, separator = '', ''
for i = 1, n do
  local micros, rem = st[tat + 2 * i], st[tat + 2 * i + 1]
  if rem == 0 then
    stored = stored .. separator .. string.format('%d', micros)
  else
    stored = stored .. separator .. string.format('%d+%d', micros, rem)
  end
  separator = ' '
end
local ttl = (ahead_max - ahead_max % 1000) / 1000 + 5000
if ahead_max % 1000 > 0 then ttl = ttl + 1 end
redis.call('SET', KEYS[1], stored, 'PX', string.format('%d', ttl))
if settle_at then return {1} end
st[tat + 2] = nil
return st
