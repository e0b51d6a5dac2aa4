-- The acquire hot path's five calls with none of its logic: the floor of
-- any script that makes them.
redis.call('EXISTS', KEYS[3])
redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
redis.call('TIME')
redis.call('SET', KEYS[2], '123456789', 'PX', ARGV[3])
return {1, 2}
