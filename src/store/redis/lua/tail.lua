-- tower-sliding-window: the tail of window.lua, log.lua and bucket.lua,
-- joined after each: what every judging script does with its verdict, as
-- src/state.rs does above the algorithms. Takes from lease.lua `asked`,
-- `leases` and `take`; from state.lua `units`, `settle_at`, `penalty`, and
-- what the script before it set: `reply`, `refused`, `state` and `span`.
-- A refusal by the limits starts the key's penalty, if the request would
-- have recorded something, and writes nothing else.
if refused then
  if penalty and units > 0 then
    redis.call('SET', KEYS[2], string.format('%d', asked + penalty),
      'PX', string.format('%d', math.ceil(penalty / 1000) + 1))
  end
  return reply
end
-- The state is written with its TTL renewed to outlive `span`, in ms
-- rounded up plus one, or kept; a state written in place only renews it.
-- Numbers go as text made with %d: Redis would print them as floats.
local ttl = span and string.format('%d', math.ceil(span / 1000) + 1)
if state and ttl then
  redis.call('SET', KEYS[1], state, 'PX', ttl)
elseif state then
  redis.call('SET', KEYS[1], state, 'KEEPTTL')
elseif ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
-- A request recorded takes its in-flight slot, under a cap.
if leases then take() end
if settle_at then return {1} end
return reply
