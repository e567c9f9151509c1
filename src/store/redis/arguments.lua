-- Prepended to both scripts: the arguments every script call carries.
--
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  the policy, packed little-endian: the mode (one byte), the TTL
--          in milliseconds (8 bytes), then for each limit its max (4 bytes)
--          and window in microseconds (8 bytes)
--
-- Sets `now` (µs), `spec` (ARGV[2]) and `n` (the number of limits).

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(ARGV[1])
end
local spec = ARGV[2]
local n = (#spec - 9) / 12

