-- Acquire or re-enter a lock.
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] fencing counter, KEYS[3] re-entry marker
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] marker lease in ms
-- Returns {hold count, fencing token} when held by ARGV[2] afterwards, {0, pttl} otherwise.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  -- Only a free -> held transition takes a new token, so a later holder always has a larger one.
  return {1, redis.call('INCR', KEYS[2])}
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  -- The marker lets a cancelled re-entry be undone exactly once (undo_reentry.lua).
  redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
  return {count, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
