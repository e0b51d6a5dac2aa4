-- Change a semaphore's permit count where no permit is held.
-- Packed by `scripts::semaphore_recount` (src/protocol/scripts.rs).
-- KEYS[1] the permits record, then the lock key of each slot, slot 0
-- first, as many as the larger of the old and new counts the caller knows;
-- ARGV[1] the new count, ARGV[2] how long the record lives in ms.
-- Returns {1} when the record now holds the new count; {0, recorded} when
-- the record holds a count with more slots than KEYS lists (nothing
-- written: the caller asks again with them); {2, slot} when that slot is
-- held here (nothing written).
--
-- A record changes only where no slot of either count is held, so a
-- permit granted under the old count still rests on a quorum of old
-- records (`lua/permit_acquire.lua`). A recount that lands late or twice
-- checks the slots as it finds them then. `tests/model_semaphore.rs`
-- (Recount) checks the rule; ignoring the slots breaks it.
local recorded = redis.call('GET', KEYS[1])
if recorded and (tonumber(recorded) or 0) > #KEYS - 1 then
  return {0, recorded}
end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {2, i - 2}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1}
