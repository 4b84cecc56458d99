-- ARGV: base index limit. The rows of a ttl table whose expiry passed (Redis removed them, or
-- will on this read) leave the table's `__keys` and take their derived entries with them
-- (derive.lua's underive); `{table}:__expiry` holds each row's expiry (ms). A row written again
-- since (a later expiry, or none) only has its entry corrected. Replies {swept, looked at}.
-- Not fenced: it changes nothing a row that is there needs, so any instance may run it.
local base, index, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local derived, expiry = base .. ':' .. DERIVED_SUFFIX, base .. ':' .. EXPIRY_SUFFIX
local due = redis.call('ZRANGEBYSCORE', expiry, '-inf', now_ms(), 'LIMIT', 0, limit)
local swept = 0
for _, suffix in ipairs(due) do
  local ttl = redis.call('PTTL', base .. ':' .. suffix)
  if ttl == -2 then                      -- gone
    underive(derived, suffix)
    redis.call('SREM', index, suffix)
    swept = swept + 1
  elseif ttl == -1 then
    redis.call('ZREM', expiry, suffix)
  else
    redis.call('ZADD', expiry, now_ms() + ttl, suffix)
  end
end
doc_flush()
return {swept, #due}
