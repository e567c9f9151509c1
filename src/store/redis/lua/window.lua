-- tower-sliding-window: {{kind}} for {{signature}} ({{mode}}), TTL {{ttl}} ms
-- The sliding window counter and the fixed window, for one policy whose
-- limits are the constants below (docs/design.md, "Redis"). KEYS[1] holds
-- the state; ARGV[1], if given, is now in microseconds (ARGV[2] after
-- the request's cost in the script that records a cost).
{{now}}
--@if costed
local cost = tonumber(ARGV[1])
--@end
--@if penalty
{{penalty_check}}
--@end
--@if exact_fits
-- a * b <= c * d for integers below 2^53 whose products may not be: the
-- products on 16-bit limbs, nine limbs each, least significant first.
local function fits(a, b, c, d)
  local lhs, rhs = a * b, c * d
  if lhs < 9007199254740992 then return rhs >= 9007199254740992 or lhs <= rhs end
  if rhs < 9007199254740992 then return false end
  local function product(x, y)
    local xs, ys = {}, {}
    for l = 1, 4 do
      xs[l], ys[l] = x % 65536, y % 65536
      x, y = (x - xs[l]) / 65536, (y - ys[l]) / 65536
    end
    local sum = {0, 0, 0, 0, 0, 0, 0, 0, 0}
    for l = 1, 4 do
      local carry = 0
      for m = 1, 4 do
        local v = sum[l + m - 1] + xs[l] * ys[m] + carry
        carry = math.floor(v / 65536)
        sum[l + m - 1] = v - carry * 65536
      end
      local at = l + 4
      while carry > 0 do
        local v = sum[at] + carry
        carry = math.floor(v / 65536)
        sum[at] = v - carry * 65536
        at = at + 1
      end
    end
    return sum
  end
  local x, y = product(a, b), product(c, d)
  for l = 9, 1, -1 do
    if x[l] ~= y[l] then return x[l] < y[l] end
  end
  return true
end
--@end
local raw = redis.call('GET', KEYS[1])
local {{state}} = {{zeros}}
--@if integer
-- One integer below 2^53: anything else reads as a fresh key.
local v = raw and tonumber(raw)
local fresh = not (v and v >= 0 and v < 9007199254740992 and v % 1 == 0)
if not fresh then
  {{decode}}
--@else
-- Per limit the window index modulo 2^32 and the two counts, 4 bytes
-- each: a value of any other length reads as a fresh key.
local fresh = not raw or #raw ~= {{bytes}}
if not fresh then
  {{state}} = struct.unpack('<{{words}}', raw)
  local k, behind
  --@each
  k = (now - now % {{w}}) / {{w}}
  behind = (k % 4294967296 - k{{i}}) % 4294967296
  if behind < 2147483648 or behind * {{w}} <= {{lifetime}} then k{{i}} = k - behind else k{{i}} = k + (4294967296 - behind) end
  --@end
--@end
  -- A clock that stepped back is judged at the latest window counted in.
  --@each
  if k{{i}} * {{w}} > now then now = k{{i}} * {{w}} end
  --@end
end
--@if settle
-- A request judged at ARGV[1] counted ARGV[2] units and used ARGV[3]: with
-- the windows rolled to now, what it did not use goes back to the window it
-- was counted in, if that is still the current or the previous one, and an
-- excess is charged to the current one, as far as each limit. A key gone
-- has nothing to give back, and is charged afresh.
local at, cost, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local extra = used - cost
if fresh and extra < 0 then return struct.pack('<B', 0) end
--@end
local rolled, elapsed, k = false
--@each
elapsed = now % {{w}}
k = (now - elapsed) / {{w}}
if k ~= k{{i}} then
  --@if sliding
  if k == k{{i}} + 1 then p{{i}} = c{{i}} else p{{i}} = 0 end
  --@else
  p{{i}} = 0
  --@end
  c{{i}}, k{{i}}, rolled = 0, k, true
end
local f{{i}} = c{{i}} <= {{room}}
--@if sliding
--@if plain
if f{{i}} and p{{i}} > 0 then f{{i}} = p{{i}} * ({{w}} - elapsed) <= ({{room}} - c{{i}}) * {{w}} end
--@else
if f{{i}} and p{{i}} > 0 then f{{i}} = fits(p{{i}}, {{w}} - elapsed, {{room}} - c{{i}}, {{w}}) end
--@end
--@end
--@end
local allowed = {{all_fit}}
--@if settle
if extra < 0 then
  local counted_in
  --@each
  counted_in = (at - at % {{w}}) / {{w}}
  if k{{i}} == counted_in then
    c{{i}} = c{{i}} - math.min(-extra, c{{i}})
  --@if sliding
  elseif k{{i}} == counted_in + 1 then
    p{{i}} = p{{i}} - math.min(-extra, p{{i}})
  --@end
  end
  --@end
else
  {{currents}} = {{currents_counted}}
end
--@else
--@if record
if allowed then
  {{currents}} = {{currents_counted}}
end
--@end
--@end
--@if record
--@if penalty
if not allowed then
  redis.call('SET', KEYS[2], string.format('%d', now + {{penalty}}), 'PX', '{{penalty_ttl}}')
end
--@end
--@end
local reply = struct.pack('<BI8{{words}}', allowed and 1 or 0, now{{packed}})
--@if record
if allowed then
  -- The TTL is renewed only when a window rolls (or the key is new); it
  -- goes as text, which Redis need not format as it would a number.
  if rolled or fresh then
    redis.call('SET', KEYS[1], {{stored}}, 'PX', '{{ttl}}')
  else
    redis.call('SET', KEYS[1], {{stored}}, 'KEEPTTL')
  end
end
--@end
--@if settle
return struct.pack('<B', 1)
--@else
return reply
--@end
