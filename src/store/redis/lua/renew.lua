-- tower-sliding-window: renews the in-flight slots an instance still holds,
-- as KeyState::renew does, after lease.lua (joined before it), which reads
-- the time: one call for every key of one node, or of one hash slot on a
-- Cluster.
-- KEYS[k]  a set of slots: lease ids scored by their expiry (µs)
-- ARGV[1], ARGV[2]  now, and '' (no cap to judge): see lease.lua
-- ARGV[3]  a lease's length in µs
-- ARGV[4], ...  for each key in order, how many of its ids follow, then
--          the ids; one already gone stays gone, none ends sooner
-- The reply is how many were renewed.
--   cat lease.lua renew.lua > /tmp/renew.lua
--   redis-cli --eval /tmp/renew.lua 'tsw:{k}:v5:i8:leases' , '' '' 30000000 1 42
-- Numbers go as text made with %d: Redis would print them as floats.
local length, renewed, at = ARGV[3] + 0, 0, 4
local ttl = math.ceil(length / 1000) + 1
local until_text, ttl_text = string.format('%d', now + length), string.format('%d', ttl)
for k = 1, #KEYS do
  local ids = ARGV[at] + 0
  for i = at + 1, at + ids do
    local ends = tonumber(redis.call('ZSCORE', KEYS[k], ARGV[i]))
    if ends and ends < now + length then
      renewed = renewed + redis.call('ZADD', KEYS[k], 'XX', 'CH', until_text, ARGV[i])
    end
  end
  at = at + ids + 1
  if redis.call('PTTL', KEYS[k]) < ttl then redis.call('PEXPIRE', KEYS[k], ttl_text) end
end
return renewed
