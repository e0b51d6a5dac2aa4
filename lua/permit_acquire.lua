-- Take one slot of a semaphore, checking its permit count, in one round.
-- Packed by `scripts::permit_acquire` (src/protocol/scripts.rs), which
-- sends it after `lua/acquire.lua` wrapped as the function `acquire`.
-- KEYS the slot's keys as `lua/acquire.lua` takes them (lock, counter,
-- void key), then the semaphore's permits record; ARGV the acquire's
-- arguments, then the caller's permit count, then how long the record
-- lives in ms (the counter idle time, at least the keys' life).
-- Returns what `lua/acquire.lua` returns; {0}, writing nothing, when the
-- record holds another count. A grant leaves the record holding the
-- caller's count, living at least as long as the lock.
--
-- A grant rests on a quorum of instances whose record holds the caller's
-- count, and two quorums share an instance: two callers of different
-- counts cannot both hold a permit, as long as a record changes only
-- where no slot is held (its expiry outlives every grant it was renewed
-- by; `lua/semaphore_recount.lua` looks at every slot). A request that
-- lands late or twice checks the record as it finds it then.
-- `tests/model_semaphore.rs` (Acquire) checks these rules.
local record_ttl = table.remove(ARGV)
local count = table.remove(ARGV)
local record = table.remove(KEYS)
local recorded = redis.call('GET', record)
if recorded and recorded ~= count then
  return {0}
end
local reply = acquire()
-- A grant's lock lives ARGV[2] ms: the record must live at least as long.
-- Renewed when missing or past half its life, so that most grants write
-- nothing more than the lock (the record is a key every grant shares).
if reply[1] == 1 then
  local left = recorded and redis.call('PTTL', record) or -2
  if left < tonumber(ARGV[2]) or left < tonumber(record_ttl) / 2 then
    redis.call('SET', record, count, 'PX', record_ttl)
  end
end
return reply
