-- Downstream fencing for the readers of a reader-writer lock, on a
-- Redis-backed store: read a value unless a writer with a newer token has
-- read or written the key, and raise the key's read fence to the reader's
-- token, so a writer with an older token (a writer whose lease ran out) is
-- refused from now on. Readers do not fence each other: they share the
-- lock, and their tokens only order them against writers.
-- Packed by `fenced_get_shared` (src/fenced.rs).
-- KEYS[1] highest-token key (writers'), KEYS[2] data key, KEYS[3] the
-- highest token that read as a reader
-- ARGV[1] token
-- Returns the value (nil when the key is absent), or the error STALE when
-- a newer writer has read or written the key: this reader must stop.
local written = redis.call('GET', KEYS[1])
if written and tonumber(written) > tonumber(ARGV[1]) then
  return redis.error_reply('STALE token ' .. ARGV[1] .. ' is older than the key\'s write fence '
    .. written .. ': a newer writer has read or written it; stop')
end
local read = redis.call('GET', KEYS[3])
if not read or tonumber(read) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[3], ARGV[1])
end
return redis.call('GET', KEYS[2])
