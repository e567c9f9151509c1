local now
if ARGV[1] then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
