-- KEYS[1]: the new memory's key. A: doc, ttl (0: none), threshold (<0: no dedup), user,
-- namespace, kind, bump (what a dedup adds to the hit count: 1 + HITS), then the dedup search
-- spec when deduping.
-- Returns {'new'|'dedup', key, distance or '', pttl}, or {'collision'} when the new key exists.
local err = expect_type(KEYS[1], doc_type(A[1]))
if err then return err end
local ttl, terr = valid_ttl(A[2])
if terr then return terr end
local threshold = tonumber(A[3])
local at = nil
if threshold >= 0 then at = 8 end
local bump = tonumber(A[7])
if not bump or bump ~= math.floor(bump) or bump < 1 then
  return redis.error_reply('ERR invalid hit count ' .. tostring(A[7]))
end
local cand, cerr = dedup_candidate(at, threshold, A[4], A[5], A[6])
if cerr then return cerr end
if not cand[1] and redis.call('EXISTS', KEYS[1]) == 1 then return {'collision'} end
return remember_write(KEYS[1], A[1], ttl, cand, bump)
