-- Shared by every memproxy script (prepended by store/scripts.rs).
-- A search spec travels in ARGV as: <n> <arg1> … <argn> (the FT.SEARCH arguments, index first).

-- Read the search spec at ARGV[i]; returns the argument table and the index after it.
local function read_spec(i)
  local n = tonumber(ARGV[i])
  local args = {}
  for j = 1, n do args[j] = ARGV[i + j] end
  return args, i + n + 1
end

-- Run FT.SEARCH; returns {'ok', total, rows} with rows {key, pttl, score, {field, value, …}},
-- or {'err', message}. Never raises, so one failing side of a hybrid recall does not fail both.
local function search(args)
  local r = redis.pcall('FT.SEARCH', unpack(args))
  if type(r) == 'table' and r.err then return {'err', r.err} end
  local withscores, nocontent = false, false
  for _, a in ipairs(args) do
    local u = string.upper(a)
    if u == 'WITHSCORES' then withscores = true elseif u == 'NOCONTENT' then nocontent = true end
  end
  local rows, i = {}, 2
  while i <= #r do
    local key, score, fields = r[i], '', {}
    i = i + 1
    if withscores then score = r[i]; i = i + 1 end
    if not nocontent then fields = r[i]; i = i + 1 end
    rows[#rows + 1] = {key, redis.call('PTTL', key), score, fields}
  end
  return {'ok', r[1], rows}
end

-- Run `count` search specs starting at ARGV[i]; returns their results and the index after them.
local function search_specs(count, i)
  local out = {}
  for s = 1, count do
    local args
    args, i = read_spec(i)
    out[s] = search(args)
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

-- Dedup-or-write of one memory. dedup_spec_at: ARGV index of the KNN-1 search spec (or nil).
-- Returns {'new'|'dedup', key, distance or '', pttl}.
local function remember(new_key, doc, ttl, threshold, dedup_spec_at)
  local distance = ''
  if dedup_spec_at then
    local args = read_spec(dedup_spec_at)
    local r = search(args)
    if r[1] == 'err' then return redis.error_reply(r[2]) end
    local row = r[3][1]
    if row then
      distance = field(row[4], 'distance') or ''
      local d = tonumber(distance)
      if d and threshold >= 0 and d <= threshold then
        redis.call('JSON.NUMINCRBY', row[1], '$.hit_count', 1)
        return {'dedup', row[1], distance, redis.call('PTTL', row[1])}
      end
    end
  end
  redis.call('JSON.SET', new_key, '$', doc)
  if ttl > 0 then redis.call('EXPIRE', new_key, ttl) end
  return {'new', new_key, distance, redis.call('PTTL', new_key)}
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
