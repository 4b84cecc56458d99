-- KEYS[1]: the lease key, KEYS[2]: the fencing counter (`__fence`); ARGV: token ttl_ms.
-- Takes the lease if free, counting each new holder in `__fence` (the plain apply calls of the
-- writer before watch it: service/sink/plain.py); extends it if this writer holds it already.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('INCR', KEYS[2])
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
