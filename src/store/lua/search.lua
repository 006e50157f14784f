-- A: <count> then <count> search specs. Returns one search() result per spec. (no-writes)
return search_specs(tonumber(A[1]), 2)
