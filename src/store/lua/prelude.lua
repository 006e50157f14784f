-- Shared by every memproxy script (prepended by store/scripts.rs).
--
-- ARGV starts with the rights block: <count>, then <count> commands as <n> <cmd> <arg>…, each
-- checked with redis.acl_check_cmd as the calling connection's ACL user before anything else
-- runs. The script's own arguments follow; they are read from `A` (ARGV after the block).
-- A search spec travels as: <n> <arg1> … <argn> (the FT.SEARCH arguments, index first).

-- Read the spec at t[i]; returns the argument table, the index after it, and whether the rows
-- of a search need their keys' TTLs (a negative count says they do not).
local function read_spec_in(t, i)
  local n = tonumber(t[i])
  local ttl = n >= 0
  if not ttl then n = -n end
  local args = {}
  for j = 1, n do args[j] = t[i + j] end
  return args, i + n + 1, ttl
end

local A = {}
do
  local i = 2
  for _ = 1, tonumber(ARGV[1]) do
    local c
    c, i = read_spec_in(ARGV, i)
    if not redis.acl_check_cmd(unpack(c)) then
      return redis.error_reply("NOPERM this user has no permissions to run '" .. c[1] ..
        "' on '" .. (c[2] or '') .. "'")
    end
  end
  for j = i, #ARGV do A[#A + 1] = ARGV[j] end
end

-- Read the search spec at A[i]; returns the argument table and the index after it.
local function read_spec(i)
  return read_spec_in(A, i)
end

-- `recall_hybrid_policy = "adaptive"`: a KNN query carrying ` HYBRID_POLICY ADAPTIVE` gets
-- ADHOC_BF when its scope filter matches at most SCOPE_BRUTE_FORCE memories and BATCHES above.
-- The count stops there (FT.AGGREGATE … LIMIT n 1 reads n + 1 matches at most, ~0.1 ms), and is
-- kept for the rest of the script. RediSearch 2.10's own choice brute-forces a scope that holds
-- most of a large index (28 ms at 100k); BATCHES on a small scope of a large index is worse (72 ms).
-- If the count fails (e.g. the ACL user may not run FT.AGGREGATE), RediSearch chooses.
local SCOPE_BRUTE_FORCE = 1000
local scope_sizes = {}
-- How many memories `filter` matches on `index`, counted up to SCOPE_BRUTE_FORCE + 1 (false when
-- the count fails); once a script.
local function scope_size(index, filter)
  local key = index .. '\0' .. filter
  local n = scope_sizes[key]
  if n == nil then
    local r = redis.pcall('FT.AGGREGATE', index, filter, 'LOAD', '0',
      'LIMIT', tostring(SCOPE_BRUTE_FORCE), '1', 'DIALECT', '2')
    n = (type(r) == 'table' and not r.err and tonumber(r[1])) or false
    scope_sizes[key] = n
  end
  return n
end
local function adapt_policy(args)
  local q = args[2]
  local s, e = string.find(q or '', ' HYBRID_POLICY ADAPTIVE', 1, true)
  if not s then return args end
  local filter = string.match(q, '^%((.*)%)=>%[KNN ')
  local chosen = ''
  if filter then
    local n = scope_size(args[1], filter)
    if n then chosen = n > SCOPE_BRUTE_FORCE and 'BATCHES' or 'ADHOC_BF' end
  end
  local out = {}
  for i, a in ipairs(args) do out[i] = a end
  local policy = chosen == '' and '' or (' HYBRID_POLICY ' .. chosen)
  out[2] = string.sub(q, 1, s - 1) .. policy .. string.sub(q, e + 1)
  return out, chosen
end

-- A memory is the guide's JSON document or (the compact layout) a hash of the same fields; a
-- long text's later windows in the compact layout are hashes of their own, `<memory key>#w<n>`
-- (n from 1, `window_count` of them), with the memory's scope tags and the vector in `windows`.

-- The field `name` of the memory at `key` as a string or number, in either layout; nil when the
-- key is not a memory or lacks the field.
local function memory_field(key, name)
  local t = redis.call('TYPE', key).ok
  if t == 'hash' then
    local v = redis.call('HGET', key, name)
    if v then return v end
    return nil
  elseif t == 'ReJSON-RL' then
    local ok, v = pcall(redis.call, 'JSON.GET', key, '$.' .. name)
    if not ok or not v then return nil end
    local okd, decoded = pcall(cjson.decode, v)
    if not okd or type(decoded) ~= 'table' or decoded[1] == cjson.null then return nil end
    return decoded[1]
  end
  return nil
