-- tower-sliding-window: the sliding window counter and the fixed window,
-- judged as src/algorithm/counter.rs and fixed.rs judge them, for every
-- policy of these algorithms (the limits come as arguments).
-- KEYS[1]  the state: per limit, in order, the fixed window's index (now //
--          w), the count of the window before it (the counter only) and
--          that of the window: struct.pack('<i8I4I4', window, previous,
--          current) for the counter, struct.pack('<i8I4', window, current)
--          for the fixed window, as src/state.rs writes them
-- ARGV  as lease.lua and state.lua, joined before this script, read them:
--       ARGV[6] is 'c' for the sliding counter, 'f' for the fixed window;
--       tail.lua, joined after it, writes the state and answers
-- Takes from lease.lua `now` (raised here for a clock that stepped back)
-- and `asked`; from state.lua `units`, `settle_at` and `n`; sets state.lua's
-- `reply`, `refused`, `state` and `span` for tail.lua.
-- Judging, the reply is {1 accepted or 0 refused, now, then per limit the
-- previous and current counts the request was judged against}, or {2, now,
-- the penalty's end} for a key serving a penalty; an accepted request
-- takes its in-flight slot. Settling: {1}, or {0} for a key gone.
--   cat lease.lua state.lua window.lua tail.lua > /tmp/window.lua
--   redis-cli --eval /tmp/window.lua k , '' '' 1 '' 0 c 10 1000000 100 60000000
local sliding = ARGV[6] == 'c'
local layout, size = '<i8I4', 12
if sliding then layout, size = '<i8I4I4', 16 end
local raw = redis.call('GET', KEYS[1])
local fresh = not raw or #raw ~= size * n

-- Each limit's record, rolled to now's window: the request fits if current +
-- cost <= max and previous · (w - elapsed) / w <= max - cost - current, the
-- previous window weighted by how much of it the sliding window still
-- covers. The records a recording request leaves are packed as it goes; a
-- refusal writes none of them.
--
-- A record is read as it was written: a whole window index at most 2^31
-- windows ahead of the time asked's (a clock that stepped back as far),
-- counts no larger than their limit, and no previous count for the fixed
-- window. Anything else under the key reads as fresh, judged at the time
-- asked; a clock that stepped back is judged at the latest window counted
-- in (counted_since). Either starts the judging over.
local cost = units == 0 and 1 or units
reply = {1, now, 0, 0, 0, 0}
local records, longest, rolled, allowed, again
repeat
  records, longest, rolled, allowed, again = '', 0, fresh, true, false
  for i = 1, n do
    local m, w = ARGV[5 + 2 * i] + 0, ARGV[6 + 2 * i] + 0
    if w > longest then longest = w end
    local window, previous, current = 0, 0, 0
    if not fresh then
      if sliding then
        window, previous, current = struct.unpack(layout, raw, size * (i - 1) + 1)
      else
        window, current = struct.unpack(layout, raw, size * (i - 1) + 1)
      end
      if not (window >= 0 and window - asked / w <= 2147483648
        and previous <= m and current <= m) then
        fresh, again, now = true, true, asked
        break
      end
      if window * w > now then
        now, again = window * w, true
        break
      end
    end
    local elapsed = now % w
    local k = (now - elapsed) / w
    if k ~= window then
      previous = (sliding and k == window + 1) and current or 0
      current, window, rolled = 0, k, true
    end
    reply[1 + 2 * i], reply[2 + 2 * i] = previous, current
    if settle_at then
      -- What was not used goes back to the window it was counted in, if
      -- still the current or previous one; an excess is charged as far as max.
      local counted_in = (settle_at - settle_at % w) / w
      if units >= 0 then
        current = math.min(current + units, m)
      elseif window == counted_in then
        current = current - math.min(-units, current)
      elseif sliding and window == counted_in + 1 then
        previous = previous - math.min(-units, previous)
      end
    else
      local room = m - cost - current
      local lhs, rhs = previous * (w - elapsed), room * w
      -- Exact in doubles while one product is below 2^53 (a product past
      -- it stays past it when rounded), else compared on 16-bit limbs.
      if lhs >= 9007199254740992 and rhs >= 9007199254740992 then
        local function limbs(x, y) -- x · y, least significant limb first
          local xs, ys, sum = {}, {}, {0, 0, 0, 0, 0, 0, 0, 0, 0}
          for l = 1, 4 do
            xs[l], ys[l] = x % 65536, y % 65536
            x, y = (x - xs[l]) / 65536, (y - ys[l]) / 65536
          end
          for l = 1, 4 do
            local carry = 0
            for j = 1, 5 do
              local v = sum[l + j - 1] + (ys[j] or 0) * xs[l] + carry
              carry = math.floor(v / 65536)
              sum[l + j - 1] = v - carry * 65536
            end
          end
          return sum
        end
        local x, y = limbs(previous, w - elapsed), limbs(room, w)
        lhs, rhs = 0, 0
        for l = 9, 1, -1 do
          if x[l] ~= y[l] then lhs, rhs = x[l], y[l]; break end
        end
      end
      if room < 0 or lhs > rhs then allowed = false end
      current = current + units
    end
    if allowed and sliding then
      records = records .. struct.pack(layout, window, previous, current)
    elseif allowed then
      records = records .. struct.pack(layout, window, current)
    end
  end
until not again
if fresh and settle_at and units < 0 then return {0} end
reply[2] = now
reply[3 + 2 * n] = nil -- Redis reads an array up to its first nil
if not allowed then
  reply[1], refused = 0, true
elseif units == 0 and not settle_at then
  return reply
end
-- The TTL is renewed only when a window rolls (or the key is new), to twice
-- the longest window (once for the fixed window): as long as a state
-- matters after its last roll. tail.lua writes it.
state, span = records, rolled and (sliding and 2 * longest or longest)
