-- Delete memories. Mode 'id': KEYS[1] is the memory, ARGV[2] (optional) the user it must belong to.
-- Mode 'scope': ARGV[2..] is a NOCONTENT search spec; deletes every match, page by page.
if ARGV[1] == 'id' then
  if ARGV[2] and ARGV[2] ~= '' then
    local ok, user = pcall(redis.call, 'JSON.GET', KEYS[1], '$.user')
    if not ok or not user or user ~= cjson.encode({ARGV[2]}) then return 0 end
  end
  return redis.call('DEL', KEYS[1])
end
local args = read_spec(2)
local deleted = 0
for _ = 1, 100000 do
  local r = search(args)
  if r[1] == 'err' then return redis.error_reply(r[2]) end
  if #r[3] == 0 then break end
  for _, row in ipairs(r[3]) do deleted = deleted + redis.call('DEL', row[1]) end
end
return deleted
