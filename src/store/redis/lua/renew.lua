-- tower-sliding-window: renews the in-flight slots an instance still holds
-- on one key, as KeyState::renew does (see lease.lua for the set).
-- KEYS[1]  the slots: lease ids scored by their expiry (µs)
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  a lease's length in µs
-- ARGV[3], ARGV[4], ...  the ids to renew; one already gone stays gone
-- The reply is how many were renewed.
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local lease, renewed = ARGV[2] + 0, 0
for i = 3, #ARGV do
  renewed = renewed + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + lease, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + 1)
return renewed
