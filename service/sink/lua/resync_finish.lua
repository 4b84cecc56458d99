-- ARGV: lease_key token resync_key table_id touched stale index base generation limit settle_key
--       copied_at
-- Removes up to `limit` stale rows (not written by the stream); once `__stale` is empty and no row
-- waits in `__partial` (RESYNC_REREAD), ends the resync and, if copied_at is not '', opens the
-- table's settle window (`__settle`: until the stream passes copied_at, see
-- service/sink/marks.py). Returns {rows removed, stale rows left, rows to read again} (0 and 0:
-- the resync is over), or -1 (nothing done) when the generation is not current.
local err = fence(ARGV[1], ARGV[2])
if err then return err end
if generation(ARGV[3], ARGV[4]) ~= tonumber(ARGV[9]) then return -1 end
local touched, stale, index, base = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local partial = partial_of(touched)
local removed = 0
for _, m in ipairs(redis.call('SPOP', stale, tonumber(ARGV[10]))) do
  if not stream_wrote(touched, partial, m) then
    redis.call('DEL', base .. ':' .. m)
    underive(base .. ':' .. DERIVED_SUFFIX, m)  -- a shaped table's entries go too (derive.lua)
    redis.call('SREM', index, m)
    removed = removed + 1
  end
end
doc_flush()
local left, again = redis.call('SCARD', stale), redis.call('HLEN', partial)
if left == 0 and again == 0 then
  redis.call('UNLINK', touched)
  redis.call('HDEL', ARGV[3], ARGV[4])
  if ARGV[12] ~= '' then redis.call('HSET', ARGV[11], ARGV[4], ARGV[12]) end
end
return {removed, left, again}
