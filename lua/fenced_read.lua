-- Downstream fencing for a read-modify-write on a Redis-backed store: read
-- a value and raise the key's fence to the reader's token, so a writer
-- with an older token (a holder whose lease ran out) is refused from now
-- on, exactly as the SQL recipe raises the fence when reading.
-- Packed by `fenced_get` (src/fenced.rs).
-- KEYS[1] highest-token key, KEYS[2] data key, KEYS[3] the highest token
-- that read as a reader (`lua/fenced_shared_read.lua`)
-- ARGV[1] token
-- Returns the value (nil when the key is absent), or the error STALE when
-- a newer token has read or written the key: this reader must stop.
local highest = redis.call('GET', KEYS[1])
if highest and tonumber(highest) > tonumber(ARGV[1]) then
  return redis.error_reply('STALE token ' .. ARGV[1] .. ' is older than the key\'s fence '
    .. highest .. ': a newer holder has read or written it; stop')
end
local read = redis.call('GET', KEYS[3])
if read and tonumber(read) > tonumber(ARGV[1]) then
  return redis.error_reply('STALE token ' .. ARGV[1] .. ' is older than the key\'s read fence '
    .. read .. ': a newer reader has read it; stop')
end
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('GET', KEYS[2])
