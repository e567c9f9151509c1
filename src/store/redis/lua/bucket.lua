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
-- KEYS[1]  the key's state: each limit's TAT as decimal `micros rem`, in
--          the policy's order, separated by spaces ('1780000000123456 3'
--          for one limit)
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
-- less than calls to tonumber.
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local units = ARGV[2] + 0
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

-- Each limit's fields in one table, 4 a limit from st[4i - 3]: max,
-- window, and its TAT's micros and rem. One table, sized at once for two
-- limits, costs Redis less than one per field. A fresh key's TATs are 0:
-- a full bucket.
local st = {0, 0, 0, 0, 0, 0, 0, 0}
for i = 1, n do
  st[4 * i - 3], st[4 * i - 2], st[4 * i - 1], st[4 * i] = ARGV[4 + 2 * i] + 0, ARGV[5 + 2 * i] + 0, 0, 0
end
-- Anything but 2n decimal integers below 2^53, each rem below its max,
-- reads as a fresh key.
local raw = redis.call('GET', KEYS[1])
local fresh = true
if raw then
  local fields
  if n == 1 then
    fields = {string.match(raw, '^(%d+) (%d+)$')}
  else
    fields = {string.match(raw, '^' .. string.rep('(%d+) ', 2 * n - 1) .. '(%d+)$')}
  end
  if #fields == 2 * n then
    fresh = false
    for i = 1, n do
      local micros, rem = fields[2 * i - 1] + 0, fields[2 * i] + 0
      if micros >= 9007199254740992 or rem >= st[4 * i - 3] then
        fresh = true
        break
      end
      st[4 * i - 1], st[4 * i] = micros, rem
    end
    if fresh then
      for i = 1, n do st[4 * i - 1], st[4 * i] = 0, 0 end
    end
  end
end

-- How far the latest TAT lies ahead of now once written, rounded up to the
-- µs: how long the state matters.
local ahead_max = 0
local reply
if not settle_at then
  -- Judging: every limit charged for the cost (one unit for a peek) from
  -- the later of its TAT and now, into st; the reply holds where each
  -- started from.
  local cost = units
  if units == 0 then cost = 1 end
  reply = {1, now, 0, 0}
  for i = 1, n do
    local max, win, micros, rem = st[4 * i - 3], st[4 * i - 2], st[4 * i - 1], st[4 * i]
    if micros < now then micros, rem = now, 0 end
    reply[1 + 2 * i], reply[2 + 2 * i] = micros - now, rem
    local whole, part = refill(cost, max, win)
    micros, rem = micros + whole, rem + part
    if rem >= max then micros, rem = micros + 1, rem - max end
    local ahead = micros - now
    if ahead > win or (ahead == win and rem > 0) then reply[1] = 0 end
    if rem > 0 then ahead = ahead + 1 end
    if ahead > ahead_max then ahead_max = ahead end
    st[4 * i - 1], st[4 * i] = micros, rem
  end
  if reply[1] == 0 then
    -- A refusal takes nothing, and starts the penalty if there is one.
    if units > 0 and penalty then
      redis.call('SET', KEYS[2], string.format('%d', now + penalty),
        'PX', string.format('%d', math.ceil(penalty / 1000) + 1))
    end
    return reply
  elseif units == 0 then
    return reply
  end
else
  if fresh and units < 0 then return {0} end
  for i = 1, n do
    local max, win, micros, rem = st[4 * i - 3], st[4 * i - 2], st[4 * i - 1], st[4 * i]
    if units < 0 then
      -- Give back the unused units' refill, (c - u) * T, but never the
      -- part of the request's charge that time has refilled already:
      -- at most at + c * T - now. The client never settles a cost over a
      -- limit's max (it refuses such requests unjudged).
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
    st[4 * i - 1], st[4 * i] = micros, rem
  end
end

-- The state written back as decimal text (printed by '%d' through a C
-- long: a 64-bit Redis). Its TTL: until the latest TAT, rounded up to the
-- ms (after that every bucket is full, as for a fresh key), and 5 s more,
-- the grace the crate's stores keep bytes for, so that a clock reading a
-- little behind (a client clock that stepped back, a replica's after a
-- failover) still finds the state: it can be as short as one token's
-- refill, where the windows' lasts twice the longest window.
local stored
if n == 1 then
  stored = string.format('%d %d', st[3], st[4])
else
  local parts = {}
  for i = 1, n do parts[i] = string.format('%d %d', st[4 * i - 1], st[4 * i]) end
  stored = table.concat(parts, ' ')
end
local ttl = (ahead_max - ahead_max % 1000) / 1000 + 5000
if ahead_max % 1000 > 0 then ttl = ttl + 1 end
redis.call('SET', KEYS[1], stored, 'PX', string.format('%d', ttl))
if settle_at then return {1} end
return reply
