-- Check a semaphore's permit count, and list its free slots.
-- Packed by `scripts::semaphore_slots` (src/protocol/scripts.rs).
-- KEYS[1] the semaphore's permits record, then the lock key of each slot,
-- slot 0 first; ARGV[1] the caller's permit count, ARGV[2] how long the
-- record lives in ms (the counter idle time, at least the keys' life).
-- Returns {1, slot...} with the slots whose lock is free here, or
-- {0, recorded} when the record holds another count (nothing written).
--
-- The call records the count, or renews it, for the idle time. The list
-- of free slots only guides the caller's choice, and a mismatch is how it
-- learns why it is refused: each slot is then taken with
-- `lua/permit_acquire.lua`, which checks the count itself. A request that
-- lands late or twice writes the count its caller asked for where none is
-- recorded, or nothing. (`tests/model_semaphore.rs`: a listing round that
-- ignores mismatches breaks nothing.)
local recorded = redis.call('GET', KEYS[1])
if recorded and recorded ~= ARGV[1] then
  return {0, recorded}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local free = {1}
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    free[#free + 1] = i - 2
  end
end
return free
