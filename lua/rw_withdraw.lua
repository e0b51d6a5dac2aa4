-- A writer's call that ends without a grant (cancelled, out of time, an
-- error) takes back its wait: deletes the intent key only while it holds
-- this call's id, so new readers are not kept out for up to a TTL after the
-- writer left.
-- Packed by `scripts::rw_withdraw` (src/protocol/scripts.rs).
-- KEYS[1] the intent key; ARGV[1] the call's id
-- Returns 1 when it deleted the mark, 0 otherwise.
--
-- Liveness only: the intent refuses reads and nothing else, and
-- `tests/model_rwlock.rs` lets it vanish at any moment (`ExpireIntent`),
-- which covers this request landing late, twice, or never. Landing after a
-- later call of the same writer marked its own wait, it finds another id
-- and leaves it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
