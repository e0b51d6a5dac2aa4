-- Extend a reader-writer lock's grant where it still holds our value.
-- Packed by `scripts::extend` (src/protocol/scripts.rs) for an rw target.
-- KEYS[1] writer key, KEYS[2] readers; ARGV[1] lock value, ARGV[2] ttl in ms
-- Returns 1 when ours (it now lives at least the ttl), 0 otherwise.
-- As in lua/extend.lua, an expiry only ever moves later (GT), so a late
-- extension never cuts a lease short, and nothing is created: a reader
-- whose entry expired stays expired.
local value, ttl = ARGV[1], tonumber(ARGV[2])
if redis.call('GET', KEYS[1]) == value then
  redis.call('PEXPIRE', KEYS[1], ttl, 'GT')
  return 1
end
local score = redis.call('ZSCORE', KEYS[2], value)
if not score then
  return 0
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if tonumber(score) <= ms then
  return 0
end
redis.call('ZADD', KEYS[2], 'GT', ms + ttl, value)
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
