-- Who holds a lock, read-only: nothing is written, so a request that lands
-- late, twice or never changes nothing.
-- Packed by `scripts::holder` (src/protocol/scripts.rs).
-- KEYS[1] lock key, KEYS[2] term key (see term.lua)
-- Returns {0} when the lock is free, {1, pttl, identity, term, tag} when
-- held (identity '' for a value without one; term '' unless a term was
-- recorded for this very value; tag the value's SHA1, so a reader counts
-- together only the instances that hold one value: one client's earlier
-- lock, left on an instance, shares its identity but not its tag). The
-- random part of the value, the holder's secret, never leaves the instance.
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
local tag = redis.sha1hex(value)
local term = ''
local record = redis.call('GET', KEYS[2])
if record then
  local hash, recorded = string.match(record, '^(%x+) (%d+)$')
  if hash == tag then
    term = recorded
  end
end
return {1, pttl, string.match(value, '^[^:]*:(.*)$') or '', term, tag}
