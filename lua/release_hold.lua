-- Release locks that must stay held a while longer (LockOptions::
-- hold_at_least): instead of deleting each key that still holds our value,
-- set its expiry to the rest of the hold. Keys that are not ours are left
-- alone.
-- Packed by `scripts::release_hold` (src/protocol/scripts.rs).
-- KEYS lock keys (one, or the members of a set), then the attempt's void
-- key; ARGV[1] lock value, ARGV[2] void key ttl in ms, ARGV[3] the rest of
-- the hold in ms
-- Returns 1 when every key was ours (each now expires after the hold), 0
-- otherwise.
--
-- This is our own release, so it may lengthen or shorten the expiry of OUR
-- key only: compare-and-set of the expiry, never creating a key. Landing
-- late or twice, it sets the expiry from the time it runs (our key lives a
-- little longer than asked, nobody else's is touched); landing after the
-- key expired or was taken, it finds no value of ours and changes nothing
-- but the void key, exactly as `release.lua` does.
local all = 1
for i = 1, #KEYS - 1 do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[3])
  else
    all = 0
  end
end
if all == 0 then
  redis.call('SET', KEYS[#KEYS], '1', 'PX', ARGV[2])
end
return all
