-- Acquire a reader-writer lock for reading or for writing, and give the
-- grant its fencing token.
-- Packed by `scripts::acquire` (src/protocol/scripts.rs) for an rw target.
-- KEYS[1] the writer key (a string: the writer's value, with the lease's
-- TTL), KEYS[2] the readers (a sorted set: each reader's value, scored
-- with its expiry in ms of this instance's clock), KEYS[3] the intent key
-- (a waiting writer's value: new readers wait behind it), KEYS[4] the fence
-- counter, shared by reads and writes, KEYS[5] the attempt's void key
-- ARGV[1] lock value, ARGV[2] ttl in ms, ARGV[3] counter idle expiry in ms,
-- ARGV[4] the client's proposal for new tokens, in microseconds, ARGV[5]
-- 'r' to read, 'w' to write, ARGV[6] the call's id (one for all of a
-- writer's attempts), ARGV[7] how long a refused writer's wait is
-- recorded, in ms ('0': not at all)
-- Returns {1, token} when granted; {0} or {0, identity} when refused (the
-- identity of the writer or of a reader holding it).
--
-- The rules of `lua/acquire.lua` hold here (a late or repeated request is
-- safe; every token comes from this instance's clock or counter), and:
-- a reader is granted only while no other writer holds it and no writer
-- waits; a writer only while no other writer holds it and no live reader
-- does. A writer refused by readers records its call's wait in the intent
-- key for the rest of its wait (liveness only: it keeps new readers from
-- starving it; its grant, its release or that expiry clears it). Every grant, read or write, bumps the one counter, so a
-- writer's token exceeds every token granted before it.
-- `tests/model_rwlock.rs` checks these rules.
-- Must match PROPOSAL_WINDOW_MICROS in src/protocol/scripts.rs.
local EPS = 5000
local value, ttl = ARGV[1], tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {0}
end
local current = redis.call('GET', KEYS[4])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE redfence: fence key ' .. KEYS[4] .. ' is not a counter')
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local function refused(holder)
  local identity = holder and string.match(holder, '^[^:]*:(.*)$')
  if identity then
    return {0, identity}
  end
  return {0}
end
-- Expired readers first (WRONGTYPE on a foreign key, before any write).
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms)
local writer = redis.call('GET', KEYS[1])
if writer and writer ~= value then
  return refused(writer)
end
local resent
if ARGV[5] == 'r' then
  resent = redis.call('ZSCORE', KEYS[2], value) ~= false
  if not resent then
    if redis.call('EXISTS', KEYS[3]) == 1 then
      return {0}
    end
    redis.call('ZADD', KEYS[2], ms + ttl, value)
    if redis.call('PTTL', KEYS[2]) < ttl then
      redis.call('PEXPIRE', KEYS[2], ttl)
    end
  end
else
  resent = writer == value
  if not resent then
    local reader = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if reader then
      local waiting = redis.call('GET', KEYS[3])
      if ARGV[7] ~= '0' and (not waiting or waiting == ARGV[6]) then
        redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7])
      end
      return refused(reader)
    end
    redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
    if redis.call('GET', KEYS[3]) == ARGV[6] then
      redis.call('DEL', KEYS[3])
    end
  end
end
-- The token, as in lua/acquire.lua: this request ran before (its reply
-- was lost) keeps the counter as it stands; otherwise one above it, never
-- below the clock, and the proposal where it lies within EPS ahead.
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
local base = math.min(math.max(tonumber(ARGV[4]) or 0, clock), clock + EPS)
local token = base
if current and resent then
  token = tonumber(current)
elseif current then
  token = math.max(tonumber(current) + 1, base)
end
redis.call('SET', KEYS[4], string.format('%.0f', token), 'PX', ARGV[3])
return {1, token}
