-- ARGV: lease_key token checkpoint_key expected_prev progress_key txn_id chunk final seq_key nseq
--       resync_key done, then instructions from ARGV[13]. `done`: the row changes of a chunked
--       transaction already applied, as the caller read `__progress` (0 for its first chunk).
--
-- Op Q, first if present, lists the rows that UL (and UM) ops update by their changed columns
-- alone, and their tables: the call writes nothing (ROWS_MISSING) unless each row is there and no
-- table is being resynced (whose rows may not all be there, or lack a new column).
-- The ops are encoded by service/sink/codec.py from the apply IR (service/sink/ir.py).
-- Row ops (W WP U UL UM WJN P PJ E MV N) name a row by its suffix in the table set by the last C op
-- (which also names the table's derived entries' spec, '' for none: derive.lua); W
-- and U rows carry only values, their column names come once per call with the shape (op K); WP
-- rows carry field-value pairs (the plain form's, service/sink/plain.py: sent as the script when
-- that form did not apply). WJN is a run of whole JSON rows (one or more), written by one MSET
-- per 500 rows. Row ops' `__keys` and `__touched` members are collected and written by one SADD
-- (or SREM) per run of adds (or removes) of a set, before the next other op and at the end (same
-- call: still atomic).
-- Ops F, FD, FU, FA, FR and FC (foreign-key cascades and their sets) are documented in cascade.lua.
-- Whether a table is in resync (its rows go to `__touched`, or to `__partial` when a partial image
-- merged them: op P, PJ, N) is read once per table per call; the ops that change marks forget it.
local err = fence(ARGV[1], ARGV[2])
if err then return err end
local prev = redis.call('HGET', ARGV[3], 'id') or ''
if prev ~= ARGV[4] then
  return redis.error_reply('CHECKPOINT_MOVED expected ' .. ARGV[4] .. ' found ' .. prev)
end
local progress, txn, chunk, final = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8] == '1'
local done = tonumber(ARGV[12])
local first_chunk_seq, stale_progress = nil, false
if chunk > 0 then
  local p = redis.call('HMGET', progress, 'txn', 'rows', 'first')
  local at = 0
  if p[1] == txn then at, first_chunk_seq = tonumber(p[2]) or 0, tonumber(p[3]) end
  if at ~= done then
    return redis.error_reply('PROGRESS_MOVED ' .. txn .. ': expected ' .. done .. ' rows done, found ' .. at)
  end
  stale_progress = p[1] ~= txn          -- left by a transaction that never finished
end
local resync = ARGV[11]
local i, n = 13, #ARGV
local lean = {}                          -- table id -> ARGV index of its next UL op's row key
if ARGV[i] == 'Q' then                   -- Q count, then per table: table_id count key ...
  for _ = 1, tonumber(ARGV[i + 1]) do
    local t, c = ARGV[i + 2], tonumber(ARGV[i + 3])
    local named = #t .. ':' .. t         -- a table id may hold spaces: length-prefixed
    if redis.call('HEXISTS', resync, t) == 1 then
      return redis.error_reply('ROWS_MISSING resync ' .. named)
    end
    for k = i + 4, i + 3 + c do
      if redis.call('EXISTS', ARGV[k]) == 0 then
        return redis.error_reply('ROWS_MISSING row ' .. named .. ' ' .. ARGV[k])
      end
    end
    lean[t] = i + 4
    i = i + 2 + c
  end
  i = i + 2
