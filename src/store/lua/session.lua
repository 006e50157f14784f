-- Session and event writes. KEYS[1]: session hash, KEYS[2]: event stream.
-- A[1]: op, A[2]: now, A[3]: session ttl, A[4]: events max len, A[5]: owner ('' unless scopes
-- are bound to ACL users), then per op:
--   start:      thread user agent goal own_ttl (creates or updates; own_ttl > 0 becomes the
--               session's TTL for every later refresh; event thread_started)
--   set:        field value action       (GOAL/SCRATCHPAD on an existing session)
--   end:                                 (deletes the session and its events; returns 1/0)
-- Returns {created (0/1), event id}, or nil when 'set' finds no session.
local err = expect_type(KEYS[1], 'hash') or expect_type(KEYS[2], 'stream') or check_owner(KEYS[1], A[5])
if err then return err end
local op, now, maxlen = A[1], A[2], A[4]
local ttl, terr = valid_ttl(A[3])
if terr then return terr end
if op == 'end' then
  local existed = redis.call('DEL', KEYS[1])
  redis.call('DEL', KEYS[2])
  return existed
end
local exists = redis.call('EXISTS', KEYS[1]) == 1
if op == 'start' then
  local own, oerr = valid_ttl(A[10] or '0')
  if oerr then return oerr end
  if own > 0 then
    redis.call('HSET', KEYS[1], 'ttl_seconds', own)
  end
  if not exists then
    redis.call('HSET', KEYS[1], 'thread_id', A[6], 'user', A[7], 'agent', A[8], 'goal', A[9],
      'scratchpad', '', 'turn_count', 0, 'created_ts', now, 'last_active_ts', now, 'recent_turns', '[]')
  else
    redis.call('HSET', KEYS[1], 'user', A[7], 'agent', A[8], 'goal', A[9], 'last_active_ts', now)
  end
  ttl = session_ttl(KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[1], ttl)
  local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'action', 'thread_started', 'detail', A[9], 'ts', now)
  redis.call('EXPIRE', KEYS[2], ttl)
  return {exists and 0 or 1, id}
end
if not exists then return false end
redis.call('HSET', KEYS[1], A[6], A[7], 'last_active_ts', now)
ttl = session_ttl(KEYS[1], ttl)
redis.call('EXPIRE', KEYS[1], ttl)
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'action', A[8], 'detail', A[7], 'ts', now)
redis.call('EXPIRE', KEYS[2], ttl)
return {0, id}
