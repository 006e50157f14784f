-- ARGV: <count> then <count> search specs. Returns one search() result per spec.
local out, i = {}, 2
for s = 1, tonumber(ARGV[1]) do
  local args
  args, i = read_spec(i)
  out[s] = search(args)
end
return out
