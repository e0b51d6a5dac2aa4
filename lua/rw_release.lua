-- Release a reader-writer lock's grant where it still holds our value.
-- Packed by `scripts::release` and `scripts::release_and_announce`
-- (src/protocol/scripts.rs) for an rw target.
-- KEYS[1] writer key, KEYS[2] readers, KEYS[3] intent key, KEYS[4] the
-- attempt's void key; ARGV[1] lock value, ARGV[2] void key ttl in ms,
-- ARGV[3] '1' to void the attempt in any case, ARGV[4] the call's id
-- Returns 1 when the grant was ours here and is gone, 0 otherwise. Clears
-- the caller's wait (intent) too. As in lua/release.lua, the void key
-- makes this attempt's acquire refuse should it land after this.
local ours = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  ours = 1
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  ours = 1
end
if redis.call('GET', KEYS[3]) == ARGV[4] then
  redis.call('DEL', KEYS[3])
end
if ours == 0 or ARGV[3] == '1' then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[2])
end
return ours
