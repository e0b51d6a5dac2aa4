-- Raise a fencing counter to at least a token, and report whether the lock
-- still holds our value. Counters only ever go up.
-- KEYS[1] lock key, KEYS[2] fence counter key
-- ARGV[1] lock value, ARGV[2] token, ARGV[3] counter idle expiry in ms
-- Returns 1 when the counter is >= token and the lock is ours, 0 when the
-- counter is raised but the lock is not ours.
local current = redis.call('GET', KEYS[2])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE redfence: fence key ' .. KEYS[2] .. ' is not a counter')
end
if not current then
  -- The counter was lost after the grant (or this raise arrives late):
  -- seed it from the instance clock in microseconds, never with the old
  -- token alone, or the next grant here could repeat that token. Built as a
  -- string: Lua would print a large number in exponent form.
  local now = redis.call('TIME')
  current = now[1] .. string.format('%06d', tonumber(now[2]))
  redis.call('SET', KEYS[2], current)
end
-- Tokens stay below 2^53, so tonumber compares them exactly.
if tonumber(current) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
