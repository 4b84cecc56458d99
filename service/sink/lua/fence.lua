-- KEYS[1]: the lease key, KEYS[2]: the fencing counter (one slot: Redis Cluster); ARGV: token.
-- A new fencing number for the writer that holds the lease, 0 when it does not hold it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('INCR', KEYS[2])
end
return 0
