-- tower-sliding-window: {{kind}} for {{signature}} ({{mode}}), TTL {{ttl}} ms
-- Settles a request of the sliding log: judged at ARGV[1], it recorded
-- ARGV[2] stamps and used ARGV[3] units. Stamps it did not use are taken
-- back; an excess is recorded at now, as many as the ring holds (the
-- oldest make way). The ring is rewritten whole, oldest stamp first, its
-- cursors back on the oldest stamp, which the next decision moves on.
-- Rare beside decisions, it trades the judging script's care for brevity.
-- A key gone (or no state of ours) has nothing to give back, and is
-- charged an excess afresh.
{{now}}
local key = KEYS[1]
local at, cost, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
{{ring_whole}}
if fresh and used <= cost then return struct.pack('<B', 0) end
local first = 1
if used < cost then
  -- The request's stamps are among the newest equal to its time.
  local back, i = cost - used, len
  while back > 0 and i >= 1 and stamps[i] >= at do
    if stamps[i] == at then
      table.remove(stamps, i)
      back = back - 1
    end
    i = i - 1
  end
else
  if len > 0 and newest > now then now = newest end
  for _ = 1, math.min(used - cost, {{cap}}) do stamps[#stamps + 1] = now end
  if #stamps > {{cap}} then first = #stamps - {{cap}} + 1 end
end
local kept = {}
for i = first, #stamps do kept[#kept + 1] = struct.pack('<i8', stamps[i]) end
len = #kept
newest = stamps[#stamps] or -1
local oldest, next = stamps[first] or -1, stamps[first + 1] or -1
kept[#kept + 1] = struct.pack('{{trailer_format}}', 0, len, newest, {{cursors}})
-- A key charged afresh takes the judging script's TTL; others keep theirs.
if fresh then
  redis.call('SET', key, table.concat(kept), 'PX', '{{ttl}}')
else
  redis.call('SET', key, table.concat(kept), 'KEEPTTL')
end
return struct.pack('<B', 1)
