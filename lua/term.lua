-- Record an election's term next to its leader's lock, for observers.
-- Packed by `scripts::term_and_announce` (src/protocol/scripts.rs).
-- KEYS[1] lock key, KEYS[2] term key
-- ARGV[1] lock value, ARGV[2] term (the grant's fencing token),
-- ARGV[3] the term record's expiry in ms
-- Returns 1 when recorded, 0 when the lock no longer holds our value.
--
-- The record is `SHA1(value) term`: `lua/holder.lua` reports the term only
-- while the lock still holds the value it was recorded for, so a record
-- outlived by its leader is never shown for the next one. Written only
-- while the lock holds our value: landing late (after we lost the lock) or
-- twice, it changes nothing, or writes the same record again. The hash
-- does not reveal the value (the secret): a one-way hash of 128 random
-- bits.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], redis.sha1hex(ARGV[1]) .. ' ' .. ARGV[2], 'PX', ARGV[3])
return 1
