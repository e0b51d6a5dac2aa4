-- Acquire one lock, or a set of locks all or none, and give each resource
-- its fencing token.
-- Packed by `scripts::acquire` (src/protocol/scripts.rs).
-- KEYS the lock key and fence counter key of each member, in pairs, then
-- the attempt's void key (written by release.lua when this attempt's
-- clean-up arrives before this request)
-- ARGV[1] lock value, ARGV[2] ttl in ms, ARGV[3] counter idle expiry in ms,
-- ARGV[4] the client's proposal for new tokens, in microseconds
-- Returns {1, token...} when granted; {0} when refused, or {0, identity}
-- when refused because a member is held: the holder's identity, the part of
-- its value after the first ':' (the random part before it, the holder's
-- secret, never leaves the instance). A refusal writes nothing.
--
-- This request may run late: after the client gave up on it, after later
-- requests, after the instance lost or rolled back its data, or twice (a
-- resend whose first reply was lost). So nothing the client computed
-- before sending may create or lower a counter: every token comes from
-- this instance's clock at the moment the script runs, or from the counter
-- itself. The proposal only lets the instances' tokens agree (it is used
-- if it lies within EPS ahead of this clock, 5 ms) so the client can skip the
-- raise round; a wrong or stale proposal costs a raise round, never safety.
-- `tests/model_fencing.rs` checks this script's rules.
--
-- Everything is checked before anything is written: a script that fails
-- half-way keeps what it wrote.
-- Must match PROPOSAL_WINDOW_MICROS in src/protocol/scripts.rs.
local EPS = 5000
local n = #KEYS - 1
if redis.call('EXISTS', KEYS[#KEYS]) == 1 then
  return {0}
end
local function counter(key)
  -- GET fails with WRONGTYPE on a key of another type, before any write.
  local current = redis.call('GET', key)
  if current and not string.match(current, '^%d+$') then
    return nil, redis.error_reply('WRONGTYPE redfence: fence key ' .. key .. ' is not a counter')
  end
  return current
end
local function token_from(current, resent)
  local now = redis.call('TIME')
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local base = math.min(math.max(tonumber(ARGV[4]) or 0, clock), clock + EPS)
  if current and resent then
    return tonumber(current)
  elseif current then
    -- Never below the clock: a counter that came back older (a snapshot, a
    -- promoted replica) cannot repeat a token handed out since.
    return math.max(tonumber(current) + 1, base)
  end
  return base
end
-- Tokens stay below 2^53, so Lua's doubles hold them exactly, and '%.0f'
-- prints every digit.
local function store(key, token)
  redis.call('SET', key, string.format('%.0f', token), 'PX', ARGV[3])
end

if n == 2 then
  -- One resource, the hot path: SET NX GET checks and takes the lock in
  -- one call (WRONGTYPE on a foreign key, before any write).
  local current, err = counter(KEYS[2])
  if err then
    return err
  end
  local holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if holder and holder ~= ARGV[1] then
    local identity = string.match(holder, '^[^:]*:(.*)$')
    if identity then
      return {0, identity}
    end
    return {0}
  end
  -- A holder equal to our value: this request ran before and its reply
  -- was lost; granted again as it stands, the counter not bumped twice.
  local token = token_from(current, holder == ARGV[1])
  store(KEYS[2], token)
  return {1, token}
end

local ours, held = 0, false
local holder = nil
local counters = {}
for i = 1, n, 2 do
  local lock_type = redis.call('TYPE', KEYS[i])['ok']
  if lock_type == 'string' then
    local value = redis.call('GET', KEYS[i])
    if value == ARGV[1] then
      ours = ours + 1
    else
      -- The first member held by someone else names the holder.
      holder = holder or value
      held = true
    end
  elseif lock_type ~= 'none' then
    return redis.error_reply('WRONGTYPE redfence: lock key ' .. KEYS[i] .. ' holds a ' .. lock_type)
  end
  local current, err = counter(KEYS[i + 1])
  if err then
    return err
  end
  counters[#counters + 1] = current or false
end
-- Every member ours: this request ran before, its reply was lost. Granted
-- again as it stands, counters not bumped twice.
local resent = ours == n / 2
if held then
  local identity = string.match(holder, '^[^:]*:(.*)$')
  if identity then
    return {0, identity}
  end
  return {0}
end
if ours > 0 and not resent then
  return {0}
end
local reply = {1}
for i = 1, n, 2 do
  local token = token_from(counters[(i + 1) / 2] or nil, resent)
  if not resent then
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
  store(KEYS[i + 1], token)
  reply[#reply + 1] = token
end
return reply
