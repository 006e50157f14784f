-- KEYS[1]: the new memory's key. ARGV: doc, ttl (<=0: none), threshold (<0: no dedup), then the
-- dedup search spec when deduping.
local err = expect_type(KEYS[1], 'ReJSON-RL')
if err then return err end
local threshold = tonumber(ARGV[3])
local at = nil
if threshold >= 0 then at = 4 end
return remember(KEYS[1], ARGV[1], tonumber(ARGV[2]), threshold, at)
