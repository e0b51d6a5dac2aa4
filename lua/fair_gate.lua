-- The queue's gate of a fair lock (`Redlock::fair_lock`), in front of
-- `lua/acquire.lua`: who may attempt the lock, never how it is granted.
-- Packed by `scripts::acquire` for a fair target (src/protocol/scripts.rs),
-- which sends it after `lua/acquire.lua` wrapped as the function `acquire`.
-- KEYS the lock's keys as `lua/acquire.lua` takes them (lock, counter, void
-- key), then the queue (a sorted set: a waiter's call id scored by its
-- ticket), the liveness records (a sorted set: call id scored by the
-- expiry of its last heartbeat, in ms of this instance's clock) and the
-- ticket counter.
-- ARGV the acquire's arguments, then the call id, the heartbeat TTL in ms,
-- and the mode: 't' (the ticket round: take a ticket, and take the lock
-- at once where nobody queues, the uncontended case's one round) or 'a'
-- (an attempt of a queued waiter, which is also its heartbeat).
-- Returns, 't': a grant as `lua/acquire.lua` returns it ({1, token}), or
-- {0, holder or false, ticket} refused, with a ticket.
-- 'a': {1, token} granted; {2, holder or false, ahead} refused, with the
-- number of live waiters ahead of the caller; {-1} the caller has no entry
-- here (its heartbeat expired, or this instance lost it): gone.
--
-- Every script first drops the entries whose heartbeat expired (the ticket
-- round only where the queue is not empty). A waiter is
-- granted only as the first live entry of the queue, and then by
-- `acquire()` itself, unchanged: a refusal here writes no lock key, so the
-- lock's exclusion and tokens hold as they do for a lock. Tickets come
-- from the instance clock (in microseconds) or the counter, whichever is
-- higher, so a counter lost with the instance's data comes back above
-- every ticket handed out before (as fencing tokens do); the client takes
-- the largest ticket of a quorum, which is above every ticket that a
-- quorum already holds (`lua/fair_enqueue.lua` raises the counters; the
-- ticket round only reads them). A request may land late or twice: a late
-- ticket round's grant is undone as any failed attempt's, a late attempt
-- refreshes a heartbeat for one TTL.
-- `tests/model_fair.rs` checks these rules.
local mode = table.remove(ARGV)
local beat = tonumber(table.remove(ARGV))
local call = table.remove(ARGV)
local tickets = table.remove(KEYS)
local alive = table.remove(KEYS)
local queue = table.remove(KEYS)
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
-- Dead waiters out (WRONGTYPE on a foreign key, before any write).
local function purge()
  local ms = now_ms()
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', ms)
  if #dead > 0 then
    redis.call('ZREM', queue, unpack(dead))
    redis.call('ZREMRANGEBYSCORE', alive, '-inf', ms)
  end
  return ms
end
local function keep(key)
  if redis.call('PTTL', key) < beat then
    redis.call('PEXPIRE', key, beat)
  end
end

if mode == 't' then
  -- Nobody queues (the uncontended case): the lock's own acquire, and
  -- nothing else is read or written.
  local waiting = redis.call('ZCARD', queue) > 0
  if waiting then
    purge()
    waiting = redis.call('ZCARD', queue) > 0
  end
  local reply = {0, false}
  if not waiting or redis.call('GET', KEYS[1]) == ARGV[1] then
    reply = acquire()
    -- `acquire()` answers errors (a key of another type) as they are.
    if reply['err'] or reply[1] == 1 then
      return reply
    end
    reply = {0, reply[2] or false}
  end
  -- Refused: the ticket, read only (the join raises the counters, which
  -- is what orders later callers after this one).
  local now = redis.call('TIME')
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local current = tonumber(redis.call('GET', tickets)) or 0
  -- A number below 2^53: RESP carries it as an integer, exactly.
  reply[3] = math.max(current + 1, clock)
  return reply
end

local ms = purge()
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- This attempt's acquire ran here before (a resend): as it stands.
  return acquire()
end
if not redis.call('ZSCORE', queue, call) then
  return {-1}
end
redis.call('ZADD', alive, ms + beat, call)
keep(alive)
keep(queue)
local ahead = redis.call('ZRANK', queue, call)
if ahead > 0 then
  return {2, false, ahead}
end
local reply = acquire()
if reply[1] == 1 then
  redis.call('ZREM', queue, call)
  redis.call('ZREM', alive, call)
  return reply
end
if reply['err'] then
  return reply
end
return {2, reply[2] or false, 0}
