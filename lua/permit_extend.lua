-- Extend a semaphore's permit, and keep its count record alive as long.
-- Packed by `scripts::extend` (src/protocol/scripts.rs) for a permit,
-- which sends it after `lua/extend.lua` wrapped as the function `extend`.
-- KEYS the slot's lock key, then the semaphore's permits record; ARGV
-- `lua/extend.lua`'s arguments, then how long the record lives in ms (the
-- counter idle time, at least the extension's TTL).
-- Returns what `lua/extend.lua` returns.
--
-- A record changes only where no slot is held (`lua/permit_acquire.lua`):
-- its expiry must outlive every slot lock it was counted for, and an
-- extension moves the lock's expiry later, so it moves the record's too
-- (GT: never earlier, whenever it lands). Only where the lock still holds
-- the caller's value; a missing record stays missing.
-- `tests/model_semaphore.rs` (Recount: a record vanishes only where no slot
-- is held) states the rule this keeps.
local record_ttl = table.remove(ARGV)
local record = table.remove(KEYS)
local reply = extend()
if reply == 1 then
  redis.call('PEXPIRE', record, record_ttl, 'GT')
end
return reply
