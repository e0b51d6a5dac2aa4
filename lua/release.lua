-- Release a lock only if it still holds our value (compare-and-delete), and
-- tell waiters subscribed to the release channel.
-- KEYS[1] lock key; ARGV[1] lock value, ARGV[2] release channel
-- Returns 1 when deleted, 0 when the key is gone or belongs to someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
