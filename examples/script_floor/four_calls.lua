-- The four-call form of the acquire hot path (one resource): MGET reads
-- the void key and the counter together. Measured, not used: it costs the
-- same as the five-call form (docs/performance.md).
local EPS = 5000
if #KEYS == 3 then
  local read = redis.call('MGET', KEYS[3], KEYS[2])
  if read[1] then
    return {0}
  end
  local current = read[2]
  local counted = current and tonumber(current)
  if current and not counted then
    return redis.error_reply('WRONGTYPE redfence: fence key ' .. KEYS[2] .. ' is not a counter')
  end
  local holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if holder and holder ~= ARGV[1] then
    local identity = string.match(holder, '^[^:]*:(.*)$')
    if identity then
      return {0, identity}
    end
    return {0}
  end
  local now = redis.call('TIME')
  local clock = now[1] * 1000000 + now[2]
  local token = tonumber(ARGV[4]) or 0
  if token < clock then token = clock elseif token > clock + EPS then token = clock + EPS end
  if holder and counted then
    token = counted
  elseif counted and counted >= token then
    token = counted + 1
  end
  local stored = redis.pcall('SET', KEYS[2], string.format('%.0f', token), 'PX', ARGV[3], 'GET')
  if type(stored) == 'table' and stored.err then
    if not holder then redis.call('DEL', KEYS[1]) end
    return stored
  end
  return {1, token}
end
return {0}
