-- Who holds a reader-writer lock, read-only: nothing is written, so a
-- request that lands late, twice or never changes nothing.
-- Packed by `scripts::rw_holders` (src/protocol/scripts.rs).
-- KEYS[1] writer key, KEYS[2] readers
-- Returns a flat list, four items per holder: its kind ('w' or 'r'), its
-- time to live in ms, its identity (the part of its value after the first
-- ':', never the random part before it, the holder's secret) and its
-- value's SHA1 (which `lua/rw_force_release.lua` takes). Readers whose
-- entry expired on this instance's clock are left out.
local out = {}
local function push(kind, pttl, value)
  out[#out + 1] = kind
  out[#out + 1] = pttl
  out[#out + 1] = string.match(value, '^[^:]*:(.*)$') or ''
  out[#out + 1] = redis.sha1hex(value)
end
local writer = redis.call('GET', KEYS[1])
if writer then
  push('w', redis.call('PTTL', KEYS[1]), writer)
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local readers = redis.call('ZRANGE', KEYS[2], ms + 1, '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #readers, 2 do
  push('r', tonumber(readers[i + 1]) - ms, readers[i])
end
return out
