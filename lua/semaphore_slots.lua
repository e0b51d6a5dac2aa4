-- Check a semaphore's permit count, and list its free slots.
-- Packed by `scripts::semaphore_slots` (src/protocol/scripts.rs).
-- KEYS[1] the semaphore's permits record, then the lock key of each slot,
-- slot 0 first; ARGV[1] the caller's permit count.
-- Returns {1, slot...} with the slots whose lock is free here, or
-- {0, recorded} when the record holds another count (nothing written).
--
-- The first call records the count, without expiry, so two callers that
-- name one semaphore with different counts cannot both use it: each needs
-- a quorum of instances that answered 1, and two quorums share an
-- instance, whose record took only one count. A request that lands late or
-- twice writes the count its caller asked for, or nothing: the record
-- never changes once written. (An instance that loses its data forgets
-- the record; `tests/model_semaphore.rs`.)
-- The list of free slots only guides the caller's choice: each slot is
-- then taken with `lua/acquire.lua`, as a lock.
local recorded = redis.call('GET', KEYS[1])
if recorded and recorded ~= ARGV[1] then
  return {0, recorded}
end
if not recorded then
  redis.call('SET', KEYS[1], ARGV[1])
end
local free = {1}
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    free[#free + 1] = i - 2
  end
end
return free
