-- Release locks only where they still hold our value (compare-and-delete).
-- Packed by `scripts::release` and `scripts::release_and_announce` (src/protocol/scripts.rs).
-- KEYS lock keys (one, or the members of a set), then the attempt's void
-- key; ARGV[1] lock value, ARGV[2] void key ttl in ms, ARGV[3] '1' to void
-- the attempt in any case (see below)
-- Returns 1 when every key was ours and is deleted, 0 otherwise (keys that
-- were ours are deleted all the same; the others are left alone).
-- (A holder's release announces itself with a native PUBLISH after this.)
--
-- Where a key was not ours, this attempt's acquire may still be on its way
-- (held up in the network, or in the socket buffer of a paused server): the
-- void key makes it refuse when it lands, instead of leaving a lock nobody
-- owns for a whole TTL.
local all = 1
for i = 1, #KEYS - 1 do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
  else
    all = 0
  end
end
-- ARGV[3] '1': a failed attempt's clean-up voids its acquire even where it
-- deleted our key: a second copy of the acquire (a resend after a reset)
-- may still be on its way.
if all == 0 or ARGV[3] == '1' then
  redis.call('SET', KEYS[#KEYS], '1', 'PX', ARGV[2])
end
return all
