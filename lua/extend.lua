-- Extend a lock only if it still holds our value (compare-and-pexpire).
-- KEYS[1] lock key; ARGV[1] lock value, ARGV[2] new ttl in ms
-- Returns 1 when extended, 0 otherwise. Never creates or deletes the key:
-- an expired lease stays expired.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
