-- Shared by apply, resync_rows, resync_finish and resync_reread (prepended to each: one script
-- per call, so every call is atomic and checks the writer lease first).
local function fence(lease_key, token)
  if token == '' then return nil end
  if string.byte(token, 1) == 35 then   -- '#n' (Redis Cluster): a fencing number, not the lease
    -- The lease lives in another slot: a writer's number (drawn when it took the lease) must be
    -- no older than the last one that wrote this slot group, which then refuses older writers.
    local n, seen = tonumber(string.sub(token, 2)), tonumber(redis.call('GET', lease_key) or '0')
    if seen > n then
      return redis.error_reply('LEASE_LOST a newer writer (fencing number ' .. seen .. ') wrote here')
    end
    if seen < n then redis.call('SET', lease_key, n) end
    return nil
  end
  local holder = redis.call('GET', lease_key)
  if holder == token then return nil end
  if not holder then  -- expired, or Redis lost its keys: nobody else holds it
    return redis.error_reply('LEASE_LOST the writer lease is gone (expired, or Redis lost its keys)')
  end
  return redis.error_reply('LEASE_LOST the writer lease is held by another instance')
end
local function members(doc)
  -- A flat JSON object as written by orjson (compact) -> ordered raw keys, raw key -> raw value.
  -- Values are never decoded: cjson would turn 18446744073709551615 or 0.1000000000000001 into
  -- doubles printed with 14 digits, and [] into {}.
  local keys, vals = {}, {}
  local i, n = 2, #doc
  while i <= n do
    local c = string.byte(doc, i)
    if c == 125 then break end                      -- }
    if c == 44 then i = i + 1 end                   -- ,
    local ks = i
    i = i + 1
    while true do                                   -- the key string
      c = string.byte(doc, i)
      if c == 92 then i = i + 2 elseif c == 34 then break else i = i + 1 end
    end
    local key = string.sub(doc, ks, i)
    i = i + 2                                       -- closing quote and ':'
    local vs, depth, instr = i, 0, false
    while i <= n do                                 -- the value, up to a top-level , or }
      c = string.byte(doc, i)
      if instr then
        if c == 92 then i = i + 1 elseif c == 34 then instr = false end
      elseif c == 34 then instr = true
      elseif c == 123 or c == 91 then depth = depth + 1
      elseif c == 125 or c == 93 then
        if depth == 0 then break end
        depth = depth - 1
      elseif c == 44 and depth == 0 then break
      end
      i = i + 1
    end
    if vals[key] == nil then keys[#keys + 1] = key end
    vals[key] = string.sub(doc, vs, i - 1)
  end
  return keys, vals
end
local function merge_json(cur, patch)
  -- `patch`'s members over `cur`'s, keeping cur's order; values copied as raw JSON text
  local keys, vals = {}, {}
  if cur then keys, vals = members(cur) end
  local pkeys, pvals = members(patch)
  for _, k in ipairs(pkeys) do
    if vals[k] == nil then keys[#keys + 1] = k end
    vals[k] = pvals[k]
  end
  local parts = {}
  for j, k in ipairs(keys) do parts[j] = k .. ':' .. vals[k] end
  return '{' .. table.concat(parts, ',') .. '}'
end
local function partial_of(touched)     -- "{table}:__touched" -> "{table}:__partial"
  return string.sub(touched, 1, -1 - #TOUCHED_SUFFIX) .. PARTIAL_SUFFIX
end
local function mark_value(generation, reason)  -- a `__resync` value (keys.resync_mark)
  return generation .. ' ' .. reason
end
local function reason_of(v)             -- "{generation} {reason}" or "- {reason}" -> reason
  local fenced = MARK_FENCED .. ' '
  if string.sub(v, 1, #fenced) == fenced then return string.sub(v, #fenced + 1) end
  return string.match(v, '^%d+ (.*)$') or v
end
local function stream_wrote(touched, partial, suffix)
  -- whether the stream wrote the row since the resync's mark (whole, or merged: read again)
  return redis.call('SISMEMBER', touched, suffix) == 1 or redis.call('HEXISTS', partial, suffix) == 1
end
local function generation(resync, tid)
  -- the generation of tid's resync in flight, or nil when none is (marks are "gen reason")
  local v = redis.call('HGET', resync, tid)
  if not v then return nil end
  if string.sub(v, 1, #MARK_FENCED + 1) == MARK_FENCED .. ' ' then return -1 end  -- fenced (op RB)
  return tonumber(string.match(v, '^(%d+) ')) or 0
end
local function batched(cmd, key, first, last, src)
  -- cmd key src[first..last] (default ARGV), in slices small enough for unpack()
  src = src or ARGV
  local step = 1000
  local i = first
  while i <= last do
    local j = math.min(i + step - 1, last)
    redis.call(cmd, key, unpack(src, i, j))
    i = j + 1
  end
end
local function write_copy(base, index, suffix, json, at, c)
  -- a row read from the source, as its c field-value pairs from ARGV[at] (json: '' document)
  local key = base .. ':' .. suffix
  if json then
    redis.call('SET', key, ARGV[at + 1])
  else
    redis.call('DEL', key)
    if c > 0 then batched('HSET', key, at, at - 1 + 2 * c) end
  end
  redis.call('SADD', index, suffix)
end
