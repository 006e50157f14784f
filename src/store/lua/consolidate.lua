-- Merge one group of near-duplicate memories into its oldest member, atomically.
-- KEYS[1] is the member kept (the oldest), KEYS[2..] the others. A: user, namespace, kind: every
-- member must still be a memory of exactly that scope (one that is gone or was changed is left
-- out; if the kept one is, nothing happens). The kept memory gets the summed hit counts and the
-- longest TTL (none beats any); the others are deleted.
-- Returns {merged, hit_count, pttl} or {'skip'}.
local function json_field(key, path)
  local ok, v = pcall(redis.call, 'JSON.GET', key, path)
  if not ok or not v then return nil end
  local okd, decoded = pcall(cjson.decode, v)
  if not okd or type(decoded) ~= 'table' then return nil end
  return decoded[1]
end

local user, ns, kind = A[1], A[2], A[3]
local function member(key)
  return redis.call('TYPE', key).ok == 'ReJSON-RL' and json_field(key, '$.user') == user
    and json_field(key, '$.namespace') == ns and json_field(key, '$.kind') == kind
end

if not member(KEYS[1]) then return {'skip'} end
local hits = tonumber(json_field(KEYS[1], '$.hit_count')) or 0
local pttl = redis.call('PTTL', KEYS[1])
local gone = {}
for i = 2, #KEYS do
  if member(KEYS[i]) then
    hits = hits + (tonumber(json_field(KEYS[i], '$.hit_count')) or 0)
    local t = redis.call('PTTL', KEYS[i])
    if pttl ~= -1 and (t == -1 or t > pttl) then pttl = t end
    gone[#gone + 1] = KEYS[i]
  end
end
if #gone == 0 then return {0, hits, pttl} end
redis.call('JSON.SET', KEYS[1], '$.hit_count', hits)
if pttl == -1 then redis.call('PERSIST', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], pttl) end
for _, k in ipairs(gone) do redis.call('DEL', k) end
return {#gone, hits, pttl}
