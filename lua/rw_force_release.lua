-- An operator's forced release of a reader-writer lock
-- (`RwLock::force_release`, `redfence unlock --rw`): deletes the writer key
-- only while it holds a value whose SHA1 the call read on a quorum, and
-- each reader entry whose value's SHA1 it read on a quorum, and nothing
-- else. A copy that lands late finds a later holder's value, with another
-- SHA1, and leaves it. The counter stays.
-- Packed by `scripts::rw_force_release` (src/protocol/scripts.rs).
-- KEYS[1] writer key, KEYS[2] readers; ARGV the SHA1s of the values to
-- revoke (from `lua/rw_holders.lua`)
-- Returns how many it deleted here.
--
-- `tests/model_rwlock.rs` lets the writer key and every reader entry
-- vanish at any moment (`ExpireWriter`, `ExpireReader`), the holder then
-- stopping: a revoked holder is one that stopped, as far as the others'
-- exclusion goes; deleting only the values read keeps every other holder's.
local revoke = {}
for i = 1, #ARGV do
  revoke[ARGV[i]] = true
end
local deleted = 0
local writer = redis.call('GET', KEYS[1])
if writer and revoke[redis.sha1hex(writer)] then
  redis.call('DEL', KEYS[1])
  deleted = deleted + 1
end
for _, value in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if revoke[redis.sha1hex(value)] then
    redis.call('ZREM', KEYS[2], value)
    deleted = deleted + 1
  end
end
return deleted
