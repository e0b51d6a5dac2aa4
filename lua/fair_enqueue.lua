-- A fair lock's waiter joins the queue with its ticket (or leaves it).
-- Packed by `scripts::fair_enqueue` (src/protocol/scripts.rs).
-- KEYS the queue, the liveness records, the ticket counter (see
-- `lua/fair_gate.lua`).
-- ARGV[1] the call id, ARGV[2] its ticket ('0': leave the queue),
-- ARGV[3] the heartbeat TTL in ms, ARGV[4] the counter's idle expiry in ms.
-- Returns 1.
--
-- Joining: the counter becomes at least the ticket, so a caller whose
-- ticket round starts after a quorum acknowledged this join takes a larger
-- ticket (the quorums overlap). The entry is added only if missing (a
-- resend, or a rejoin where a grant short of a quorum removed it, keeps the
-- ticket), and the heartbeat made current. A join that lands late, after
-- the caller was granted or left, adds an entry that expires within one
-- heartbeat TTL. Leaving: the entry and its record go.
-- `tests/model_fair.rs` checks these rules.
local queue, alive, tickets = KEYS[1], KEYS[2], KEYS[3]
local call, ticket, beat = ARGV[1], ARGV[2], tonumber(ARGV[3])
if ticket == '0' then
  redis.call('ZREM', queue, call)
  redis.call('ZREM', alive, call)
  return 1
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local current = tonumber(redis.call('GET', tickets)) or 0
if current < tonumber(ticket) then
  redis.call('SET', tickets, ticket, 'PX', ARGV[4])
end
redis.call('ZADD', queue, 'NX', ticket, call)
redis.call('ZADD', alive, ms + beat, call)
for _, key in ipairs({queue, alive}) do
  if redis.call('PTTL', key) < beat then
    redis.call('PEXPIRE', key, beat)
  end
end
return 1