end
if stale_progress then redis.call('DEL', progress) end
local nseq = tonumber(ARGV[10])
local seq = redis.call('INCRBY', ARGV[9], nseq) - nseq + 1
local first = first_chunk_seq or seq
local marks = {}                         -- table id -> in resync? (read once per table)
local pend, adding = {}, {}             -- set key -> members in op order; set key -> SADD (or SREM)
local function flush_set(set)
  local ms = pend[set]
  local cmd = adding[set] and 'SADD' or 'SREM'
  batched(cmd, set, 1, #ms, ms)
  pend[set] = nil
end
local function note(set, m, add)
  local ms = pend[set]
  if ms and adding[set] ~= add then flush_set(set); ms = nil end  -- keep SADD/SREM order
  if not ms then ms = {}; pend[set] = ms; adding[set] = add end
  ms[#ms + 1] = m
end
local function flush()
  for set in pairs(pend) do flush_set(set) end
end
local function mark(tid, reason, touched, stale)
  -- (re)start tid's resync: a new generation (resync calls of an older one are refused from now
  -- on), nothing touched yet. Its `__stale` was filled before (op CP), or is emptied (`stale`
  -- given: after a TRUNCATE, `__keys` is empty).
  local gen = redis.call('HINCRBY', resync, GENERATION_FIELD, 1)
  redis.call('HSET', resync, tid, mark_value(gen, reason))
  redis.call('UNLINK', touched, partial_of(touched))  -- big sets are freed off the main thread
  if stale then redis.call('UNLINK', stale) end
  marks = {}
end
local function unit_done(key, uid)
  -- whether unit uid of this transaction's table work is recorded as done in key; a record left
  -- by another transaction (which finished: the chain check passed) is dropped
  local p = redis.call('HMGET', key, 'txn', uid)
  if p[1] ~= txn then
    redis.call('DEL', key)
    redis.call('HSET', key, 'txn', txn)
    return false
  end
  return p[2] == 'done'
end
local base, index, touched, tid = '', '', '', ''  -- the table of the row ops (op C)
local dspec, derived = nil, ''           -- its derived entries' spec and hash (derive.lua)
local function rederive(suffix, flat, n)  -- after a row op: the row's derived entries follow it
  -- (flat: written whole); an expiry already past removed the row
  if dspec and derive(dspec, base .. suffix, derived, suffix, flat, n) then note(index, suffix, false) end
end
local function in_resync()
  local m = marks[tid]
  if m == nil then
    m = redis.call('HEXISTS', resync, tid) == 1
    marks[tid] = m
  end
  return m
end
local function row_written(suffix, add)
  note(index, suffix, add)
  if in_resync() then note(touched, suffix, true) end
end
local function row_merged(suffix)
  -- a partial image: the row's other columns may still have the shape from before the resync's
  -- DDL, so the resync reads it again at its end (`__partial`: suffix -> merges since)
  note(index, suffix, true)
  if in_resync() then redis.call('HINCRBY', partial_of(touched), suffix, 1) end
end
local function hset(key, first_arg, c)
  if c > 500 then batched('HSET', key, first_arg, first_arg - 1 + 2 * c)
  elseif c > 0 then redis.call('HSET', key, unpack(ARGV, first_arg, first_arg - 1 + 2 * c)) end
end
local shapes, pairs_ = {}, {}           -- shape id -> column names (op K); HSET arguments of a row
local function hset_pairs(key, m)        -- HSET key pairs_[1 .. 2m]
  if m > 500 then batched('HSET', key, 1, 2 * m, pairs_)
  elseif m > 0 then redis.call('HSET', key, unpack(pairs_, 1, 2 * m)) end
end
local function write_row(key, c)         -- the row becomes pairs_[1 .. 2c]
  -- Most rows are new or hold these fields: one HSET, kept when the hash then has exactly c
  -- fields. A key that held other fields too (a partial image merged into a row the mirror
  -- lacked, then the whole row without them) or another type (pcall) is cleared and written again.
  if c > 0 and c <= 500 then
    local added = redis.pcall('HSET', key, unpack(pairs_, 1, 2 * c))
    if type(added) == 'number' and redis.call('HLEN', key) == c then return end
  end
  redis.call('DEL', key)
  hset_pairs(key, c)
end
local left = nil                         -- the reply of a table work op: rows left, or the cursor
while i <= n do
  local op = ARGV[i]
  if op == 'WJN' then                -- replace JSON rows: count, then count suffix document pairs
    local rows, kv = tonumber(ARGV[i + 1]), {}
    for j = 1, rows do
      local s = ARGV[i + 2 * j]
      kv[2 * j - 1] = base .. s; kv[2 * j] = ARGV[i + 2 * j + 1]
      row_written(s, true)
    end
    for a = 1, 2 * rows, 1000 do          -- one MSET per 500 rows: a SET each, in one command
      redis.call('MSET', unpack(kv, a, math.min(a + 999, 2 * rows)))
    end
    if dspec then
      for j = 1, rows do rederive(ARGV[i + 2 * j], ARGV[i + 2 * j + 1]) end
    end
    i = i + 2 + 2 * rows
  elseif op == 'W' then                  -- replace a row: suffix shape v ... (the shape's columns)
    local names = shapes[ARGV[i + 2]]
    local c = #names
    for k = 1, c do
      pairs_[2 * k - 1] = names[k]; pairs_[2 * k] = ARGV[i + 2 + k]
    end
    write_row(base .. ARGV[i + 1], c)
    row_written(ARGV[i + 1], true)
    rederive(ARGV[i + 1], pairs_, 2 * c)
    i = i + 3 + c
  elseif op == 'WP' then                 -- replace a row: suffix count f v ... (plain.py's rows)
    local c = tonumber(ARGV[i + 2])
    for k = 1, 2 * c do pairs_[k] = ARGV[i + 2 + k] end
    write_row(base .. ARGV[i + 1], c)
    row_written(ARGV[i + 1], true)
    rederive(ARGV[i + 1], pairs_, 2 * c)
    i = i + 3 + 2 * c
  elseif op == 'U' then                  -- update a row: suffix shape mask x f ... v ... rest
    -- mask: '1' for each of the shape's columns whose value changed, the v that follow in
    -- order; f: the x columns that became NULL; rest: the unchanged values, `len:value` each.
    -- Only the changes are written when the row is there and its table is not waiting for a
    -- resync (whose new shape the stored row may lack; a stored row is in `__keys` already);
    -- otherwise the row is replaced by the whole image, rebuilt in column order.
    local key, names, mask, x = base .. ARGV[i + 1], shapes[ARGV[i + 2]], ARGV[i + 3], tonumber(ARGV[i + 4])
    local c, v0, m = #names, i + 5 + x, 0
    for k = 1, c do
      if string.byte(mask, k) == 49 then
        m = m + 1; pairs_[2 * m - 1] = names[k]; pairs_[2 * m] = ARGV[v0 + m - 1]
      end
    end
    if in_resync() or redis.call('EXISTS', key) == 0 then
      local rest, at, j = ARGV[v0 + m], 1, v0
      for k = 1, c do
        pairs_[2 * k - 1] = names[k]
        if string.byte(mask, k) == 49 then
          pairs_[2 * k] = ARGV[j]; j = j + 1
        else
          local colon = string.find(rest, ':', at, true)
          local last = colon + tonumber(string.sub(rest, at, colon - 1))
          pairs_[2 * k] = string.sub(rest, colon + 1, last); at = last + 1
        end
      end
      write_row(key, c)
      row_written(ARGV[i + 1], true)
      rederive(ARGV[i + 1])
    else
      hset_pairs(key, m)
      if x > 0 then batched('HDEL', key, i + 5, i + 4 + x) end
      -- (a change of no field the entries read: only the copy follows, derive.lua)
      if dspec and not follow_copy(dspec, derived, ARGV[i + 1], pairs_, m, ARGV, i + 5, i + 4 + x) then
        rederive(ARGV[i + 1])
      end
    end
    i = v0 + m + 1
  elseif op == 'UL' or op == 'UM' then   -- update a row op Q found: shape x f ... v ... [moves]
    -- the shape: the columns whose value changed; f: the x columns that became NULL; op UM: then
    -- the moves of a shaped row's entries (derive.lua's move_entries)
    local names, x, at = shapes[ARGV[i + 1]], tonumber(ARGV[i + 2]), lean[tid]
    local key, c, v0 = ARGV[at], #names, i + 3 + x
    lean[tid] = at + 1
    for k = 1, c do
      pairs_[2 * k - 1] = names[k]; pairs_[2 * k] = ARGV[v0 + k - 1]
    end
    hset_pairs(key, c)
    if x > 0 then batched('HDEL', key, i + 3, i + 2 + x) end
    i = v0 + c
    if op == 'UM' then                   -- its entries move as the planner saw them, or it is
      local suffix, moved = string.sub(key, #base + 1), false  -- derived again (derive.lua)
      i, moved = move_entries(dspec, derived, suffix, pairs_, c, ARGV, v0 - x, v0 - 1, i)
      if not moved then rederive(suffix) end
    elseif dspec then                    -- a shaped row's entries stay: its copy takes the same
      local suffix = string.sub(key, #base + 1)  -- changes (or it is derived again: derive.lua)
      if not follow_copy(dspec, derived, suffix, pairs_, c, ARGV, v0 - x, v0 - 1) then rederive(suffix) end
    end
  elseif op == 'K' then                  -- a shape: the non-NULL columns of W/U rows: id count f ...
    local c, names = tonumber(ARGV[i + 2]), {}
    for k = 1, c do names[k] = ARGV[i + 2 + k] end
    shapes[ARGV[i + 1]] = names
    i = i + 3 + c
  elseif op == 'S' then                  -- advance the sequence without a stream entry
    seq = seq + 1; i = i + 1
  elseif op == 'XA' then                 -- XADD stream maxlen count f v ... (+ seq)
    local c = tonumber(ARGV[i + 3])
    local args = {ARGV[i + 1], 'MAXLEN', '~', ARGV[i + 2], '*', 'seq', tostring(seq)}
    for k = i + 4, i + 3 + 2 * c do args[#args + 1] = ARGV[k] end
    redis.call('XADD', unpack(args))
    seq = seq + 1
    i = i + 4 + 2 * c
  elseif op == 'E' then                  -- delete a row: suffix
    redis.call('DEL', base .. ARGV[i + 1])
    row_written(ARGV[i + 1], false)
    rederive(ARGV[i + 1])
    i = i + 2
  elseif op == 'P' then                  -- merge a partial image: suffix count f v ... count f ...
    local key, c = base .. ARGV[i + 1], tonumber(ARGV[i + 2])
    local j = i + 3 + 2 * c
    local x = tonumber(ARGV[j])
    -- a row of a ttl table that expired stays expired: never half a row (a FULL image writes it
    -- whole again: op U)
    local existed = dspec and redis.call('EXISTS', key) == 1
    if not (dspec and dspec.t) or existed then
      hset(key, i + 3, c)
      if x > 0 then batched('HDEL', key, j + 1, j + x) end
      row_merged(ARGV[i + 1])
    end
    if dspec then                        -- (as op U: a merge into a row the mirror had)
      local quick = false
      if existed then
        for k = 1, 2 * c do pairs_[k] = ARGV[i + 2 + k] end
        quick = follow_copy(dspec, derived, ARGV[i + 1], pairs_, c, ARGV, j + 1, j + x)
      end
      if not quick then rederive(ARGV[i + 1]) end
    end
    i = j + 1 + x
  elseif op == 'PJ' then                 -- merge a JSON patch into a JSON row: suffix patch
    local key = base .. ARGV[i + 1]
    local cur = redis.call('GET', key)
    -- (a row of a ttl table that expired stays expired: op P)
    if cur or not (dspec and dspec.t) then
      redis.call('SET', key, merge_json(cur, ARGV[i + 2]))
      row_merged(ARGV[i + 1])
    end
    rederive(ARGV[i + 1])
    i = i + 3
  elseif op == 'N' then                  -- a row written from a partial image: suffix
    row_merged(ARGV[i + 1])
    i = i + 2
  elseif op == 'MV' then                 -- move a row old -> new suffix (partial images keep the rest)
    local src = base .. ARGV[i + 1]
    if redis.call('EXISTS', src) == 1 then redis.call('RENAME', src, base .. ARGV[i + 2]) end
    row_written(ARGV[i + 1], false)
    rederive(ARGV[i + 1])
    rederive(ARGV[i + 2])
    i = i + 3
  elseif op == 'C' then                  -- the table of the next row ops: base index table_id touched
    base, index, tid, touched = ARGV[i + 1] .. ':', ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
    dspec, derived = derive_spec(ARGV[i + 5]), base .. DERIVED_SUFFIX  -- spec '': not shaped so
    i = i + 6
  elseif op == 'FA' or op == 'FR' then   -- a row joins (leaves) the set of its foreign-key value:
    note(ARGV[i + 1], ARGV[i + 2], op == 'FA')  -- set suffix (cascade.lua; batched like `__keys`)
    i = i + 3
  else
    flush()                              -- the ops below may read or change the sets
    if op == 'H' then                    -- HSET key count f v ...
      local c = tonumber(ARGV[i + 2])
      if c > 0 then batched('HSET', ARGV[i + 1], i + 3, i + 2 + 2 * c) end
      i = i + 3 + 2 * c
    elseif op == 'D' then                -- UNLINK key (a big set is freed off the main thread)
      redis.call('UNLINK', ARGV[i + 1]); i = i + 2
    elseif op == 'X' then                -- HDEL key count f ...
      local c = tonumber(ARGV[i + 2])
      if c > 0 then batched('HDEL', ARGV[i + 1], i + 3, i + 2 + c) end
      if ARGV[i + 1] == resync then marks = {} end
      i = i + 3 + c
    elseif op == 'A' then                -- SADD set member
      redis.call('SADD', ARGV[i + 1], ARGV[i + 2]); i = i + 3
    elseif op == 'R' then                -- SREM set member
      redis.call('SREM', ARGV[i + 1], ARGV[i + 2]); i = i + 3
    elseif op == 'CU' or op == 'MU' or op == 'CP' then
      -- a unit of table work (plan.work_op): key uid limit, then
      --   CU index base: remove up to `limit` of the table's rows; replies the rows left
      --   MU index base to_index to_base: move them to another name; replies the rows left
      --   CP cursor index to if_resync: copy `limit` members of a set (SSCAN), only while the
      --      table id if_resync (if not '') has a resync mark; replies the next cursor
      -- `key` (`__tableops`) records the units done by their ids, and where MU units move rows
      -- to (`to {to_index}`: to_base): a restart skips the units done, even when it plans other
      -- units around them, and removes rows moved to a name it no longer moves rows to.
      local key, uid, limit = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
      local todo = key == '' or not unit_done(key, uid)  -- '': not recorded (repeatable units)
      if op == 'CP' then
        left = '0'
        local cond = ARGV[i + 7]
        if todo and (cond == '' or redis.call('HEXISTS', resync, cond) == 1) then
          local cursor, to = ARGV[i + 4], ARGV[i + 6]
          if cursor == '' then redis.call('UNLINK', to); cursor = '0' end
          local r = redis.call('SSCAN', ARGV[i + 5], cursor, 'COUNT', limit)
          batched('SADD', to, 1, #r[2], r[2])
          left = r[1]
        end
      else
        left = 0
        if todo then
          local idx, from = ARGV[i + 4], ARGV[i + 5] .. ':'
          fk_clear_for(ARGV[i + 5])              -- after op FC: rows leave their sets (cascade.lua)
          local ms = redis.call('SPOP', idx, limit)
          local dkey = from .. DERIVED_SUFFIX    -- a shaped table's entries (and documents) go with
          -- its rows (a RENAME's new name is copied again: derive.lua)
          if redis.call('EXISTS', dkey) == 1 or redis.call('EXISTS', from .. DOCREC_SUFFIX) == 1 then
            for _, m in ipairs(ms) do underive(dkey, m) end
          end
          if op == 'CU' then
            for _, m in ipairs(ms) do fk_unlink(from .. m, m); redis.call('DEL', from .. m) end
          else
            if key ~= '' then redis.call('HSET', key, 'to ' .. ARGV[i + 6], ARGV[i + 7]) end
            local to = ARGV[i + 7] .. ':'
            for _, m in ipairs(ms) do
              fk_unlink(from .. m, m)            -- no-op without op FC before (cascade.lua)
              if redis.call('EXISTS', from .. m) == 1 then redis.call('RENAME', from .. m, to .. m) end
            end
            batched('SADD', ARGV[i + 6], 1, #ms, ms)
          end
          left = redis.call('SCARD', idx)
        end
      end
      if todo and key ~= '' and (left == 0 or left == '0') then redis.call('HSET', key, uid, 'done') end
      fk_clear_done()
      i = i + (op == 'CU' and 6 or 8)
    elseif op == 'FC' then               -- the next CU/MU unit's rows leave their sets (cascade.lua)
      i = fk_clear_spec(i)
    elseif op == 'F' then                -- the foreign keys of the cascades below (cascade.lua)
      i = fk_graph(i)
    elseif op == 'FD' or op == 'FU' then -- a parent row's cascade (cascade.lua): sets flushed above
      i = fk_op(op, i)
    elseif op == 'RB' then               -- a resync in flight writes no more rows: table_id
      -- The mark is fenced ("- {reason}"): no copy can take it up, whatever generation it
      -- holds or reads from now on (the calls after this one refill `__stale`); the table's
      -- action then restarts, moves or ends it.
      local v = redis.call('HGET', resync, ARGV[i + 1])
      if v then redis.call('HSET', resync, ARGV[i + 1], mark_value(MARK_FENCED, reason_of(v))) end
      i = i + 2
    elseif op == 'RS' then               -- begin a resync: table_id reason touched (op CP filled __stale)
      mark(ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
      i = i + 4
    elseif op == 'RR' then               -- TRUNCATE restarts a resync in flight: table_id stale touched
      local v = redis.call('HGET', resync, ARGV[i + 1])
      if v then mark(ARGV[i + 1], reason_of(v), ARGV[i + 3], ARGV[i + 2]) end
      i = i + 4
    elseif op == 'RC' then               -- RENAME carries a resync over: old_id new_id stale touched
      -- (op CP filled the new name's __stale before, if the old name had a mark)
      local v = redis.call('HGET', resync, ARGV[i + 1])
      if v then
        mark(ARGV[i + 2], reason_of(v), ARGV[i + 4])
      else
        redis.call('HDEL', resync, ARGV[i + 2])
        redis.call('UNLINK', ARGV[i + 3], ARGV[i + 4], partial_of(ARGV[i + 4]))
        marks = {}
      end
      i = i + 5
    else
      return redis.error_reply('BAD_PLAN unknown op ' .. tostring(op) .. ' at ' .. i)
    end
  end
end
flush()
derive_flush()                           -- op UM's count changes (derive.lua)
doc_flush()                              -- documents follow this call's rows (document.lua)
if chunk > 0 and not final then
  redis.call('HSET', progress, 'txn', txn, 'rows', done + nseq, 'first', first)
elseif chunk > 0 then
  redis.call('DEL', progress)
end
return left or first
