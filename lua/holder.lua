-- Who holds a lock, read-only: nothing is written, so a request that lands
-- late, twice or never changes nothing.
-- KEYS[1] lock key, KEYS[2] term key (see term.lua)
-- Returns {0} when the lock is free, {1, pttl, identity, term} when held
-- (identity '' for a value without one; term '' unless a term was recorded
-- for this very value). The random part of the value, the holder's secret,
-- never leaves the instance.
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
local term = ''
local record = redis.call('GET', KEYS[2])
if record then
  local hash, recorded = string.match(record, '^(%x+) (%d+)$')
  if hash == redis.sha1hex(value) then
    term = recorded
  end
end
return {1, pttl, string.match(value, '^[^:]*:(.*)$') or '', term}
