-- tower-sliding-window: renews the in-flight slots an instance still holds,
-- as KeyState::renew does (see lease.lua for the sets): one call for every
-- key of one node, or of one hash slot on a Cluster.
-- KEYS[k]  a set of slots: lease ids scored by their expiry (µs)
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  a lease's length in µs
-- ARGV[3], ...  for each key in order, how many of its ids follow, then
--          the ids; one already gone stays gone, none ends sooner
-- The reply is how many were renewed.
--   redis-cli --eval renew.lua 'tsw:{k}:v4:i8:leases' , '' 30000000 1 42
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local lease, renewed, at = ARGV[2] + 0, 0, 3
local ttl = math.ceil(lease / 1000) + 1
for k = 1, #KEYS do
  local ids = ARGV[at] + 0
  for i = at + 1, at + ids do
    local ends = tonumber(redis.call('ZSCORE', KEYS[k], ARGV[i]))
    if ends and ends < now + lease then
      renewed = renewed + redis.call('ZADD', KEYS[k], 'XX', 'CH', now + lease, ARGV[i])
    end
  end
  at = at + ids + 1
  if redis.call('PTTL', KEYS[k]) < ttl then redis.call('PEXPIRE', KEYS[k], ttl) end
end
return renewed
