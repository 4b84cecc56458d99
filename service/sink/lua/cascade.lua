-- Foreign-key cascades applied by the mirror (docs/mirror.md, "Foreign keys"; prepended to apply).
-- Self-contained: it reads and writes only the keys op F names and the sets of the row ops
-- FA/FR, never apply's locals. MariaDB and MySQL < 9.6 do not log the child rows that
-- ON DELETE/UPDATE CASCADE and SET NULL change; the planner sends, after a parent row's ops:
--   F resync json n, per constraint: id parent_tid child_tid child_base child_index child_touched
--     child_derive set_prefix on_delete on_update k child_field x k, parent_field x k  (once per
--     call; child_derive: the child's derived entries' spec, '' for none: derive.lua)
--   FD id old             the parent row that held referenced value `old` was deleted
--   FU id old mask v x k  its referenced columns became v ... (mask: '0' for a NULL)
-- A child row is found in the set `set_prefix .. hex(value)` (service/sink/fks.py) and checked against
-- its stored columns first (a stale member is dropped). Values are the layout's own text (hash
-- field, or raw JSON), `len:text` per column, so a stored row's columns compare as they are.
-- Cascades go on through the child rows they change (grandchildren...), up to InnoDB's depth of
-- 15; each row is changed at most once per cascade (a cycle of ON UPDATE CASCADE ends). A shaped
-- child's derived entries (its copy at the key template, its index entries) follow each row it
-- deletes or changes, in the same call (derive.lua).
local fk = {by_parent = {}, by_child = {}, list = {}, json = false, resync = '', seen = {}}

local function fk_graph(i)               -- op F at ARGV[i]; returns the index after it
  fk.resync, fk.json = ARGV[i + 1], ARGV[i + 2] == '1'
  fk.by_parent, fk.by_child, fk.list = {}, {}, {}
  local n = tonumber(ARGV[i + 3])
  i = i + 4
  for _ = 1, n do
    local k = tonumber(ARGV[i + 10])
    local c = {id = ARGV[i], ptid = ARGV[i + 1], ctid = ARGV[i + 2], base = ARGV[i + 3] .. ':',
               index = ARGV[i + 4], touched = ARGV[i + 5], dspec = derive_spec(ARGV[i + 6]),
               setp = ARGV[i + 7], on_delete = ARGV[i + 8], on_update = ARGV[i + 9], cf = {}, pf = {}}
    c.derived = c.base .. DERIVED_SUFFIX
    for j = 1, k do c.cf[j] = ARGV[i + 10 + j]; c.pf[j] = ARGV[i + 10 + k + j] end
    fk.list[c.id] = c
    fk.by_parent[c.ptid] = fk.by_parent[c.ptid] or {}
    table.insert(fk.by_parent[c.ptid], c)
    fk.by_child[c.ctid] = fk.by_child[c.ctid] or {}
    table.insert(fk.by_child[c.ctid], c)
    i = i + 11 + 2 * k
  end
  return i
end

local function fk_read(key, fields)      -- the stored row's values of fields (false: NULL); nil: no row
  if fk.json then
    local doc = redis.call('GET', key)
    if not doc then return nil end
    local _, vals = members(doc)
    local out = {}
    for j, f in ipairs(fields) do
      local v = vals[f]
      if v == nil or v == 'null' then v = false end
      out[j] = v
    end
    return out
  end
  if redis.call('EXISTS', key) == 0 then return nil end
  return redis.call('HMGET', key, unpack(fields))
end

local function fk_enc(vals)              -- `len:text` per value; nil when one is NULL
  if not vals then return nil end
  local parts = {}
  for j, v in ipairs(vals) do
    if not v then return nil end
    parts[j] = #v .. ':' .. v
  end
  return table.concat(parts)
end

local function fk_hex(s)                 -- a set's name holds its value as hex (fks.set_name)
  return (string.gsub(s, '.', function(ch) return string.format('%02x', string.byte(ch)) end))
end

local function fk_sets(tid, key)         -- the sets the row belongs in, by constraint (as child)
  local out = {}
  for _, c in ipairs(fk.by_child[tid] or {}) do
    local e = fk_enc(fk_read(key, c.cf))
    if e then out[c.id] = c.setp .. fk_hex(e) end
  end
  return out
end

local function fk_refs(tid, key)         -- the values the row is referenced by (as parent)
  local out = {}
  for _, c in ipairs(fk.by_parent[tid] or {}) do out[c.id] = fk_enc(fk_read(key, c.pf)) end
  return out
end

local fk_cascade
local function fk_touch(c, m)            -- a row of a table in resync: the copy must not undo it
  if redis.call('HEXISTS', fk.resync, c.ctid) == 1 then redis.call('SADD', c.touched, m) end
end

