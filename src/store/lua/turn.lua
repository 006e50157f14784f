-- One agent turn, atomically. KEYS: session hash, event stream, new memory key.
-- ARGV: thread role content now session_ttl max_turns events_max_len user agent
--       remember_kind ('' to skip) doc mem_ttl threshold mem_prefix owner n_recall, then n_recall specs,
--       then the dedup spec when remembering with dedup.
-- Order: recall (reads) → remember → append the turn → one event.
local err = expect_type(KEYS[1], 'hash') or expect_type(KEYS[2], 'stream') or expect_type(KEYS[3], 'ReJSON-RL')
  or check_owner(KEYS[1], ARGV[15])
if err then return err end
local thread, role, content, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, max_turns, maxlen = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local kind, doc, mem_ttl, threshold = ARGV[10], ARGV[11], tonumber(ARGV[12]), tonumber(ARGV[13])

local prefix = ARGV[14]
local recalled, i = search_specs(tonumber(ARGV[16]), 17)

local remembered, detail = false, ''
if kind ~= '' then
  local at = nil
  if threshold >= 0 then at = i end
  remembered = remember(KEYS[3], doc, mem_ttl, threshold, at)
  if remembered.err then return remembered end
  local id = string.sub(remembered[2], #prefix + 1)
  if remembered[1] == 'new' then detail = 'wrote ' .. id .. ' as ' .. kind else detail = 'deduped onto ' .. id end
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'thread_id', thread, 'user', ARGV[8], 'agent', ARGV[9], 'goal', '',
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
