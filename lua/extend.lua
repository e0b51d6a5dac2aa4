-- Extend locks only if every one still holds our value (compare-and-pexpire).
-- Packed by `scripts::extend` (src/protocol/scripts.rs).
-- KEYS lock keys (one, or the members of a set); ARGV[1] lock value,
-- ARGV[2] new ttl in ms
-- Returns 1 when every key is ours (each now lives at least the new ttl),
-- 0 otherwise. Never creates or deletes a key, and touches none unless all
-- are ours: an expired lease stays expired, and a set that lost a member
-- here is not kept alive here.
--
-- GT: an expiry is only ever moved later. An extension can land late, after
-- a later one that asked for longer (its round had timed out); without GT
-- it would cut the lease short while the holder believes it longer.
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ARGV[2], 'GT')
end
return 1
