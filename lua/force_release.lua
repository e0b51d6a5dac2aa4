-- An operator's forced release (`Redlock::force_release`, `redfence
-- unlock`): deletes the lock key only while it still holds the value the
-- call read on a quorum of instances, named by its SHA1 as `lua/holder.lua`
-- reports it. A copy that lands late, after a new holder took the lock,
-- finds another value and deletes nothing (`tests/model_grants.rs`: a plain
-- DEL landing late deleted the new holder's key and let a third in).
-- Packed by `scripts::force_release` (src/protocol/scripts.rs).
-- KEYS[1] lock key; ARGV[1] the SHA1 of the value to delete
-- Returns 1 when it deleted the key, 0 when the key held another value or
-- none. The fence counter stays: the next grant's token is above the
-- revoked holder's.
local value = redis.call('GET', KEYS[1])
if value and redis.sha1hex(value) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
