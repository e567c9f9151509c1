-- KEYS[2] holds until when (µs) the key serves a penalty: it is refused
-- until then, with nothing recorded.
local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if penalty_until > now then
  return struct.pack('<Bi8i8', 2, now, penalty_until)
end
