-- One agent turn, atomically. KEYS: session hash, event stream, new memory key.
-- A: thread role content now session_ttl max_turns events_max_len user agent
--    remember_kind ('' to skip) doc mem_ttl threshold mem_prefix owner namespace n_recall, then
--    n_recall specs, then the dedup spec when remembering with dedup.
-- Order: every check (types, owner, TTLs, the dedup decision, a colliding id) → recall (reads) →
-- writes: remember → append the turn → one event. Nothing is written unless all checks pass.
-- Returns {turn_count, recalled, remembered, event}, or {'collision'}.
local err = expect_type(KEYS[1], 'hash') or expect_type(KEYS[2], 'stream') or expect_type(KEYS[3], doc_type(A[11]))
  or check_owner(KEYS[1], A[15])
if err then return err end
local thread, role, content, now = A[1], A[2], A[3], A[4]
local ttl, terr = valid_ttl(A[5])
if terr then return terr end
local max_turns, maxlen = tonumber(A[6]), A[7]
local kind, doc, threshold = A[10], A[11], tonumber(A[13])
local mem_ttl, merr = valid_ttl(A[12])
if merr then return merr end
local prefix = A[14]
local tc = redis.call('HGET', KEYS[1], 'turn_count')
if tc and not tonumber(tc) then
  return redis.error_reply('ERR session ' .. KEYS[1] .. ' has a turn_count that is not a number')
end

local recalled, i = search_specs(tonumber(A[17]), 18)
-- A missing index (FLUSHALL, FT.DROPINDEX) fails the turn before anything is written: the proxy
-- creates the index and runs the turn again, which must not find half of it done.
for _, r in ipairs(recalled) do
  if r[1] == 'err' and missing_index(r[2]) then return redis.error_reply(r[2]) end
end

local cand = nil
if kind ~= '' then
  local at = nil
  if threshold >= 0 then at = i end
  local cerr
  cand, cerr = dedup_candidate(at, threshold, A[8], A[16], kind)
  if cerr then return cerr end
  if not cand[1] and redis.call('EXISTS', KEYS[3]) == 1 then return {'collision'} end
end

-- Writes from here on.
local remembered, detail = false, ''
if cand then
  remembered = remember_write(KEYS[3], doc, mem_ttl, cand, 1)
  local id = string.sub(remembered[2], #prefix + 1)
  if remembered[1] == 'new' then detail = 'wrote ' .. id .. ' as ' .. kind else detail = 'deduped onto ' .. id end
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'thread_id', thread, 'user', A[8], 'agent', A[9], 'goal', '',
    'scratchpad', '', 'turn_count', 0, 'created_ts', now, 'recent_turns', '[]')
end
local turns = {}
local raw = redis.call('HGET', KEYS[1], 'recent_turns')
if raw and raw ~= '' then
  local ok, decoded = pcall(cjson.decode, raw)
  if ok and type(decoded) == 'table' then turns = decoded end
end
turns[#turns + 1] = {role = role, content = content, ts = tonumber(now)}
while #turns > max_turns do table.remove(turns, 1) end
local count = redis.call('HINCRBY', KEYS[1], 'turn_count', 1)
redis.call('HSET', KEYS[1], 'recent_turns', cjson.encode(turns), 'last_active_ts', now)
ttl = session_ttl(KEYS[1], ttl)
redis.call('EXPIRE', KEYS[1], ttl)

local event = redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'action', 'turn_appended:' .. role,
  'detail', detail, 'ts', now)
redis.call('EXPIRE', KEYS[2], ttl)
return {count, recalled, remembered, event}
