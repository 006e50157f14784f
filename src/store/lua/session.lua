-- Session and event writes. KEYS[1]: session hash, KEYS[2]: event stream.
-- ARGV[1]: op, ARGV[2]: now, ARGV[3]: session ttl, ARGV[4]: events max len, then per op:
--   start:      thread user agent goal   (creates or updates; refreshes TTL; event thread_started)
--   set:        field value action       (GOAL/SCRATCHPAD on an existing session)
-- Returns {created (0/1), event id}, or nil when 'set' finds no session.
local err = expect_type(KEYS[1], 'hash') or expect_type(KEYS[2], 'stream')
if err then return err end
local op, now, ttl, maxlen = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local exists = redis.call('EXISTS', KEYS[1]) == 1
if op == 'start' then
  if not exists then
    redis.call('HSET', KEYS[1], 'thread_id', ARGV[5], 'user', ARGV[6], 'agent', ARGV[7], 'goal', ARGV[8],
      'scratchpad', '', 'turn_count', 0, 'created_ts', now, 'last_active_ts', now, 'recent_turns', '[]')
  else
    redis.call('HSET', KEYS[1], 'user', ARGV[6], 'agent', ARGV[7], 'goal', ARGV[8], 'last_active_ts', now)
  end
  redis.call('EXPIRE', KEYS[1], ttl)
  local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'action', 'thread_started', 'detail', ARGV[8], 'ts', now)
  redis.call('EXPIRE', KEYS[2], ttl)
  return {exists and 0 or 1, id}
end
if not exists then return false end
redis.call('HSET', KEYS[1], ARGV[5], ARGV[6], 'last_active_ts', now)
redis.call('EXPIRE', KEYS[1], ttl)
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'action', ARGV[7], 'detail', ARGV[6], 'ts', now)
redis.call('EXPIRE', KEYS[2], ttl)
return {0, id}
