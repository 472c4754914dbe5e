-- Acquire or re-enter a lock.
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] fencing counter, KEYS[3] re-entry marker
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] marker lifetime in ms,
-- ARGV[4] '1' when this is a re-entry of an enclosing hold, ARGV[5] fencing key lifetime in ms
-- Returns {hold count, fencing token} when held by ARGV[2] afterwards, {0, pttl} otherwise.
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- Only a free -> held transition takes a new token: max(last + 1, server time in µs), so a
  -- later holder always has a larger one, and the counter may expire (one key per lock name
  -- would otherwise pile up forever) without tokens going backwards. Computed before any write
  -- so a wrong-typed counter fails the script without leaving a half-made lock.
  local now = redis.call('TIME')
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  local token = math.max(last + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', ARGV[5])
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
  end
  return {1, token}
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  -- The marker lets a cancelled re-entry be undone exactly once (undo_reentry.lua).
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
  end
  return {count, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
