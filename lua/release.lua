-- Release a lock only if it still holds our value (compare-and-delete).
-- KEYS[1] lock key; ARGV[1] lock value
-- Returns 1 when deleted, 0 when the key is gone or belongs to someone else.
-- (A holder's release announces itself with a native PUBLISH after this.)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
