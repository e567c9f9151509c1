-- tower-sliding-window: one instance's heartbeat, and the count of the
-- instances sharing the prefix (src/store/redis/fleet.rs).
-- KEYS[1]  the sorted set of live instances: each member an instance's id,
--          scored by the time (ms, Redis TIME) its entry expires
-- ARGV[1]  this instance's id
-- ARGV[2]  how long (ms) the entry lives unless refreshed
-- The reply is the number of live instances, this one included.
--   redis-cli --eval fleet.lua tsw:instances , my-instance 3000
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local life = ARGV[2] + 0
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + life, ARGV[1])
-- The set outlives every entry in it, whatever interval each instance
-- beats at.
if redis.call('PTTL', KEYS[1]) < life then
  redis.call('PEXPIRE', KEYS[1], life)
end
return redis.call('ZCARD', KEYS[1])
