-- tower-sliding-window: the head of window.lua, log.lua, bucket.lua and
-- renew.lua, joined before each: the time, and a key's in-flight slots under
-- a cap, judged as src/algorithm/leases.rs judges them, with the same names.
-- KEYS[#KEYS]  with a cap, the slots: a sorted set of lease ids, each
--              scored by its expiry (µs); released with ZREM
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  '' for no cap; else 'cap lease id': the cap, a lease's length in
--          µs, and the id of the slot an admitted request takes
-- A request the cap refuses is answered here, recording nothing: {3, now}.
-- So is every request of a policy with a cap and no limit: {1, now, slots
-- held before it}. A request of no cost (ARGV[3] is 0), which the windows
-- only peek at, takes its slot here; one of any other cost takes it once
-- the windows have recorded it. A peek has the id 0, and takes none.
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
-- The time asked. A judging script may raise now to the latest time its
-- state counted in (a clock that stepped back); a lease and a penalty
-- still count from the time asked, as in Rust.
local asked = now
-- Under a cap, the functions of leases.rs; without one, `take` is nil and
-- the judging script takes no slot.
local leases, take
if ARGV[2] ~= '' then
  leases = KEYS[#KEYS]
  local cap, lease, id = string.match(ARGV[2], '^(%d+) (%d+) (%d+)$')
  cap, lease = cap + 0, lease + 0
  -- Says whether cap or more leases are held, once those that expired by
  -- now are dropped (only looked for when there are that many).
  local function is_full()
    if redis.call('ZCARD', leases) < cap then return false end
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
    return redis.call('ZCARD', leases) >= cap
  end
  -- Holds this request's lease until the time asked + lease, unless
  -- released or renewed; the set lives as long as its latest lease.
  take = function()
    if id == '0' then return end
    redis.call('ZADD', leases, string.format('%d', asked + lease), id)
    local ttl = math.ceil(lease / 1000) + 1
    if redis.call('PTTL', leases) < ttl then
      redis.call('PEXPIRE', leases, string.format('%d', ttl))
    end
  end
  if is_full() then return {3, now} end
  local limits = (#ARGV - 6) / 2
  if limits == 0 or ARGV[3] == '0' then
    local held = redis.call('ZCARD', leases)
    take()
    if limits == 0 then return {1, now, held} end
  end
end
