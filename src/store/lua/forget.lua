-- Delete memories. Mode 'id': KEYS[1] is the memory, ARGV[2] (optional) the user it must belong to.
-- Mode 'scope': deletes every memory of a scope, page by page.
if ARGV[1] == 'id' then
  if ARGV[2] and ARGV[2] ~= '' then
    local ok, user = pcall(redis.call, 'JSON.GET', KEYS[1], '$.user')
    if not ok or not user or user ~= cjson.encode({ARGV[2]}) then return 0 end
  end
  return redis.call('DEL', KEYS[1])
end
-- ARGV[2] index, ARGV[3] query, ARGV[4] user, ARGV[5] namespace ('' for any).
local deleted, offset = 0, 0
for _ = 1, 100000 do
  local r = redis.pcall('FT.SEARCH', ARGV[2], ARGV[3], 'RETURN', '2', 'user', 'namespace',
    'LIMIT', offset, 1000, 'DIALECT', '2')
  if type(r) == 'table' and r.err then return redis.error_reply(r.err) end
  if #r < 2 then break end
  for i = 2, #r, 2 do
    local fields = r[i + 1]
    -- TAG matching is looser than equality (case, separators): delete exact matches only.
    if field(fields, 'user') == ARGV[4] and (ARGV[5] == '' or field(fields, 'namespace') == ARGV[5]) then
      deleted = deleted + redis.call('DEL', r[i])
    else
      offset = offset + 1
    end
  end
end
return deleted
