-- KEYS[1]: the lease key; ARGV: token. Gives the lease up only if this writer still holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
