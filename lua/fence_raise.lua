-- Raise a fencing counter to at least a token, and report whether the lock
-- still holds our value. Counters only ever go up.
-- Packed by `scripts::raise` (src/protocol/scripts.rs).
-- KEYS[1] lock key, KEYS[2] fence counter key, and for a reader-writer
-- lock KEYS[3] its readers (lua/rw_acquire.lua): a reader holds while its
-- entry there lives
-- ARGV[1] lock value, ARGV[2] token, ARGV[3] counter idle expiry in ms
-- Returns 1 when the counter is >= token and the lock is ours, 0 otherwise:
-- the lock is not ours, or the token lies more than MAX_AHEAD ahead of this
-- instance's clock and the counter is left below it.
--
-- MAX_AHEAD: a counter never adopts a token further ahead of this clock.
-- Tokens come from the granting instances' clocks; one whose clock runs
-- ahead answers tokens from the future. Adopted here, they would outlive
-- the clock error in this counter, and once the error is corrected and this
-- counter lost (a restart), the next grant would count from the right
-- clock, below them. So every counter stays within MAX_AHEAD of its own
-- clock, and a token handed out lies within MAX_AHEAD of the clock of every
-- instance of its quorum: a lost counter recreated more than MAX_AHEAD
-- after a grant counts above it (docs/protocol.md, tests/model_fencing.rs).
-- Must match MAX_AHEAD_MICROS in src/protocol/scripts.rs.
local MAX_AHEAD = 1000000
local current = redis.call('GET', KEYS[2])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE redfence: fence key ' .. KEYS[2] .. ' is not a counter')
end
local now = redis.call('TIME')
if not current then
  -- The counter was lost after the grant (or this raise arrives late):
  -- seed it from the instance clock in microseconds, never with the old
  -- token alone, or the next grant here could repeat that token. Built as a
  -- string: Lua would print a large number in exponent form.
  current = now[1] .. string.format('%06d', tonumber(now[2]))
  redis.call('SET', KEYS[2], current)
end
-- Tokens stay below 2^53, so tonumber compares them exactly.
local held = tonumber(current) >= tonumber(ARGV[2])
if not held then
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if tonumber(ARGV[2]) <= clock + MAX_AHEAD then
    redis.call('SET', KEYS[2], ARGV[2])
    held = true
  end
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if not held then
  return 0
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 1
end
if KEYS[3] then
  local expiry = redis.call('ZSCORE', KEYS[3], ARGV[1])
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  if expiry and tonumber(expiry) > ms then
    return 1
  end
end
return 0
