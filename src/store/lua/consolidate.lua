-- Merge one group of near-duplicate memories into its oldest member, atomically.
-- KEYS[1] is the member kept (the oldest), KEYS[2..] the others. A: user, namespace, kind: every
-- member must still be a memory of exactly that scope (one that is gone or was changed is left
-- out; if the kept one is, nothing happens). The kept memory gets the summed hit counts and the
-- longest TTL (none beats any); the others are deleted.
-- Returns {merged, hit_count, pttl} or {'skip'}.
local user, ns, kind = A[1], A[2], A[3]
local function member(key)
  local t = redis.call('TYPE', key).ok
  return (t == 'ReJSON-RL' or t == 'hash') and memory_field(key, 'text') ~= nil
    and memory_field(key, 'user') == user and memory_field(key, 'namespace') == ns
    and memory_field(key, 'kind') == kind
end

if not member(KEYS[1]) then return {'skip'} end
local hits = tonumber(memory_field(KEYS[1], 'hit_count')) or 0
local pttl = redis.call('PTTL', KEYS[1])
local gone = {}
for i = 2, #KEYS do
  if member(KEYS[i]) then
    hits = hits + (tonumber(memory_field(KEYS[i], 'hit_count')) or 0)
    local t = redis.call('PTTL', KEYS[i])
    if pttl ~= -1 and (t == -1 or t > pttl) then pttl = t end
    gone[#gone + 1] = KEYS[i]
  end
end
if #gone == 0 then return {0, hits, pttl} end
set_hits(KEYS[1], hits, false)
expire_memory(KEYS[1], pttl)
for _, k in ipairs(gone) do delete_memory(k) end
return {#gone, hits, pttl}
