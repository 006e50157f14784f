-- ARGV: <count> then <count> search specs. Returns one search() result per spec.
return search_specs(tonumber(ARGV[1]), 2)
