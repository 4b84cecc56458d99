-- ARGV: lease_key token resync_key table_id generation touched index base json(0|1) derive_spec
--       ('': none, derive.lua), then per row
--       of `__partial`: suffix merges found count f v ... (json mode: count 1, '' document;
--       found 0: the source no longer has the row, count 0).
-- A row a partial image changed during the resync, read again from the source after that: it is
-- written whole if no merge came since its `__partial` entry was read (the stream's newer change
-- would be lost), and leaves `__partial`; a row gone from the source is left to its DELETE, which
-- the stream applies later. Returns the rows done, or -1 (nothing done) when the generation is not
-- current.
local err = fence(ARGV[1], ARGV[2])
if err then return err end
if generation(ARGV[3], ARGV[4]) ~= tonumber(ARGV[5]) then return -1 end
local partial, index, base, json = partial_of(ARGV[6]), ARGV[7], ARGV[8], ARGV[9] == '1'
local spec, derived = derive_spec(ARGV[10]), base .. ':' .. DERIVED_SUFFIX
local i, n, done = 11, #ARGV, 0
while i <= n do
  local suffix, merges, found, c = ARGV[i], ARGV[i + 1], ARGV[i + 2] == '1', tonumber(ARGV[i + 3])
  if redis.call('HGET', partial, suffix) == merges then
    if found then
      write_copy(base, index, suffix, json, i + 4, c)
      if spec and derive(spec, base .. ':' .. suffix, derived, suffix) then redis.call('SREM', index, suffix) end
    end
    redis.call('HDEL', partial, suffix)
    done = done + 1
  end
  i = i + 4 + 2 * c
end
doc_flush()
return done
