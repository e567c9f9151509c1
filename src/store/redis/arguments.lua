-- Prepended to the log script: the arguments each of its calls carries.
--
-- ARGV[1]  the policy, packed little-endian: the mode (one byte), the TTL
--          in milliseconds (8 bytes), then for each limit its max (4 bytes)
--          and window in microseconds (8 bytes)
-- ARGV[2]  now in microseconds, from the client's clock; absent to read the
--          server's TIME (an argument costs Redis about 1,800 instructions
--          even when empty, so none is sent for the default)
--
-- Sets `now` (µs), `spec` (ARGV[1]) and `n` (the number of limits).

local spec = ARGV[1]
local now
if ARGV[2] then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local n = (#spec - 9) / 12
