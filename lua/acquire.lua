-- Acquire a lock and bump its fencing counter, atomically.
-- KEYS[1] lock key, KEYS[2] fence counter key
-- ARGV[1] lock value, ARGV[2] ttl in ms, ARGV[3] counter idle expiry in ms
-- Returns {1, token} when granted, {0, pttl} when held by someone else.
--
-- Types are checked before anything is written: a plain SET NX would read a
-- key of another type as "held forever", and an error raised half-way would
-- leave the lock set without a counter bump.
local lock_type = redis.call('TYPE', KEYS[1])['ok']
if lock_type ~= 'none' and lock_type ~= 'string' then
  return redis.error_reply('WRONGTYPE redfence: lock key ' .. KEYS[1] .. ' holds a ' .. lock_type)
end
local fence_type = redis.call('TYPE', KEYS[2])['ok']
if fence_type ~= 'none' and fence_type ~= 'string' then
  return redis.error_reply('WRONGTYPE redfence: fence key ' .. KEYS[2] .. ' holds a ' .. fence_type)
end
local current = redis.call('GET', KEYS[2])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE redfence: fence key ' .. KEYS[2] .. ' is not a counter')
end

if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end

if not current then
  -- A missing counter (new resource, lost data, idle expiry) starts from the
  -- instance clock in microseconds, above every token issued before it.
  -- Built as a string: Lua numbers would print large values in exponent form.
  local now = redis.call('TIME')
  redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
end
local token = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, token}
