-- ARGV: lease_key token resync_key table_id generation touched_key stale_key index_key base
--       json(0|1) derive_spec ('': none, derive.lua), then per row: suffix count f v ... (json
--       mode: suffix 1 '' document).
-- Returns the rows written, or -1 (nothing written) when the table's resync is no longer that
-- generation: a TRUNCATE, DROP, RENAME or newer ALTER was applied since the rows were read.
local err = fence(ARGV[1], ARGV[2])
if err then return err end
if generation(ARGV[3], ARGV[4]) ~= tonumber(ARGV[5]) then return -1 end
local touched, stale, index, base, json = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10] == '1'
local partial, spec, derived = partial_of(touched), derive_spec(ARGV[11]), base .. ':' .. DERIVED_SUFFIX
local i, n, written = 12, #ARGV, 0
while i <= n do
  local suffix, c = ARGV[i], tonumber(ARGV[i + 1])
  if not stream_wrote(touched, partial, suffix) then
    write_copy(base, index, suffix, json, i + 2, c)
    if spec and derive(spec, base .. ':' .. suffix, derived, suffix) then redis.call('SREM', index, suffix) end
    written = written + 1
  end
  redis.call('SREM', stale, suffix)
  i = i + 2 + 2 * c
end
doc_flush()
return written
