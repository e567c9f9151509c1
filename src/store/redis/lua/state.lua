-- tower-sliding-window: the head of window.lua, log.lua and bucket.lua,
-- joined after lease.lua: the arguments every judging script reads, the
-- key's penalty, judged above the algorithms as src/state.rs judges it, and
-- what every script does with its state: ttl_for, write, refuse, recorded.
-- KEYS[2]  until when (µs) the key serves a penalty (used if ARGV[5] ~= 0)
-- ARGV[3]  judging: the cost, recorded if every limit has room (0: judge one
--          unit, record nothing); settling: units to charge (< 0: give back)
-- ARGV[4]  '' to judge; to settle, 'at' or 'at cost': the time (µs) the
--          request was judged at, and for the bucket its cost
-- ARGV[5]  the penalty in µs a refusal starts (0: none)
-- ARGV[6]  the algorithm: 'c' counter, 'f' fixed window, 'l' log, 'b' bucket
-- ARGV[7], ARGV[8], ...  each limit's max and window in µs
-- A key serving a penalty is answered here, recording nothing: {2, now,
-- the penalty's end}.
local units = ARGV[3] + 0
local settle_at, settle_cost
if ARGV[4] ~= '' then
  local at, cost = string.match(ARGV[4], '^(%d+) ?(%d*)$')
  if not at then return redis.error_reply('ARGV[4] must be "at" or "at cost" to settle') end
  settle_at, settle_cost = at + 0, tonumber(cost)
end
local penalty = ARGV[5] ~= '0' and ARGV[5] + 0
local n = (#ARGV - 6) / 2
-- Each limit's max and window (µs), and the longest window.
local max, win, longest = {0, 0}, {0, 0}, 0
for i = 1, n do
  max[i], win[i] = ARGV[5 + 2 * i] + 0, ARGV[6 + 2 * i] + 0
  if win[i] > longest then longest = win[i] end
end
if penalty and not settle_at then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end
-- The TTL in ms of what must live `span` µs from now: rounded up, plus one.
local function ttl_for(span)
  return math.ceil(span / 1000) + 1
end
-- Writes the key's state, renewing its TTL to `ttl` ms, or keeping it (nil).
local function write(state, ttl)
  if ttl then
    redis.call('SET', KEYS[1], state, 'PX', ttl)
  else
    redis.call('SET', KEYS[1], state, 'KEEPTTL')
  end
end
-- A refusal by the limits answers `reply`, and starts the key's penalty if
-- the request would have recorded something.
local function refuse(reply)
  if penalty and units > 0 then
    redis.call('SET', KEYS[2], string.format('%d', asked + penalty),
      'PX', string.format('%d', ttl_for(penalty)))
  end
  return reply
end
-- A request recorded in the state takes its in-flight slot (under a cap),
-- and answers `reply`; a settling answers {1}.
local function recorded(reply)
  if leases then take() end
  if settle_at then return {1} end
  return reply
end
