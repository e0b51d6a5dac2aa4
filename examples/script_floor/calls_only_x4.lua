-- The five calls for four resources in one script call: what batching
-- acquisitions would save per acquisition.
for j = 0, 3 do
local k = j * 3
redis.call('EXISTS', KEYS[k+3])
redis.call('GET', KEYS[k+2])
redis.call('SET', KEYS[k+1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
redis.call('TIME')
redis.call('SET', KEYS[k+2], '123456789', 'PX', ARGV[3])
end
return {1, 2}
