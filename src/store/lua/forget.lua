-- Delete memories. Mode 'id': KEYS[1] is the memory, A[2] (optional) the user it must belong to.
-- Mode 'keys': A[2] user, A[3] namespace ('' for any), A[4] how many to examine at most, then
-- candidate keys (found by a scope query). Deletes those whose stored user and namespace are
-- exactly the scope's. (Scripts see a frozen clock, so the caller sizes the step by timing it.)
-- Returns {deleted, examined}: the caller sends the keys after `examined` again.
local function json_field(key, path)
  local ok, v = pcall(redis.call, 'JSON.GET', key, path)
  if not ok or not v then return nil end
  local okd, decoded = pcall(cjson.decode, v)
  if not okd or type(decoded) ~= 'table' then return nil end
  return decoded[1]
end

if A[1] == 'id' then
  if A[2] and A[2] ~= '' then
    if redis.call('TYPE', KEYS[1]).ok ~= 'ReJSON-RL' then return 0 end
    if json_field(KEYS[1], '$.user') ~= A[2] then return 0 end
  end
  return redis.call('DEL', KEYS[1])
end

local user, ns, most = A[2], A[3], tonumber(A[4])
local deleted, examined = 0, 0
for i = 5, math.min(#A, 4 + most) do
  local key = A[i]
  examined = examined + 1
  -- TAG matching is looser than equality (case, separators): delete exact matches only.
  if redis.call('TYPE', key).ok == 'ReJSON-RL' and json_field(key, '$.user') == user
      and (ns == '' or json_field(key, '$.namespace') == ns) then
    deleted = deleted + redis.call('DEL', key)
  end
end
return {deleted, examined}
