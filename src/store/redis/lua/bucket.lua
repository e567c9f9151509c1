-- tower-sliding-window: the token bucket (GCRA), judged as bucket.rs judges
-- it. A limit of max per W refills a token every W / max. Its arrival time
-- (TAT) is micros µs and rem max-ths of a µs (rem below max): no time is
-- multiplied by max, so all stays exact in Lua's doubles (below 2^53).
-- KEYS[1]  the state: per limit, in order, struct.pack('<i8I4', micros, rem)
-- ARGV  as lease.lua and state.lua, joined before this script, read them;
--       to settle, ARGV[4] is 'at cost', the request's cost bounding what
--       it may give back; tail.lua, joined after it, writes and answers
-- Takes from lease.lua `now`; from state.lua `units`, `hold`, `settle_at`,
-- `settle_cost` and `n`; sets state.lua's `reply`, `refused`, `state` and
-- `span` for tail.lua.
-- Judging, the reply is {1 accepted or 0 refused, now, then per limit how far
-- its TAT lay ahead of now before the request was charged, as µs and
-- max-ths}, or {2, now, the penalty's end} for a key serving a penalty.
-- Settling: {1}, or {0} for a key gone.
--   cat lease.lua state.lua bucket.lua tail.lua > /tmp/bucket.lua
--   redis-cli --eval /tmp/bucket.lua k , '' '' 1 '' 0 b 5 30000000
if settle_at and not settle_cost then
  return redis.error_reply('ARGV[4] must be "at cost" to settle the bucket')
end
local raw = redis.call('GET', KEYS[1])
local fresh = not raw or #raw ~= 12 * n

-- k tokens' refill time under a limit of m per w µs, k · w / m, as whole µs
-- and a remainder in m-ths. k is at most m, so k · floor(w / m) is at most
-- w; k · (w mod m) is below m^2, past 2^52 (where doubles may round) only
-- for limits over 67 million: there k is split in 16-bit halves.
local function tokens(k, m, w)
  local r = w % m
  local whole, part = k * ((w - r) / m), k * r
  if part < 4503599627370496 then
    local left = part % m
    return whole + (part - left) / m, left
  end
  local low = k % 65536
  local high = (k - low) / 65536 * r
  local high_rem = high % m
  local rest = high_rem * 65536 + low * r
  local left = rest % m
  return whole + (high - high_rem) / m * 65536 + (rest - left) / m, left
end

-- Each limit's TAT, judged or settled, then packed for the write. A TAT
-- is read as written: µs below 2^53, a remainder below its max. Anything
-- else under the key reads as fresh (every bucket full), and starts the
-- judging over. The latest TAT, rounded up to a µs, is when every bucket
-- is full: stored_full before the request, full after it.
local cost = units == 0 and 1 or units
reply = {1, now, 0, 0, 0, 0}
local records, stored_full, full, again
repeat
  reply[1], records, stored_full, full, again = 1, '', 0, now, false
  for i = 1, n do
    local m, w = ARGV[5 + 2 * i] + 0, ARGV[6 + 2 * i] + 0
    local micros, rem = 0, 0
    if not fresh then
      micros, rem = struct.unpack('<i8I4', raw, 12 * i - 11)
      if not (micros >= 0 and micros < 9007199254740992 and rem < m) then
        fresh, again = true, true
        break
      end
      local stored = rem > 0 and micros + 1 or micros
      if stored > stored_full then stored_full = stored end
    end
    if not settle_at then
      -- Charged for the cost from the later of its TAT and now; the request
      -- waits if that puts the TAT more than a window ahead of now. A chunk
      -- of local quota is charged from the later of its TAT and now + hold,
      -- the last moment it may be spent.
      if micros < now then micros, rem = now, 0 end
      reply[1 + 2 * i], reply[2 + 2 * i] = micros - now, rem
      local whole, part = tokens(cost, m, w)
      local ahead, ahead_rem = micros + whole - now, rem + part
      if ahead_rem >= m then ahead, ahead_rem = ahead + 1, ahead_rem - m end
      if ahead > w or (ahead == w and ahead_rem > 0) then reply[1] = 0 end
      if micros < now + hold then micros, rem = now + hold, 0 end
      micros, rem = micros + whole, rem + part
      if rem >= m then micros, rem = micros + 1, rem - m end
    elseif units < 0 then
      -- Give back the unused units' refill, but never the part of the
      -- request's charge that time has refilled already: at most
      -- at + c · T - now (c at most max: a larger request was refused
      -- unjudged, so never taken whole).
      local back, back_rem = tokens(-units, m, w)
      local left, left_rem = tokens(math.min(settle_cost, m), m, w)
      left = settle_at + left - now
      if left < 0 then left, left_rem = 0, 0 end
      if left < back or (left == back and left_rem < back_rem) then back, back_rem = left, left_rem end
      if micros < back or (micros == back and rem <= back_rem) then
        micros, rem = 0, 0
      elseif rem >= back_rem then
        micros, rem = micros - back, rem - back_rem
      else
        micros, rem = micros - back - 1, rem + m - back_rem
      end
    else
      -- Charge the excess from the later of the TAT and now, never past an
      -- empty bucket (now + w) unless the TAT is already later.
      local cap, cap_rem = now + w, 0
      if micros > cap or (micros == cap and rem > 0) then cap, cap_rem = micros, rem end
      if micros < now then micros, rem = now, 0 end
      local whole, part = tokens(math.min(units, m), m, w)
      micros, rem = micros + whole, rem + part
      if rem >= m then micros, rem = micros + 1, rem - m end
      if micros > cap or (micros == cap and rem > cap_rem) then micros, rem = cap, cap_rem end
    end
    records = records .. struct.pack('<i8I4', micros, rem)
    if rem > 0 then micros = micros + 1 end
    if micros > full then full = micros end
  end
until not again
if fresh and settle_at and units < 0 then return {0} end
reply[3 + 2 * n] = nil -- Redis reads an array up to its first nil
if reply[1] == 0 then
  refused = true
elseif units == 0 and not settle_at then
  return reply
end
-- The key outlives the instant every bucket is full again by 5 to 10 s,
-- the grace for a clock a little behind (a replica's after a failover): it
-- expires at the end of the 5 s step after the one that instant falls in,
-- and its TTL is renewed only when that instant enters another step.
local STEP = 5000000
local step = (full - full % STEP) / STEP
local renew = fresh or step ~= (stored_full - stored_full % STEP) / STEP
state, span = records, renew and (step + 2) * STEP - now
