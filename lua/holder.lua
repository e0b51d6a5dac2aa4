-- Who holds a lock, read-only: nothing is written, so a request that lands
-- late, twice or never changes nothing.
-- KEYS[1] lock key, KEYS[2] fence counter key
-- Returns {0} when the lock is free, {1, pttl, identity, counter} when held
-- (identity '' for a value without one, counter '' when there is none).
-- The random part of the value, the holder's secret, never leaves the
-- instance.
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
local counter = redis.call('GET', KEYS[2]) or ''
return {1, pttl, string.match(value, '^[^:]*:(.*)$') or '', counter}
