-- tower-sliding-window: {{kind}} for {{signature}} ({{mode}}), TTL {{ttl}} ms
-- Judges a request of ARGV[1] units under the sliding log, as that many
-- requests at one instant, and records that many stamps if every limit has
-- room: a limit of `max` refuses while its (max - cost + 1)-th newest stamp
-- is inside its window. The ring is rewritten whole, oldest stamp first,
-- with cursors on each window's oldest stamp. Requests of one unit take
-- the judging script, which touches only what it must.
{{now}}
local cost = tonumber(ARGV[1])
--@if penalty
{{penalty_check}}
--@end
local key = KEYS[1]
{{ring_whole}}
if len > 0 and newest > now then now = newest end
local {{blocked}} = {{none_blocked}}
local refused = false
--@each
if len >= {{max}} - cost + 1 then
  b{{i}} = stamps[len - {{max}} + cost]
  if b{{i}} >= now - {{w}} then refused = true end
end
--@end
if refused then
  --@if penalty
  redis.call('SET', KEYS[2], string.format('%d', now + {{penalty}}), 'PX', '{{penalty_ttl}}')
  --@end
  return struct.pack('<Bi8{{blocked_format}}', 0, now, {{blocked}})
end
for _ = 1, cost do stamps[#stamps + 1] = now end
local first = 1
if #stamps > {{cap}} then first = #stamps - {{cap}} + 1 end
local kept = {}
for i = first, #stamps do kept[#kept + 1] = struct.pack('<i8', stamps[i]) end
len = #kept
-- Each window's cursor on its oldest stamp, which the new ones guarantee.
local cursor, stamp, next
--@each
cursor = first
while stamps[cursor] < now - {{w}} do cursor = cursor + 1 end
u{{i}}, s{{i}}, t{{i}} = cursor - first, stamps[cursor], stamps[cursor + 1] or -1
--@end
local trailer = struct.pack('{{trailer_format}}', 0, len, now, {{cursors}})
kept[#kept + 1] = trailer
redis.call('SET', key, table.concat(kept), 'PX', '{{ttl}}')
return trailer
