-- Fencing counter helpers, prepended to acquire.lua and fence_raise.lua
-- when they are loaded (Redis scripts cannot import one another).

-- The counter's value (nil when missing), or an error reply when the key
-- holds anything but a decimal integer. GET itself fails with WRONGTYPE on
-- a key of another type, before the script has written anything.
local function read_counter(key)
  local value = redis.call('GET', key)
  if value and not string.match(value, '^%d+$') then
    return nil, redis.error_reply('WRONGTYPE redfence: fence key ' .. key .. ' is not a counter')
  end
  return value, nil
end

-- The seed of a missing counter: the instance clock in microseconds,
-- rounded down to the millisecond. It is above every token issued before,
-- unless the counter was lost and recreated within a millisecond of its
-- creation (no restart is that fast). The rounding is for speed: instances
-- that create a resource's counter in the same millisecond return the same
-- token, so a new resource's first grant skips the raise round.
-- Built as a string, because Lua numbers would print large values in
-- exponent form.
local function clock_seed()
  local now = redis.call('TIME')
  local micros = tonumber(now[2])
  return now[1] .. string.format('%06d', micros - micros % 1000)
end
