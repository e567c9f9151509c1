-- tower-sliding-window: the sliding log's rarer calls, which read its ring
-- whole and rewrite it: judging a request of several units, and settling.
-- One script for every policy: the limits come as arguments. The ring, its
-- trailer and the replies are in docs/design.md, "The Redis store". The
-- ring is rewritten oldest stamp first, each cursor on its window's oldest
-- stamp (settling: on the ring's oldest, which the next decision moves on).
-- That keeps this script short at the price of time linear in the ring;
-- requests of one unit take log.lua, which touches only what it must.
--
-- KEYS[1]  the key's state, as log.lua keeps it
-- KEYS[2]  until when (µs) the key serves a penalty; read and written only
--          when judging with ARGV[4] not 0
-- ARGV[1]  now in µs, or '' to read Redis TIME
-- ARGV[2]  units. Judging: the request's cost, as that many requests at one
--          instant, recorded if every limit has room for them all.
--          Settling: the units to charge (negative: to give back).
-- ARGV[3]  '' to judge; to settle, the time (µs) the request was judged at
-- ARGV[4]  the penalty in µs a refusal starts (0: none)
-- ARGV[5]  'l'
-- ARGV[6], ARGV[7], ...  each limit's max and window in µs
--
-- Judging, the reply is log.lua's. Settling, it is {1}, or {0} for a key
-- gone (or no state of ours), which has nothing to give back.
--
--   redis-cli --eval log_rewrite.lua k , '' 3 '' 0 l 10 1000000 100 60000000
-- Numbers are read from ARGV by arithmetic on the strings, which costs Redis
-- less than calls to tonumber.
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local units = ARGV[2] + 0
local settle_at = ARGV[3] ~= '' and ARGV[3] + 0
local penalty = ARGV[4] ~= '0' and ARGV[4] + 0
local n = (#ARGV - 5) / 2
if penalty and not settle_at then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end
local key = KEYS[1]

local max, w = {}, {}
local cap, longest = 0, 0
for i = 1, n do
  local m, win = ARGV[4 + 2 * i] + 0, ARGV[5 + 2 * i] + 0
  max[i], w[i] = m, win
  if m > cap then cap = m end
  if win > longest then longest = win end
end
local trailer = 16 + 20 * n
local trailer_format = '<I4I4i8' .. string.rep('I4i8i8', n)

-- The ring read whole into `stamps`, oldest first; a key that holds no
-- state of ours reads as a fresh one.
local whole = redis.call('GET', key) or ''
local head, len, newest = 0, 0, -1
local fresh = true
if #whole >= trailer then
  local fields = {struct.unpack(trailer_format, whole, #whole - trailer + 1)}
  fresh = not (fields[2] <= cap and fields[1] < cap and (fields[2] == cap or fields[1] == 0)
    and #whole == 8 * fields[2] + trailer)
  if not fresh then head, len, newest = fields[1], fields[2], fields[3] end
end
local stamps = {}
for i = 0, len - 1 do
  local slot = head + i
  if slot >= cap then slot = slot - cap end
  stamps[i + 1] = struct.unpack('<i8', whole, 1 + slot * 8)
end
if len > 0 and newest > now and not (settle_at and units < 0) then now = newest end

local reply
if settle_at then
  if fresh and units < 0 then return {0} end
  if units < 0 then
    -- The request's stamps are among the newest equal to its time.
    local back, i, newest_before = -units, len, stamps[len]
    while back > 0 and i >= 1 and stamps[i] >= settle_at do
      if stamps[i] == settle_at then
        table.remove(stamps, i)
        back = back - 1
      end
      i = i - 1
    end
    -- Stamps more than the longest window older than the newest never
    -- count again, unless the newest is given back: then they go too, as
    -- in every store (docs/design.md, "Costs and settling").
    if back < -units then
      local old = 0
      while old < #stamps and stamps[old + 1] + longest < newest_before do old = old + 1 end
      if old > 0 then
        local kept = {}
        for j = old + 1, #stamps do kept[#kept + 1] = stamps[j] end
        stamps = kept
      end
    end
  else
    for _ = 1, math.min(units, cap) do stamps[#stamps + 1] = now end
  end
else
  -- A limit of `max` refuses while its (max - units + 1)-th newest stamp
  -- is inside its window.
  local refused = false
  reply = {0, now}
  for i = 1, n do
    reply[2 + i] = -1
    if len >= max[i] - units + 1 then
      local blocking = stamps[len - max[i] + units]
      reply[2 + i] = blocking
      if blocking >= now - w[i] then refused = true end
    end
  end
  if refused then
    if penalty then
      redis.call('SET', KEYS[2], string.format('%d', now + penalty),
        'PX', string.format('%d', math.ceil(penalty / 1000) + 1))
    end
    return reply
  end
  for _ = 1, units do stamps[#stamps + 1] = now end
end

-- The ring rewritten, at most `cap` of the newest stamps, with the
-- trailer: judging, each cursor on its window's oldest stamp (which the
-- new ones guarantee); settling, every cursor on the ring's oldest.
local first = 1
if #stamps > cap then first = #stamps - cap + 1 end
local kept = {}
for i = first, #stamps do kept[#kept + 1] = struct.pack('<i8', stamps[i]) end
len = #kept
local state = {0, len, stamps[#stamps] or -1}
if not settle_at then reply = {1, now} end
for i = 1, n do
  local cursor = first
  if not settle_at then
    while stamps[cursor] < now - w[i] do cursor = cursor + 1 end
    reply[1 + 2 * i], reply[2 + 2 * i] = len - (cursor - first), stamps[cursor]
  end
  state[1 + 3 * i], state[2 + 3 * i], state[3 + 3 * i] =
    cursor - first, stamps[cursor] or -1, stamps[cursor + 1] or -1
end
kept[#kept + 1] = struct.pack(trailer_format, unpack(state))
-- A settling keeps the key's TTL, unless it charged a key afresh; a
-- judging starts it again, as its new stamps are the newest.
if settle_at and not fresh then
  redis.call('SET', key, table.concat(kept), 'KEEPTTL')
else
  redis.call('SET', key, table.concat(kept), 'PX', string.format('%d', math.ceil(2 * longest / 1000) + 1))
end
if settle_at then return {1} end
return reply
