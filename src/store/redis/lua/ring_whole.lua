-- The ring read whole into `stamps`, oldest first; `fresh` when the key
-- holds no state of ours, which then reads as a fresh one.
local whole = redis.call('GET', key) or ''
local {{state}}
if #whole >= {{trailer}} then
  {{state}} = struct.unpack('{{trailer_format}}', whole, #whole - {{trailer}} + 1)
end
local fresh = not (len and len <= {{cap}} and head < {{cap}} and (len == {{cap}} or head == 0) and #whole == 8 * len + {{trailer}})
if fresh then
  {{state}} = {{fresh}}
end
local stamps = {}
for i = 0, len - 1 do
  local slot = head + i
  if slot >= {{cap}} then slot = slot - {{cap}} end
  stamps[i + 1] = struct.unpack('<i8', whole, 1 + slot * 8)
end
