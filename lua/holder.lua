-- Who holds a lock, read-only: nothing is written, so a request that lands
-- late, twice or never changes nothing.
-- KEYS[1] lock key
-- Returns {0} when the key is free, {1, pttl, identity} when held
-- (identity '' for a value without one). The random part of the value, the
-- holder's secret, never leaves the instance.
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
return {1, pttl, string.match(value, '^[^:]*:(.*)$') or ''}
