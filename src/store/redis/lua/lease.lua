-- tower-sliding-window: the head of window.lua, log.lua and bucket.lua,
-- joined before each: the time, and a key's in-flight slots under a cap,
-- judged as src/algorithm/leases.rs judges them, with the same names.
-- KEYS[#KEYS]  with a cap, the slots: a sorted set of lease ids, each
--              scored by its expiry (µs); released with ZREM
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  '' for no cap; else 'cap lease id': the cap, a lease's length in
--          µs, and the id of the slot an admitted request takes
-- A request the cap refuses is answered here, recording nothing: {3, now}.
-- So is every request of a policy with a cap and no limit: {1, now, slots
-- held before it}, its slot taken unless ARGV[3] is 0 (a peek).
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local leases, cap, lease, id
if ARGV[2] ~= '' then
  leases = KEYS[#KEYS]
  cap, lease, id = string.match(ARGV[2], '^(%d+) (%d+) (%d+)$')
  cap, lease = cap + 0, lease + 0
end
-- Drops the leases that expired by now, then says whether cap or more are
-- still held.
local function is_full()
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  return redis.call('ZCARD', leases) >= cap
end
-- Holds this request's lease until now + lease, unless released or renewed.
local function take()
  redis.call('ZADD', leases, now + lease, id)
  redis.call('PEXPIRE', leases, math.ceil(lease / 1000) + 1)
end
if leases then
  if is_full() then return {3, now} end
  if #ARGV == 6 then
    local held = redis.call('ZCARD', leases)
    if ARGV[3] ~= '0' then take() end
    return {1, now, held}
  end
end
