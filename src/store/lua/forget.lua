-- Delete memories. Mode 'id': KEYS[1] is the memory, A[2] (optional) the user it must belong to.
-- Mode 'batch': one bounded batch of a scope's erasure: A[2] index, A[3] query, A[4] user,
-- A[5] namespace ('' for any), A[6] offset, A[7] batch size. Deletes the exact matches among
-- that page; returns {deleted, kept (matches of the TAG query that are not exact), page size}.
if A[1] == 'id' then
  if A[2] and A[2] ~= '' then
    if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
    local t = redis.call('TYPE', KEYS[1]).ok
    if t ~= 'ReJSON-RL' then return 0 end
    local ok, user = pcall(redis.call, 'JSON.GET', KEYS[1], '$.user')
    if not ok or not user then return 0 end
    local okd, decoded = pcall(cjson.decode, user)
    if not okd or type(decoded) ~= 'table' or decoded[1] ~= A[2] then return 0 end
  end
  return redis.call('DEL', KEYS[1])
end
local r = redis.pcall('FT.SEARCH', A[2], A[3], 'RETURN', '2', 'user', 'namespace',
  'LIMIT', tonumber(A[6]), tonumber(A[7]), 'DIALECT', '2')
if type(r) == 'table' and r.err then return redis.error_reply(r.err) end
local deleted, kept, page = 0, 0, 0
for i = 2, #r, 2 do
  page = page + 1
  local fields = r[i + 1]
  -- TAG matching is looser than equality (case, separators): delete exact matches only.
  if field(fields, 'user') == A[4] and (A[5] == '' or field(fields, 'namespace') == A[5]) then
    deleted = deleted + redis.call('DEL', r[i])
  else
    kept = kept + 1
  end
end
return {deleted, kept, page}
