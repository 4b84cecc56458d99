-- Documents (service/documents.py; docs/mirror.md, "Documents"): a root row and its children, any
-- depth, kept as one key from the rows the mirror stored, in the same call as the rows.
-- A table's spec names its roles ("d": the JSON text of [[tree, node index], ...]); derive()
-- calls doc_follow after each row op of such a table, underive() (a row gone) calls it with the
-- roles the table's `{table}:__docrec` hash kept (field `__nodes`). Per row, `__docrec` holds
-- what each role placed (cjson: node id -> {"k", document key} for a root, {"p", parent suffix}
-- for a child); `{child table}:__dockids:{node id}:{parent suffix}` is the set of a parent's
-- children, `{child table}:__docheld:{node id}` the parents that have children but no row
-- (their children are held). A child node whose `on` names a unique key of its parent ("pl": the
-- text a parent row is named by) has its sets by that text, `{parent table}:__doclinks:{node id}`
-- maps the text to the parent row, and the parent's record keeps its texts (`{node id}>`). Changes are marked per row and applied once per call (doc_flush:
-- the scripts call it last): a json document is rendered whole, a hash one field by field.
local doc_roles_of = {}                  -- roles text -> decoded (once per call)
local doc_text_of = {}                   -- base -> its roles text, or false: in no document
local doc_saved = {}                     -- base -> the roles text its `__nodes` holds (this call)
local doc_marks = {}
local function doc_id(tree, i) return tree.name .. '.' .. i end
local function docrec_key(base) return base .. ':' .. DOCREC_SUFFIX end
local function kids_key(base, id, parent) return base .. ':' .. DOCKIDS_SUFFIX .. ':' .. id .. ':' .. parent end
local function held_key(base, id) return base .. ':' .. DOCHELD_SUFFIX .. ':' .. id end
local function links_key(base, id) return base .. ':' .. DOCLINKS_SUFFIX .. ':' .. id end
local function kid_link(kn, row, suffix)  -- the text node kn's rows name the parent row by
  if not kn.pl then return suffix end
  return row and render(kn.pl, row)
end
local function link_parent(tree, k, link)  -- the parent row's suffix that node k's link names
  local kn = tree.nodes[k + 1]
  if not kn.pl or not link then return link end
  return redis.call('HGET', links_key(tree.nodes[kn.up[1] + 1].base, doc_id(tree, k)), link) or nil
end
local function doc_record(base, suffix)  -- a row's record (nil: the row is not there)
  local raw = redis.call('HGET', docrec_key(base), suffix)
  return raw and cjson.decode(raw)
end
local function doc_roles(text)
  local r = doc_roles_of[text]
  if not r then r = cjson.decode(text); doc_roles_of[text] = r end
  return r
end
local function doc_row(nd, key)          -- field -> hash text and the JSON members; nil: absent
  if nd.j then
    local doc = redis.call('GET', key)
    if not doc then return nil end
    local _, vals = members(doc)
    return json_row(doc, nd.conv or {}), vals
  end
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local row = {}
  for j = 1, #flat, 2 do row[flat[j]] = flat[j + 1] end
  return row, nil
