-- Derived entries of shaped tables (service/sink/derive.py is the Python twin, byte for byte):
-- a row's copy at its key template, and its unique, set and zset index entries, kept from the
-- row stored at its own key. `{table}:__derived` holds, per row suffix, the member its entries
-- hold (the row's key) and the entries (`len:text` runs: derive.encode_entries), so an entry is
-- moved or removed from what the mirror stored, never from the image alone. `{table}:__derivedcounts`
-- counts each index's entries ("{tag}:{index}": derive.counts_field), changed with them.
local derive_specs = {}                  -- spec text -> decoded spec (once per call)
local doc_follow, doc_gone, doc_flush     -- documents (document.lua, after this file)
local function derive_spec(text)
  if text == nil or text == '' then return nil end
  local s = derive_specs[text]
  if not s then
    s = cjson.decode(text); s.tag = string.sub(redis.sha1hex(text), 1, 12)  -- derive.spec_tag
    derive_specs[text] = s
  end
  return s
end
local B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local b64_index = nil
local function unbase64(s)
  if not b64_index then
    b64_index = {}
    for k = 1, 64 do b64_index[string.byte(B64, k)] = k - 1 end
  end
  local out, bits, nbits = {}, 0, 0
  for k = 1, #s do
    local v = b64_index[string.byte(s, k)]
    if v then                            -- ('=' padding adds nothing)
      bits, nbits = bits * 64 + v, nbits + 6
      if nbits >= 8 then
        nbits = nbits - 8
        local byte = math.floor(bits / 2 ^ nbits)
        out[#out + 1] = string.char(byte)
        bits = bits - byte * 2 ^ nbits
      end
    end
  end
  return table.concat(out)
end
local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40) end
  if cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 0x1000), 0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
  end
  return string.char(0xF0 + math.floor(cp / 0x40000), 0x80 + math.floor(cp / 0x1000) % 0x40,
    0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end
local JSON_ESCAPES = {['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t'}
local function unquote(raw)              -- a JSON string literal -> its text
  local s = string.sub(raw, 2, -2)
  if not string.find(s, '\\', 1, true) then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local j = string.find(s, '\\', i, true)
    if not j then out[#out + 1] = string.sub(s, i); break end
    out[#out + 1] = string.sub(s, i, j - 1)
    local c = string.sub(s, j + 1, j + 1)
    if c == 'u' then
      local cp = tonumber(string.sub(s, j + 2, j + 5), 16)
      i = j + 6
      if cp >= 0xD800 and cp < 0xDC00 and string.sub(s, i, i + 1) == '\\u' then  -- a surrogate pair
        cp = 0x10000 + (cp - 0xD800) * 0x400 + (tonumber(string.sub(s, i + 2, i + 5), 16) - 0xDC00)
        i = i + 6
      end
      out[#out + 1] = utf8_char(cp)
    else
      out[#out + 1] = JSON_ESCAPES[c] or c
      i = j + 2
    end
  end
  return table.concat(out)
end
local function json_row(doc, conv)       -- derive.py's json_fields: field -> hash text
  local keys, vals = members(doc)
  local row = {}
  for _, k in ipairs(keys) do
    local v, name = vals[k], unquote(k)
    local c = string.byte(v, 1)
    if c == 34 then                      -- a string
      v = unquote(v)
      local kind = conv[name]
      if kind == 'b' then v = unbase64(v)
      elseif kind == 't' then v = string.gsub(string.gsub(v, 'T', ' ', 1), 'Z$', '') end
      row[name] = v
    elseif c == 45 or (c >= 48 and c <= 57) then  -- a number: its literal text
      row[name] = v
    end                                  -- null (no field), nested values (not derived from)
  end
  return row
end
local function key_part(v, binary)       -- keys.escape(values.key_text(v)) of a stored value
  if binary then
    v = '0x' .. (string.gsub(v, '.', function(c) return string.format('%02x', string.byte(c)) end))
  end
  v = string.gsub(string.gsub(v, '\\', '\\\\'), ':', '\\:')
  if string.sub(v, 1, 2) == '__' then v = '\\' .. v end
  return v
end
local function render(parts, row)        -- nil when a placeholder's field is NULL (not stored)
  local out = {}
  for k, p in ipairs(parts) do
    local tag, text = string.sub(p, 1, 1), string.sub(p, 2)
    if tag == '=' then
      out[k] = text
    else
      local v = row[text]
      if v == nil then return nil end
      out[k] = key_part(v, tag == '#')
    end
  end
  return table.concat(out)
end
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end
local function score_of(v, temporal)     -- '%.17g' text, or nil: no entry
  if not temporal then
    if not string.find(v, '^[-+0-9.eE]+$') then return nil end  -- (derive.py's _NUMBER)
    local x = tonumber(v)
    if x == nil then return nil end
    return string.format('%.17g', x)
  end
  local y, m, d = tonumber(string.sub(v, 1, 4)), tonumber(string.sub(v, 6, 7)), tonumber(string.sub(v, 9, 10))
  if not (y and m and d) or y == 0 or m == 0 or d == 0 then return nil end
  local secs, frac = 0, 0
  if #v > 10 then
    secs = tonumber(string.sub(v, 12, 13)) * 3600 + tonumber(string.sub(v, 15, 16)) * 60 + tonumber(string.sub(v, 18, 19))
    if #v > 20 then frac = tonumber('0.' .. string.sub(v, 21)) end
  end
  return string.format('%.17g', days_from_civil(y, m, d) * 86400 + secs + frac)
end
local function lv(text) return #text .. ':' .. text end
local function decode_entries(raw)       -- tag, member, {{kind, key, score, index}, ...}
  local at, out = 1, {}
  local function take()
    local colon = string.find(raw, ':', at, true)
    local last = colon + tonumber(string.sub(raw, at, colon - 1))
    local text = string.sub(raw, colon + 1, last)
    at = last + 1
    return text
  end
  local tag = take()
  local member = take()
  while at <= #raw do
    local kind = string.sub(raw, at, at)
    at = at + 1
    local index = kind == 'k' and '0' or take()
    local key = take()
    out[#out + 1] = {kind, key, kind == 'z' and take() or '', index}
  end
  return tag, member, out
end
local function recount(derived, deltas, is_counts)  -- field -> change of its count; a count at 0
  local counts = is_counts and derived or nil                         -- goes (is_counts: the counts key)
  for f, d in pairs(deltas) do
    if d ~= 0 then
      counts = counts or string.sub(derived, 1, #derived - #DERIVED_SUFFIX) .. DERIVED_COUNTS_SUFFIX
      if redis.call('HINCRBY', counts, f, d) == 0 then redis.call('HDEL', counts, f) end
    end
  end
end
local later = {}                         -- counts key -> field -> change: op UM's, written by derive_flush
local function derive_flush()            -- once per apply call: one HINCRBY per count, not per row
  for counts, deltas in pairs(later) do recount(counts, deltas, true) end
  later = {}
end
local function count_entries(deltas, tag, entries, by)
  for _, e in ipairs(entries) do
    local f = tag .. ':' .. e[4]
    deltas[f] = (deltas[f] or 0) + by
  end
end
local function drop_entry(e, member)
  local kind, key = e[1], e[2]
  if kind == 'k' then redis.call('DEL', key)
  elseif kind == 'u' then
    if redis.call('GET', key) == member then redis.call('DEL', key) end  -- another row's by now
  elseif kind == 's' then redis.call('SREM', key, member)
  else redis.call('ZREM', key, member) end
end
local derive_now = nil                   -- the server's clock, read once per call (ms)
local function now_ms()
  if not derive_now then
    local t = redis.call('TIME')
    derive_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return derive_now
end
local function expires_ms(t, row)        -- derive.py's Ttl.expires_ms; nil: no expiry
  if t[1] > 0 then return now_ms() + t[1] * 1000 end
  local v = row[t[2]]
  local score = v and score_of(v, t[3] == 't')
  if not score then return nil end
  return math.floor(tonumber(score) * 1000) - t[4] * 1000
end
local function set_expiry(key, ms)
  if ms then redis.call('PEXPIREAT', key, string.format('%.0f', ms)) else redis.call('PERSIST', key) end
end
local function expiry_of(derived)        -- `{table}:__expiry`: suffix -> expiry (ms), for the sweep
  return string.sub(derived, 1, #derived - #DERIVED_SUFFIX) .. EXPIRY_SUFFIX
end
local function underive(derived, suffix)
  -- the row `suffix` is gone (or moves away): its entries go, and its places in documents
  doc_gone(string.sub(derived, 1, #derived - #DERIVED_SUFFIX - 1), suffix)
  redis.call('ZREM', expiry_of(derived), suffix)
  local raw = redis.call('HGET', derived, suffix)
  if not raw then return end
  local tag, member, entries = decode_entries(raw)
  for _, e in ipairs(entries) do drop_entry(e, member) end
  redis.call('HDEL', derived, suffix)
  local deltas = {}
  count_entries(deltas, tag, entries, -1)
  recount(derived, deltas)
end
local function copy_row(ikey, flat, n)  -- the copy at the template key becomes flat[1 .. n]
  if n <= 1000 then                      -- as apply.lua's write_row: one HSET when it holds these
    local added = redis.pcall('HSET', ikey, unpack(flat, 1, n))
    if type(added) == 'number' and redis.call('HLEN', ikey) == n / 2 then return end
  end
  redis.call('DEL', ikey)
  batched('HSET', ikey, 1, n, flat)
end
local function reads(spec)               -- the fields a spec's entries and expiry read (once)
  local f = spec.f
  if not f then
    f = {}
    local function add(parts)
      for _, p in ipairs(parts) do
        if string.sub(p, 1, 1) ~= '=' then f[string.sub(p, 2)] = true end
      end
    end
    add(spec.k)
    for _, ix in ipairs(spec.i) do
      add(ix[2])
      if ix[3] ~= '' then f[ix[3]] = true end
    end
    spec.f = f
  end
  return f
end
local function follow_copy(spec, derived, suffix, flat, m, nulls, first, last)
  -- A stored hash row took the changes flat[1 .. 2m] and lost fields ARGV[first .. last]: when
  -- none of them is a field its entries read (and the table has no ttl, which a write may
  -- renew), its entries stay and its copy takes the same changes. true: done; false: derive the
  -- row again (derive.py's twin does that: the same keys either way). Documents render every
  -- field: a row of theirs is derived again.
  if spec.t or spec.d then return false end
  local f = reads(spec)
  for j = 1, m do if f[flat[2 * j - 1]] then return false end end
  for k = first, last do if f[nulls[k]] then return false end end
  if #spec.k == 0 then return true end   -- no copy: the entries are all there is
  local raw = redis.call('HGET', derived, suffix)
  if not raw then return false end
  local tag, member = decode_entries(raw)
  if tag ~= spec.tag then return false end  -- written in a former shape: moved by derive
  if m > 0 then batched('HSET', member, 1, 2 * m, flat) end
  if last >= first then batched('HDEL', member, first, last, nulls) end
  return true
end
local function visible_fields(flat, n)   -- a row's field-value pairs less its hidden fields
  local out, m = {}, 0                   -- (a hidden field's name starts with NUL: derive.HIDDEN)
  for j = 1, n, 2 do
    if string.byte(flat[j], 1) ~= 0 then
      out[m + 1], out[m + 2] = flat[j], flat[j + 1]
      m = m + 2
    end
  end
  return out, m
end
local function visible_document(doc)     -- a json row less its hidden members ("\u0000…")
  local keys, vals = members(doc)
  local parts = {}
  for _, k in ipairs(keys) do
    if string.sub(k, 1, 7) ~= '"\\u0000' then parts[#parts + 1] = k .. ':' .. vals[k] end
  end
  return '{' .. table.concat(parts, ',') .. '}'
end
local function move_entries(spec, derived, suffix, flat, m, nulls, first, last, at)
  -- Op UM's moves, from ARGV[at]: member expected record nd (kind key)... na (kind key score)...
  -- nc (field delta)... (derive.py's entry_moves, from the update's images). The stored row took
  -- the changes flat[1 .. 2m] and lost fields nulls[first .. last]. Applied when the row's stored
  -- record is `expected` (what the planner saw): its entries and counts move, its copy takes the
  -- visible changes, as `derive` would leave them. Returns the index after the moves and whether
  -- they were applied (false: the caller derives the row again from what is stored).
  local member, expected, record = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local a = at + 4 + 2 * tonumber(ARGV[at + 3])
  local c = a + 1 + 3 * tonumber(ARGV[a])
  local after = c + 1 + 2 * tonumber(ARGV[c])
  if redis.call('HGET', derived, suffix) ~= expected then return after, false end
  for k = at + 4, a - 1, 2 do drop_entry({ARGV[k], ARGV[k + 1]}, member) end
  for k = a + 1, c - 1, 3 do
    local kind, ikey = ARGV[k], ARGV[k + 1]
    if kind == 'u' then redis.call('SET', ikey, member)
    elseif kind == 's' then redis.call('SADD', ikey, member)
    else redis.call('ZADD', ikey, ARGV[k + 2], member) end
  end
  if #spec.k > 0 then                    -- the copy: the changes less the hidden fields
    if not spec.h then                   -- (rows without hidden fields: the changes as they are)
      if m > 0 then batched('HSET', member, 1, 2 * m, flat) end
      if last >= first then batched('HDEL', member, first, last, nulls) end
    else
      local shown, n = visible_fields(flat, 2 * m)
      if n > 0 then batched('HSET', member, 1, n, shown) end
      local gone = {}
      for k = first, last do
        if string.byte(nulls[k], 1) ~= 0 then gone[#gone + 1] = nulls[k] end
      end
      if #gone > 0 then batched('HDEL', member, 1, #gone, gone) end
    end
  end
  redis.call('HSET', derived, suffix, record)
  -- the counts change at the end of the call (derive_flush): a count read only between calls
  local counts = string.sub(derived, 1, #derived - #DERIVED_SUFFIX) .. DERIVED_COUNTS_SUFFIX
  local deltas = later[counts]
  if not deltas then deltas = {}; later[counts] = deltas end
  for k = c + 1, after - 1, 2 do deltas[ARGV[k]] = (deltas[ARGV[k]] or 0) + tonumber(ARGV[k + 1]) end
  return after, true
end
local function derive(spec, key, derived, suffix, flat, n)
  -- the entries of the row stored at `key` (none when it is not there) replace those recorded;
  -- `flat` (n items): the row's field-value pairs when the caller just wrote them whole (nil:
  -- read back, after a merge or a move); json rows (spec.j): `flat` is the document. With a
  -- ttl the row (and its copy) get their expiry; a row whose expiry is already past leaves the
  -- mirror now: true, the caller drops it from `__keys`.
  if spec.d then                         -- its places in documents follow (document.lua)
    doc_follow(spec.d, string.sub(derived, 1, #derived - #DERIVED_SUFFIX - 1), suffix, false)
    if #spec.k == 0 and #spec.i == 0 and not spec.t then return end
  end
  local row = {}
  if spec.j then
    flat = flat or redis.call('GET', key)
    if not flat then return underive(derived, suffix) end
    row = json_row(flat, spec.j)
  else
    if not flat then flat = redis.call('HGETALL', key); n = #flat end
    if n == 0 then return underive(derived, suffix) end
    for j = 1, n, 2 do row[flat[j]] = flat[j + 1] end
  end
  local shown, shown_n = flat, n         -- what the copy holds: the row less hidden fields
  if spec.h then
    if spec.j then shown = visible_document(flat) else shown, shown_n = visible_fields(flat, n) end
  end
  local function copy(ikey)              -- the row's copy at its template key
    if spec.j then redis.call('SET', ikey, shown) else copy_row(ikey, shown, shown_n) end
  end
  local exp = nil
  if spec.t then
    exp = expires_ms(spec.t, row)
    if exp and exp <= now_ms() then
      redis.call('DEL', key)
      underive(derived, suffix)
      return true
    end
    set_expiry(key, exp)
    if exp then redis.call('ZADD', expiry_of(derived), exp, suffix)
    else redis.call('ZREM', expiry_of(derived), suffix) end
  end
  local member, new = key, {}
  if #spec.k > 0 then
    member = render(spec.k, row)
    -- a row without a template's column (a partial image merged into a row the mirror did not
    -- have: a resync reads it again) has no entries yet
    if not member then return underive(derived, suffix) end
    new[1] = {'k', member, '', '0'}
  end
  for number, ix in ipairs(spec.i) do
    local ikey = render(ix[2], row)
    if ikey then
      if ix[1] == 'z' then
        local v = row[ix[3]]
        local score = v and score_of(v, ix[4] == 't')
        if score then new[#new + 1] = {'z', ikey, score, tostring(number)} end
      else
        new[#new + 1] = {ix[1], ikey, '', tostring(number)}
      end
    end
  end
  local text = {lv(spec.tag), lv(member)}
  for _, e in ipairs(new) do
    text[#text + 1] = e[1] .. (e[1] ~= 'k' and lv(e[4]) or '') .. lv(e[2]) .. (e[1] == 'z' and lv(e[3]) or '')
  end
  text = table.concat(text)
  local raw = redis.call('HGET', derived, suffix)
  local held, deltas = {}, {}            -- entries recorded for this member, which stay; counts
  if raw == text then                    -- the same entries: only the copy follows the row
    if #spec.k > 0 then
      copy(member)
      if spec.t then set_expiry(member, exp) end
    end
    return
  elseif raw then                        -- entries no longer there (or held by another member) go
    local old_tag, old_member, old = decode_entries(raw)
    count_entries(deltas, old_tag, old, -1)
    for _, e in ipairs(old) do
      local id = e[1] .. e[2] .. ' ' .. e[3]
      held[id] = old_member == member
    end
    for _, e in ipairs(new) do held[e[1] .. e[2] .. ' ' .. e[3]] = held[e[1] .. e[2] .. ' ' .. e[3]] and 'keep' end
    for _, e in ipairs(old) do
      if held[e[1] .. e[2] .. ' ' .. e[3]] ~= 'keep' then drop_entry(e, old_member) end
    end
  end
  for _, e in ipairs(new) do
    local kind, ikey = e[1], e[2]
    if kind == 'k' then                  -- the row's copy: the stored row, whole
      copy(ikey)
      if spec.t then set_expiry(ikey, exp) end
    elseif held[kind .. ikey .. ' ' .. e[3]] ~= 'keep' then
      if kind == 'u' then redis.call('SET', ikey, member)
      elseif kind == 's' then redis.call('SADD', ikey, member)
      else redis.call('ZADD', ikey, e[3], member) end
    end
  end
  redis.call('HSET', derived, suffix, text)
  count_entries(deltas, spec.tag, new, 1)
  recount(derived, deltas)
end
