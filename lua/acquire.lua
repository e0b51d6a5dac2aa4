-- Acquire a lock and bump its fencing counter, atomically.
-- KEYS[1] lock key, KEYS[2] fence counter key
-- ARGV[1] lock value, ARGV[2] ttl in ms, ARGV[3] counter idle expiry in ms
-- Returns {1, token} when granted, {0, pttl} when held by someone else.
-- (counter.lua is prepended.)
--
-- The counter is checked before anything is written: an error half-way
-- would leave the lock set without a counter bump.
local current, err = read_counter(KEYS[2])
if err then
  return err
end

if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- SET NX also refuses a key of another type: say so, rather than
  -- reporting it as "held by someone else, forever".
  local lock_type = redis.call('TYPE', KEYS[1])['ok']
  if lock_type ~= 'string' and lock_type ~= 'none' then
    return redis.error_reply('WRONGTYPE redfence: lock key ' .. KEYS[1] .. ' holds a ' .. lock_type)
  end
  return {0, redis.call('PTTL', KEYS[1])}
end

-- New resource, lost data or idle expiry: start from the clock. Tokens stay
-- below 2^53, so Lua's doubles add 1 exactly, and '%.0f' prints every digit.
local token = tonumber(current or clock_seed()) + 1
redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', ARGV[3])
return {1, token}
