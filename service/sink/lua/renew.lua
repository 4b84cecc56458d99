-- KEYS[1]: the lease key; ARGV: token ttl_ms. Extends the lease only if this writer still holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
