-- ARGV: lease_key token checkpoint_key expected_prev resync_key guard_key nsets set ... ntables
--       table_id ..., then per shaped table: its `__derived` hash, count, suffix ...
-- The checks of an apply call sent in its plain form (service/sink/plain.py), run between its
-- WATCH and its MULTI: 'OK' when the apply script would write it as it is (this writer holds the
-- lease, the checkpoint chain holds, none of the tables is in resync, each set is a set or absent,
-- no shaped row it writes has derived entries recorded: the script would move those);
-- otherwise it increments guard_key, a watched key, so that the EXEC that follows writes nothing,
-- and says why (the caller sends the call again as the apply script, which replies the error).
local function refuse(why)
  redis.call('INCR', ARGV[6])
  return why
end
local err = fence(ARGV[1], ARGV[2])
if err then return refuse(err['err']) end
if (redis.call('HGET', ARGV[3], 'id') or '') ~= ARGV[4] then return refuse('CHECKPOINT_MOVED') end
local sets = 7 + tonumber(ARGV[7])
for k = 8, sets do
  local t = redis.call('TYPE', ARGV[k])['ok']
  if t ~= 'set' and t ~= 'none' then return refuse('WRONGTYPE ' .. ARGV[k]) end
end
local tables = sets + 1 + tonumber(ARGV[sets + 1])
for k = sets + 2, tables do
  if redis.call('HEXISTS', ARGV[5], ARGV[k]) == 1 then return refuse('RESYNC ' .. ARGV[k]) end
end
local k = tables + 1
while k <= #ARGV do
  local c = tonumber(ARGV[k + 1])
  for a = k + 2, k + 1 + c, 1000 do      -- (unpack's limit)
    for _, v in ipairs(redis.call('HMGET', ARGV[k], unpack(ARGV, a, math.min(a + 999, k + 1 + c)))) do
      if v then return refuse('DERIVED ' .. ARGV[k]) end
    end
  end
  k = k + 2 + c
end
return 'OK'