local function fk_delete_row(c, m, key, depth)
  local refs = fk_refs(c.ctid, key)
  for _, set in pairs(fk_sets(c.ctid, key)) do redis.call('SREM', set, m) end
  redis.call('DEL', key)
  if c.dspec then underive(c.derived, m) end
  redis.call('SREM', c.index, m)
  fk_touch(c, m)
  for _, c2 in ipairs(fk.by_parent[c.ctid] or {}) do fk_cascade(c2, refs[c2.id], nil, depth + 1) end
end

local function fk_set_row(c, m, key, new, depth)  -- the row's foreign key becomes new (nil: NULL)
  local refs, before = fk_refs(c.ctid, key), fk_sets(c.ctid, key)
  if fk.json then
    local parts = {}
    for j, f in ipairs(c.cf) do parts[j] = f .. ':' .. (new and new[j] or 'null') end
    redis.call('SET', key, merge_json(redis.call('GET', key), '{' .. table.concat(parts, ',') .. '}'))
  else
    for j, f in ipairs(c.cf) do
      local v = new and new[j]
      if v then redis.call('HSET', key, f, v) else redis.call('HDEL', key, f) end
    end
  end
  -- a shaped child's entries follow; a ttl whose instant is past removed the row (derive.lua):
  -- it leaves `__keys` and its sets, as in apply.lua, and its own children are left as they are
  local gone = c.dspec and derive(c.dspec, key, c.derived, m)
  if gone then redis.call('SREM', c.index, m) end
  local after = fk_sets(c.ctid, key)
  for id, set in pairs(before) do if after[id] ~= set then redis.call('SREM', set, m) end end
  for id, set in pairs(after) do if before[id] ~= set then redis.call('SADD', set, m) end end
  fk_touch(c, m)
  if gone then return end
  for _, c2 in ipairs(fk.by_parent[c.ctid] or {}) do
    fk_cascade(c2, refs[c2.id], fk_read(key, c2.pf), depth + 1)
  end
end

fk_cascade = function(c, old, new, depth)
  -- the parent value `old` of constraint c was deleted (new nil) or became `new` (value list)
  if not old or depth > 15 then return end
  local rule = new and c.on_update or c.on_delete
  if rule ~= 'CASCADE' and rule ~= 'SET NULL' then return end
  if new and fk_enc(new) == old then return end
  local set = c.setp .. fk_hex(old)
  for _, m in ipairs(redis.call('SMEMBERS', set)) do
    local key = c.base .. m
    if fk_enc(fk_read(key, c.cf)) ~= old then
      redis.call('SREM', set, m)         -- stale: the row is gone or references another value
    elseif not fk.seen[key] then
      fk.seen[key] = true
      if not new and rule == 'CASCADE' then fk_delete_row(c, m, key, depth)
      else fk_set_row(c, m, key, rule == 'CASCADE' and new or nil, depth) end
    end
  end
end

local function fk_op(op, i)              -- op FD or FU at ARGV[i]; returns the index after it
  local c = fk.list[ARGV[i + 1]]
  fk.seen = {}
  if op == 'FD' then
    fk_cascade(c, ARGV[i + 2], nil, 1)
    return i + 3
  end
  local mask, new = ARGV[i + 3], {}
  for j = 1, #mask do new[j] = string.byte(mask, j) == 49 and ARGV[i + 3 + j] end
  fk_cascade(c, ARGV[i + 2], new, 1)
  return i + 4 + #mask
end

-- Op FC json, before a unit of table work (CU, MU): the rows the unit removes (DROP, TRUNCATE) or
-- moves away (RENAME: the new name is copied again, which fills its own sets) first leave the sets
-- that the table's `__fkdefs` names (set_prefix -> its fields, `len:field` each).
local fk_clear, fk_clear_json = nil, nil
local function fk_clear_spec(i)          -- op FC at ARGV[i]; returns the index after it
  fk_clear_json = ARGV[i + 1] == '1'
  return i + 2
end
local function fk_clear_for(base)        -- a CU/MU unit on the table whose row keys start with base
  if fk_clear_json == nil then return end
  local spec = {json = fk_clear_json, list = {}}
  local defs = redis.call('HGETALL', base .. ':' .. FKDEFS_SUFFIX)
  for j = 1, #defs, 2 do
    local c, enc, at = {setp = defs[j], cf = {}}, defs[j + 1], 1
    while at <= #enc do
      local colon = string.find(enc, ':', at, true)
      local len = tonumber(string.sub(enc, at, colon - 1))
      c.cf[#c.cf + 1] = string.sub(enc, colon + 1, colon + len)
      at = colon + len + 1
    end
    spec.list[#spec.list + 1] = c
  end
  fk_clear = #spec.list > 0 and spec or nil
end
local function fk_clear_done() fk_clear, fk_clear_json = nil, nil end
local function fk_unlink(key, m)         -- a CU/MU unit is about to remove or move row `key`
  if not fk_clear then return end
  fk.json = fk_clear.json
  for _, c in ipairs(fk_clear.list) do
    local e = fk_enc(fk_read(key, c.cf))
    if e then redis.call('SREM', c.setp .. fk_hex(e), m) end
  end
end