end

-- The windows of a compact memory (none for a JSON one: its windows are inside it).
local function window_keys(key)
  local out = {}
  if redis.call('TYPE', key).ok ~= 'hash' then return out end
  local n = tonumber(redis.call('HGET', key, 'window_count')) or 0
  for w = 1, math.min(n, 100000) do out[w] = key .. '#w' .. w end
  return out
end

-- Delete a memory with its windows; returns 1 if the memory was there.
local function delete_memory(key)
  for _, w in ipairs(window_keys(key)) do redis.call('DEL', w) end
  return redis.call('DEL', key)
end

-- Give a memory and its windows this PTTL (-1: none).
local function expire_memory(key, pttl)
  local all = window_keys(key)
  all[#all + 1] = key
  for _, k in ipairs(all) do
    if pttl == -1 then redis.call('PERSIST', k) else redis.call('PEXPIRE', k, pttl) end
  end
end

-- Set (or add to) a memory's hit count.
local function set_hits(key, n, add)
  if redis.call('TYPE', key).ok == 'hash' then
    if add then return redis.call('HINCRBY', key, 'hit_count', n) end
    return redis.call('HSET', key, 'hit_count', n)
  end
  if add then return redis.call('JSON.NUMINCRBY', key, '$.hit_count', n) end
  return redis.call('JSON.SET', key, '$.hit_count', n)
end

-- The Redis type a new memory's document is written as: JSON (the guide's) or a hash (compact,
-- sent as netstrings "<len>:<bytes>" of field, value; see Store::memory_doc).
local function doc_type(doc)
  if string.sub(doc or '', 1, 1) == '{' then return 'ReJSON-RL' end
  return 'hash'
end

