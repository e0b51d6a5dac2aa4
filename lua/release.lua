-- Release locks only where they still hold our value (compare-and-delete).
-- KEYS lock keys (one, or the members of a set); ARGV[1] lock value
-- Returns 1 when every key was ours and is deleted, 0 otherwise (keys that
-- were ours are deleted all the same; the others are left alone).
-- (A holder's release announces itself with a native PUBLISH after this.)
local all = 1
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
  else
    all = 0
  end
end
return all