end
local JSON_ESC = {['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n',
  ['\r'] = '\\r', ['\t'] = '\\t'}
local function json_string(s)            -- orjson's form: these escapes, other controls \u00xx
  return '"' .. string.gsub(s, '[%z\1-\31"\\]', function(c)
    return JSON_ESC[c] or string.format('\\u%04x', string.byte(c))
  end) .. '"'
end
local function base64(s)
  local out = {}
  for k = 1, #s, 3 do
    local a, b, c = string.byte(s, k, k + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local d1, d2 = math.floor(n / 262144), math.floor(n / 4096) % 64
    local d3, d4 = math.floor(n / 64) % 64, n % 64
    out[#out + 1] = string.sub(B64, d1 + 1, d1 + 1) .. string.sub(B64, d2 + 1, d2 + 1)
      .. (b and string.sub(B64, d3 + 1, d3 + 1) or '=') .. (c and string.sub(B64, d4 + 1, d4 + 1) or '=')
  end
  return table.concat(out)
end
local function json_float(v)             -- Python's repr -> orjson's: 1e-05 is 0.00001, 1e-07 1e-7
  if v == 'inf' or v == '-inf' or v == 'nan' then return 'null' end
  local sign, digits, e = string.match(v, '^(-?)([%d.]+)e%-0(%d)$')
  if not e then return v end
  if e == '5' or e == '6' then
    return sign .. '0.' .. string.rep('0', tonumber(e) - 1) .. string.gsub(digits, '%.', '')
  end
  return sign .. digits .. 'e-' .. e
end
local function json_value(v, kind)       -- documents.json_kind: a hash text as canonical JSON
  if kind == 'n' then return v end
  if kind == 'f' then return json_float(v) end
  if kind == 'b' then return '"' .. base64(v) .. '"' end
  if kind == 't' and string.sub(v, 1, 4) ~= '0000' then
    return '"' .. string.gsub(v, ' ', 'T', 1) .. 'Z"'
  end
  return json_string(v)
end
local function int_less(a, b)           -- two integer texts, any length
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if #a ~= #b then return (#a < #b) ~= na end
  if a == b then return false end
  return (a < b) ~= na
end
local function pk_less(x, y)             -- children in the order of their keys
  for k = 1, #x.pk do
    local a, b = x.pk[k], y.pk[k]
    if a ~= b then
      if x.int[k] == 1 then return int_less(a, b) end
      return a < b
    end
  end
  return false
end
local render_node
local function kid_rows(tree, k, row, suffix)  -- node k's rows under the parent row
  local link = kid_link(tree.nodes[k + 1], row, suffix)
  if not link then return {} end
  return redis.call('SMEMBERS', kids_key(tree.nodes[k + 1].base, doc_id(tree, k), link))
end
local function render_kids(tree, nd, suffix, parts, row)
  for _, k in ipairs(nd.kids) do
    local kn = tree.nodes[k + 1]
    local items = {}
    for _, m in ipairs(kid_rows(tree, k, row, suffix)) do
      local text, pk = render_node(tree, k, m)
      if text then items[#items + 1] = {m = m, text = text, pk = pk, int = kn.int} end
    end
    table.sort(items, pk_less)
    local out = {}
    for j, it in ipairs(items) do out[j] = kn.a and it.text or (json_string(it.m) .. ':' .. it.text) end
    parts[#parts + 1] = json_string(kn.f) .. ':' .. (kn.a and '[' or '{') .. table.concat(out, ',') .. (kn.a and ']' or '}')
  end
end
render_node = function(tree, i, suffix)  -- a row with its children as JSON, and its key values
  local nd = tree.nodes[i + 1]
  if not nd.int then
    nd.int = {}
    for k, p in ipairs(nd.pk) do nd.int[k] = p[2] end
  end
  local row, vals = doc_row(nd, nd.base .. ':' .. suffix)
  if not row then return nil end
  local parts = {}
  for _, c in ipairs(nd.c) do
    local v
    if vals then v = vals[json_string(c[1])] else v = row[c[1]]; v = v and json_value(v, c[3]) end
    parts[#parts + 1] = json_string(c[2]) .. ':' .. (v or 'null')
  end
  render_kids(tree, nd, suffix, parts, row)
  local pk = {}
  for k, p in ipairs(nd.pk) do pk[k] = row[p[1]] or '' end
  return '{' .. table.concat(parts, ',') .. '}', pk
end
local function refused_key(tree) return tree.nodes[1].base .. ':' .. DOCREFUSED_SUFFIX .. ':' .. tree.name end
local function write_whole(tree, dkey, suffix)
  local root = tree.nodes[1]
  if tree.fmt == 'j' then
    local text = render_node(tree, 0, suffix)
    if not text then redis.call('DEL', dkey); return end
    if #text > tree.max then         -- refused, never truncated: counted and named (doc_refused)
      redis.call('DEL', dkey)
      redis.call('SADD', refused_key(tree), dkey)
      return
    end
    redis.call('SET', dkey, text)
    redis.call('SREM', refused_key(tree), dkey)
    return
  end
  redis.call('DEL', dkey)
  local row = doc_row(root, root.base .. ':' .. suffix)
  if not row then return end
  local flat = {}
  for _, c in ipairs(root.c) do
    local v = row[c[1]]
    if v then flat[#flat + 1] = c[2]; flat[#flat + 1] = v end
  end
  for _, k in ipairs(root.kids) do
    local kn = tree.nodes[k + 1]
    for _, m in ipairs(kid_rows(tree, k, row, suffix)) do
      local text = render_node(tree, k, m)
      if text then flat[#flat + 1] = kn.f .. ':' .. m; flat[#flat + 1] = text end
    end
  end
  if #flat > 0 then batched('HSET', dkey, 1, #flat, flat) end
end
local function write_root_fields(tree, dkey, suffix)  -- format hash: the root's own fields
  local root = tree.nodes[1]
  local row = doc_row(root, root.base .. ':' .. suffix)
  if not row then return end
  local set, gone = {}, {}
  for _, c in ipairs(root.c) do
    local v = row[c[1]]
    if v then set[#set + 1] = c[2]; set[#set + 1] = v else gone[#gone + 1] = c[2] end
  end
  if #set > 0 then batched('HSET', dkey, 1, #set, set) end
  if #gone > 0 then batched('HDEL', dkey, 1, #gone, gone) end
end
doc_follow = function(text, base, suffix, gone)
  -- the row `suffix` of table `base` changed (gone: it is no longer there): its places follow
  local rkey = docrec_key(base)
  if not gone and doc_saved[base] ~= text then
    if redis.call('HGET', rkey, '__nodes') ~= text then redis.call('HSET', rkey, '__nodes', text) end
    doc_saved[base] = text
    doc_text_of[base] = text
  end
  local raw = redis.call('HGET', rkey, suffix)
  local old = raw and cjson.decode(raw) or {}
  local roles = doc_roles(text)
  local row = nil
  if not gone then row = doc_row(roles[1][1].nodes[roles[1][2] + 1], base .. ':' .. suffix) end
  local new, live = {}, {}
  for _, role in ipairs(roles) do
    local tree, i = role[1], role[2]
    local nd, id = tree.nodes[i + 1], doc_id(tree, i)
    live[id] = true
    local was = old[id] and old[id][2]
    local now = nil
    if row then now = render(nd.up and nd.up[2] or nd.k, row) end
    if now then new[id] = {nd.up and 'p' or 'k', now} end
    if nd.up then                        -- a child: its parent's set of children
      local pbase = tree.nodes[nd.up[1] + 1].base
      if was ~= now then
        if was then
          local ks = kids_key(base, id, was)
          redis.call('SREM', ks, suffix)
          if redis.call('SCARD', ks) == 0 then redis.call('SREM', held_key(base, id), was) end
        end
        if now then
          redis.call('SADD', kids_key(base, id, now), suffix)
          local there
          if nd.pl then there = redis.call('HEXISTS', links_key(pbase, id), now)
          else there = redis.call('EXISTS', pbase .. ':' .. now) end
          if there == 0 then redis.call('SADD', held_key(base, id), now) end
        end
      end
      if was then doc_marks[#doc_marks + 1] = {tree, nd.up[1], was, i, suffix} end
      if now and now ~= was then doc_marks[#doc_marks + 1] = {tree, nd.up[1], now, i, suffix} end
    end
    -- the texts its children name it by: the row came or went, or a unique key changed; the
    -- children of a text no row has are held
    local lid, oldl, newl, relinked = id .. '>', old[id .. '>'] and old[id .. '>'][2] or {}, {}, false
    live[lid] = true
    for _, k in ipairs(nd.kids) do
      local kn, kid = tree.nodes[k + 1], doc_id(tree, k)
      local ol, nl = raw and suffix or nil, row and suffix or nil
      if kn.pl then ol, nl = oldl[tostring(k)], kid_link(kn, row, suffix) or nil end
      if kn.pl and nl then newl[tostring(k)] = nl end
      if ol ~= nl then
        relinked = true
        if ol then
          if kn.pl and redis.call('HGET', links_key(base, kid), ol) == suffix then
            redis.call('HDEL', links_key(base, kid), ol)
          end
          if redis.call('SCARD', kids_key(kn.base, kid, ol)) > 0 then redis.call('SADD', held_key(kn.base, kid), ol) end
        end
        if nl then
          if kn.pl then redis.call('HSET', links_key(base, kid), nl, suffix) end
          redis.call('SREM', held_key(kn.base, kid), nl)
        end
      end
    end
    if next(newl) then new[lid] = {'l', newl} end
    if not nd.up then doc_marks[#doc_marks + 1] = {tree, nil, suffix, was, now, relinked} end
  end
  for id, v in pairs(old) do             -- a role of a former shape: what it placed goes
    if not live[id] and v[1] ~= 'l' then
      if v[1] == 'k' then redis.call('DEL', v[2])
      else
        local ks = kids_key(base, id, v[2])
        redis.call('SREM', ks, suffix)
        if redis.call('SCARD', ks) == 0 then redis.call('SREM', held_key(base, id), v[2]) end
      end
    end
  end
  if row then
    local enc = next(new) and cjson.encode(new) or '{}'
    if enc ~= raw then redis.call('HSET', rkey, suffix, enc) end
  elseif raw then
    redis.call('HDEL', rkey, suffix)
  end
end
doc_gone = function(base, suffix)    -- underive: a row of a table in documents is gone
  local text = doc_text_of[base]
  if text == nil then
    text = redis.call('HGET', docrec_key(base), '__nodes') or false
    doc_text_of[base] = text
  end
  if text then doc_follow(text, base, suffix, true) end
end
doc_flush = function()               -- the marked documents follow their rows, once each
  if #doc_marks == 0 then return end
  local gone, whole, roots, fields = {}, {}, {}, {}
  for _, m in ipairs(doc_marks) do
    local tree = m[1]
    if m[2] == nil then                  -- a root row: {tree, nil, suffix, old key, new key}
      local suffix, was, now = m[3], m[4], m[5]
      if was and was ~= now then gone[was] = true end
      if now and (was ~= now or tree.fmt == 'j' or m[6]) then whole[now] = {tree, suffix}
      elseif now then roots[now] = {tree, suffix} end
    else                                 -- below (node, link), through its child (kid, ksuffix)
      local idx, link, kid, ks = m[2], m[3], m[4], m[5]
      local s = link_parent(tree, kid, link)
      while idx and s and tree.nodes[idx + 1].up do
        local nd = tree.nodes[idx + 1]
        local rec = doc_record(nd.base, s)
        local up = rec and rec[doc_id(tree, idx)]
        kid, ks = idx, s
        if up then idx, link = nd.up[1], up[2]; s = link_parent(tree, kid, link) else idx = nil end
      end
      local rec = idx and s and doc_record(tree.nodes[1].base, s)
      local dkey = rec and rec[doc_id(tree, 0)] and rec[doc_id(tree, 0)][2]
      if dkey then
        if tree.fmt == 'j' then whole[dkey] = {tree, s}
        else
          fields[dkey] = fields[dkey] or {}
          fields[dkey][tree.nodes[kid + 1].f .. ':' .. ks] = {tree, kid, ks, link}
        end
      end
    end
  end
  doc_marks = {}
  for k in pairs(gone) do if not whole[k] then redis.call('DEL', k) end end
  for k, w in pairs(whole) do write_whole(w[1], k, w[2]) end
  for k, r in pairs(roots) do if not whole[k] then write_root_fields(r[1], k, r[2]) end end
  for k, fs in pairs(fields) do
    if not whole[k] then
      for f, w in pairs(fs) do
        local tree, kid, ks, root = w[1], w[2], w[3], w[4]
        local rec = doc_record(tree.nodes[kid + 1].base, ks)
        local up = rec and rec[doc_id(tree, kid)]
        local text = up and up[2] == root and render_node(tree, kid, ks)
        if text then redis.call('HSET', k, f, text) else redis.call('HDEL', k, f) end
      end
    end
  end
end