local function netstrings(doc)
  local out, i = {}, 1
  while i <= #doc do
    local c = string.find(doc, ':', i, true)
    local n = c and tonumber(string.sub(doc, i, c - 1))
    if not n then return nil end
    out[#out + 1] = string.sub(doc, c + 1, c + n)
    i = c + n + 1
  end
  return out
end

local SCOPE_TAGS = {user = true, namespace = true, kind = true, source_thread = true}

-- Write a compact memory and its windows (every key with the TTL).
local function write_hash(key, doc, ttl)
  local items = netstrings(doc)
  if not items or #items % 2 ~= 0 then return redis.error_reply('ERR malformed compact document') end
  local main, scope, windows = {}, {}, {}
  for j = 1, #items, 2 do
    local f, v = items[j], items[j + 1]
    if f == '#w' then
      windows[#windows + 1] = v
    else
      main[#main + 1] = f; main[#main + 1] = v
      if SCOPE_TAGS[f] then scope[#scope + 1] = f; scope[#scope + 1] = v end
    end
  end
  if #windows > 0 then main[#main + 1] = 'window_count'; main[#main + 1] = tostring(#windows) end
  redis.call('HSET', key, unpack(main))
  if ttl > 0 then redis.call('EXPIRE', key, ttl) end
  for w, blob in ipairs(windows) do
    local wk = key .. '#w' .. w
    redis.call('HSET', wk, 'windows', blob, unpack(scope))
    if ttl > 0 then redis.call('EXPIRE', wk, ttl) end
  end
  return nil
end

-- Run FT.SEARCH; returns {'ok', total, rows, policy} with rows {key, pttl, score, {field, value,
-- …}} (pttl '' when `ttl` is false; policy: what `adaptive` chose, BATCHES or ADHOC_BF, else ''),
-- or {'err', message}. Never raises, so one failing side of a hybrid recall does not fail both.
-- The fields a row lacks, read from its document (see cluster_search), in either layout.
local function load_fields(key, fields, wanted)
  local have, out = {}, {}
  if type(fields) == 'table' then
    for j = 1, #fields, 2 do have[fields[j]] = true; out[#out + 1] = fields[j]; out[#out + 1] = fields[j + 1] end
  end
  local names = {}
  for _, name in ipairs(wanted) do
    if not have[name] and name ~= 'distance' then names[#names + 1] = name end
  end
  if #names == 0 then return out end
  local okt, t = pcall(redis.call, 'TYPE', key)
  if okt and t.ok == 'hash' then
    local ok, vals = pcall(redis.call, 'HMGET', key, unpack(names))
    if not ok then return out end
    for j, name in ipairs(names) do
      if vals[j] then out[#out + 1] = name; out[#out + 1] = vals[j] end
    end
    return out
  end
  local paths = {key}
  for _, name in ipairs(names) do paths[#paths + 1] = '$.' .. name end
  paths[#paths + 1] = '$.__memproxy_none'  -- two paths or more: the reply is an object
  local ok, raw = pcall(redis.call, 'JSON.GET', unpack(paths))
  if not ok or type(raw) ~= 'string' then return out end
  local doc = cjson.decode(raw)
  for j = 2, #paths - 1 do
    local v = doc[paths[j]]
    if type(v) == 'table' and v[1] ~= nil and v[1] ~= cjson.null then
      local x = v[1]
      if type(x) == 'table' then x = cjson.encode(x) end
      out[#out + 1] = string.sub(paths[j], 3)
      out[#out + 1] = tostring(x)
    end
  end
  return out
end

-- A compact window's row stands for its memory: the memory's key, its fields and TTL, the
-- window's distance. nil when the memory is gone (a window outliving it is skipped) or cannot be
-- read (the caller's rights): a search never raises.
local function window_row(key, fields, wanted, ttl)
  local parent = string.match(key, '^(.*)#w%d+$')
  if not parent then return nil end
  local okt, t = pcall(redis.call, 'TYPE', parent)
  if not okt or t.ok ~= 'hash' then return nil end
  local out = {}
  for j = 1, #fields, 2 do
    if fields[j] == 'distance' then out[1] = 'distance'; out[2] = fields[j + 1] end
  end
  local names = {}
  for _, name in ipairs(wanted) do
    if name ~= 'distance' then names[#names + 1] = name end
  end
  if #names > 0 then
    local ok, vals = pcall(redis.call, 'HMGET', parent, unpack(names))
    if not ok then return nil end
    for j, name in ipairs(names) do
      if vals[j] then out[#out + 1] = name; out[#out + 1] = vals[j] end
    end
  end
  return {parent, ttl == false and '' or redis.call('PTTL', parent), '', out}
end

-- A search on a cluster node's index (memproxy names those `<index>{n}`): RediSearch without
-- its coordinator finds documents there but loads none of them, and a row whose load failed
-- loses its computed fields too (the KNN distance). So the search asks only for the distance
-- (or for keys only), and the script reads the other fields from each JSON document.
local function cluster_search(args)
  if not string.find(args[1], '{', 1, true) then return args, nil end
  local out, wanted, n = {}, nil, 1
  while n <= #args do
    if wanted == nil and string.upper(args[n]) == 'RETURN' then
      local count = tonumber(args[n + 1]) or 0
      wanted = {}
      for j = 1, count do wanted[j] = args[n + 1 + j] end
      n = n + 2 + count
    else
      out[#out + 1] = args[n]
      n = n + 1
    end
  end
  if wanted == nil then return args, nil end
  local distance = false
  for _, w in ipairs(wanted) do if w == 'distance' then distance = true end end
  if distance then
    out[#out + 1] = 'RETURN'; out[#out + 1] = '1'; out[#out + 1] = 'distance'
  else
    out[#out + 1] = 'NOCONTENT'
  end
  return out, wanted
end

-- The RETURN list of FT.SEARCH arguments (nil without one).
local function returned(args)
  for n = 1, #args do
    if string.upper(args[n]) == 'RETURN' then
      local out = {}
      for j = 1, tonumber(args[n + 1]) or 0 do out[j] = args[n + 1 + j] end
      return out
    end
  end
  return nil
end

local function search(args, ttl)
  local policy, wanted
  -- A KNN over compact windows finds window hashes: their rows become their memories'.
  local windows = string.find(args[2] or '', '@windows $vec', 1, true) ~= nil
  local asked = windows and returned(args)
  args, policy = adapt_policy(args)
  args, wanted = cluster_search(args)
  local r = redis.pcall('FT.SEARCH', unpack(args))
  if type(r) == 'table' and r.err then return {'err', r.err} end
  local withscores, nocontent = false, false
  for _, a in ipairs(args) do
    local u = string.upper(a)
    if u == 'WITHSCORES' then withscores = true elseif u == 'NOCONTENT' then nocontent = true end
  end
  local rows, i, parents = {}, 2, {}
  while i <= #r do
    local key, score, fields = r[i], '', {}
    i = i + 1
    if withscores then score = r[i]; i = i + 1 end
    if not nocontent then fields = r[i]; i = i + 1 end
    local parent = asked and string.match(key, '^(.*)#w%d+$')
    if parent then
      local okt, t = pcall(redis.call, 'TYPE', key)
      if not okt or t.ok ~= 'hash' then parent = false end
    end
    if parent then
      -- Rows come nearest first: a memory's first window row is its nearest; later ones drop.
      if not parents[parent] then
        parents[parent] = true
        local row = window_row(key, fields, asked, ttl)
        if row then rows[#rows + 1] = row end
      end
    else
      if wanted then fields = load_fields(key, fields, wanted) end
      rows[#rows + 1] = {key, ttl == false and '' or redis.call('PTTL', key), score, fields}
    end
  end
  return {'ok', r[1], rows, policy or ''}
end

-- An error that says the index does not exist (RediSearch's words differ between versions).
local function missing_index(msg)
  local m = string.lower(tostring(msg))
  return string.find(m, 'no such index', 1, true) ~= nil or string.find(m, 'unknown index name', 1, true) ~= nil
end

-- Run `count` search specs starting at A[i]; returns their results and the index after them.
local function search_specs(count, i)
  local out = {}
  for s = 1, count do
    local args, ttl
    args, i, ttl = read_spec(i)
    out[s] = search(args, ttl)
  end
  return out, i
end

local function field(fields, name)
  for i = 1, #fields, 2 do if fields[i] == name then return fields[i + 1] end end
  return nil
end

-- Refuse to touch a key of another type before anything is written.
local function expect_type(key, want)
  local t = redis.call('TYPE', key).ok
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. t .. ', not a ' .. want)
  end
  return nil
end

-- A TTL argument: a whole number of seconds, 0 for none.
local function valid_ttl(s)
  local t = tonumber(s)
  if not t or t ~= math.floor(t) or t < 0 or t > 2147483647 then
    return nil, redis.error_reply('ERR invalid TTL ' .. tostring(s))
  end
  return t, nil
end

-- The dedup decision, without writing. dedup_spec_at: A index of the KNN search spec (or nil);
-- the nearest hit whose user, namespace and kind equal the scope exactly is the candidate
-- (TAG matching is looser: case, separators). Returns {key or nil, distance or ''} or an error.
local function dedup_candidate(dedup_spec_at, threshold, user, ns, kind)
  if not dedup_spec_at then return {nil, ''} end
  local dedup_args = read_spec(dedup_spec_at)
  local r = search(dedup_args)
  if r[1] == 'err' then return nil, redis.error_reply(r[2]) end
  for _, row in ipairs(r[3]) do
    local f = row[4]
    if field(f, 'user') == user and field(f, 'namespace') == ns and field(f, 'kind') == kind then
      local distance = field(f, 'distance') or ''
      local d = tonumber(distance)
      if d and threshold >= 0 and d <= threshold then return {row[1], distance} end
      return {nil, distance}
    end
  end
  return {nil, ''}
end

-- Write (or bump) after every check has passed; a bump adds `bump` to the hit count (1, and a
-- remember's HITS). Returns {'new'|'dedup', key, distance, pttl}.
local function remember_write(new_key, doc, ttl, cand, bump)
  if cand[1] then
    set_hits(cand[1], bump, true)
    return {'dedup', cand[1], cand[2], redis.call('PTTL', cand[1])}
  end
  if doc_type(doc) == 'hash' then
    local err = write_hash(new_key, doc, ttl)
    if err then return err end
  else
    redis.call('JSON.SET', new_key, '$', doc, 'NX')
    if ttl > 0 then redis.call('EXPIRE', new_key, ttl) end
  end
  return {'new', new_key, cand[2], redis.call('PTTL', new_key)}
end

-- With scopes bound to ACL users: a session that exists must belong to `owner` ('' = unbound).
local function check_owner(key, owner)
  if owner == nil or owner == '' then return nil end
  local user = redis.call('HGET', key, 'user')
  if user and user ~= owner then
    return redis.error_reply('NOPERM this thread belongs to another user')
  end
  return nil
end

-- The TTL a session's writes refresh: its own (MEM.SESSION START … TTL s) or the default.
local function session_ttl(key, default)
  local own = tonumber(redis.call('HGET', key, 'ttl_seconds'))
  if own and own > 0 then return own end
  return default
end
