-- Acquire several locks at once, all or none, and bump each resource's own
-- fencing counter. Used for sets of resources; a single lock is a pipeline
-- of native commands instead (src/acquire.rs), with the same effect.
-- KEYS lock key and fence counter key of each member, in pairs
-- ARGV[1] lock value, ARGV[2] ttl in ms, ARGV[3] counter idle expiry in ms,
-- ARGV[4] seed of a missing counter (the client's reading of the instance
-- clocks, in microseconds; 0 when it has none)
-- Returns {1, counter...} when granted, {0} when any member is held.
--
-- Everything is checked before anything is written: a script that fails
-- half-way keeps what it wrote.
local held = false
local counters = {}
for i = 1, #KEYS, 2 do
  local lock_type = redis.call('TYPE', KEYS[i])['ok']
  if lock_type == 'string' then
    held = true
  elseif lock_type ~= 'none' then
    return redis.error_reply('WRONGTYPE redfence: lock key ' .. KEYS[i] .. ' holds a ' .. lock_type)
  end
  -- GET fails with WRONGTYPE on a key of another type, before any write.
  local current = redis.call('GET', KEYS[i + 1])
  if current and not string.match(current, '^%d+$') then
    return redis.error_reply('WRONGTYPE redfence: fence key ' .. KEYS[i + 1] .. ' is not a counter')
  end
  counters[#counters + 1] = current
end
if held then
  return {0}
end
local reply = {1}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  -- Tokens stay below 2^53, so Lua's doubles add 1 exactly, and '%.0f'
  -- prints every digit.
  local token = tonumber(counters[(i + 1) / 2] or ARGV[4]) + 1
  redis.call('SET', KEYS[i + 1], string.format('%.0f', token), 'PX', ARGV[3])
  reply[#reply + 1] = token
end
return reply
