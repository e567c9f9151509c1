-- tower-sliding-window: the head of window.lua, log.lua and bucket.lua,
-- joined after lease.lua: the arguments every judging script reads, and
-- the key's penalty, judged above the algorithms as src/state.rs judges it.
-- KEYS[2]  until when (µs) the key serves a penalty (used if ARGV[5] ~= 0)
-- ARGV[3]  judging: the cost, recorded if every limit has room (0: judge one
--          unit, record nothing); settling: units to charge (< 0: give back)
-- ARGV[4]  under local quota, 'h' and µs first: how long a chunk may be
--          spent over (the bucket charges it from then; the log widens
--          every window by it, on every call of its keys); then to settle
--          'at' or 'at cost': the time (µs) the request was judged at, and
--          for the bucket its cost; '' to judge
-- ARGV[5]  the penalty in µs a refusal starts (0: none)
-- ARGV[6]  the algorithm: 'c' counter, 'f' fixed window, 'l' log, 'b' bucket
-- ARGV[7], ARGV[8], ...  each limit's max and window in µs
-- A key serving a penalty is answered here, recording nothing: {2, now,
-- the penalty's end}.
local units = ARGV[3] + 0
local settle_at, settle_cost
local holding, settling = string.match(ARGV[4], '^h(%d+) ?(.*)$')
local hold = tonumber(holding) or 0
settling = settling or ARGV[4]
if settling ~= '' then
  local at, cost = string.match(settling, '^(%d+) ?(%d*)$')
  if not at then return redis.error_reply('ARGV[4] must be "[hHOLD ]at[ cost]" to settle') end
  settle_at, settle_cost = at + 0, tonumber(cost)
end
local penalty = ARGV[5] ~= '0' and ARGV[5] + 0
local n = (#ARGV - 6) / 2
if penalty and not settle_at then
  local penalty_until = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if penalty_until > now then return {2, now, penalty_until} end
end
-- What the script leaves for tail.lua, unless it answers itself: the
-- reply to a judging call, whether the limits refused the request, the
-- state's bytes to write (nil: none, or written in place), and for how
-- long from now (µs) the state must live (nil: the TTL is kept).
local reply, refused, state, span = nil, false, nil, nil
