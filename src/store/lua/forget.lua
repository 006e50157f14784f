-- Delete memories (with a compact memory's windows: delete_memory). Mode 'id': KEYS[1] is the
-- memory, A[2] (optional) the user it must belong to.
-- Mode 'keys': A[2] user, A[3] namespace ('' for any), A[4] how many to examine at most, then
-- candidate keys (found by a scope query). Deletes those whose stored user and namespace are
-- exactly the scope's; a compact window among them (it carries its memory's scope tags) is
-- deleted but not counted. (Scripts see a frozen clock, so the caller sizes the step by timing it.)
-- Returns {deleted, examined}: the caller sends the keys after `examined` again.
local function is_memory(key)
  local t = redis.call('TYPE', key).ok
  return t == 'ReJSON-RL' or t == 'hash'
end

if A[1] == 'id' then
  -- A compact window is part of its memory, not a memory of its own.
  if redis.call('TYPE', KEYS[1]).ok == 'hash' and memory_field(KEYS[1], 'text') == nil
      and memory_field(KEYS[1], 'windows') ~= nil then
    return 0
  end
  if A[2] and A[2] ~= '' then
    if not is_memory(KEYS[1]) then return 0 end
    if memory_field(KEYS[1], 'user') ~= A[2] then return 0 end
  end
  return delete_memory(KEYS[1])
end

local user, ns, most = A[2], A[3], tonumber(A[4])
local deleted, examined = 0, 0
for i = 5, math.min(#A, 4 + most) do
  local key = A[i]
  examined = examined + 1
  -- TAG matching is looser than equality (case, separators): delete exact matches only.
  if is_memory(key) and memory_field(key, 'user') == user
      and (ns == '' or memory_field(key, 'namespace') == ns) then
    local window = redis.call('TYPE', key).ok == 'hash' and memory_field(key, 'text') == nil
    local n = delete_memory(key)
    if not window then deleted = deleted + n end
  end
end
return {deleted, examined}
