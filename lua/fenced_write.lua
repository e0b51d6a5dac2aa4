-- Downstream fencing check for a Redis-backed store: write a value only if
-- the writer's fencing token is not older than the newest one seen.
-- Packed by `fenced_set` (src/fenced.rs).
-- KEYS[1] highest-token key, KEYS[2] data key, KEYS[3] the highest token
-- that read as a reader (`lua/fenced_shared_read.lua`)
-- ARGV[1] token, ARGV[2] value
-- Returns 1 when written, 0 when refused as stale (the caller's lease ran
-- out and a newer holder has read with fenced_read.lua, a newer reader
-- with fenced_shared_read.lua, or a newer holder written since).
local highest = redis.call('GET', KEYS[1])
if highest and tonumber(highest) > tonumber(ARGV[1]) then
  return 0
end
local read = redis.call('GET', KEYS[3])
if read and tonumber(read) > tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1
