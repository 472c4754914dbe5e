-- Acquire or re-enter a lock.
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] fencing counter, KEYS[3] re-entry marker
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] marker lifetime in ms,
-- ARGV[4] '1' when this is a re-entry of an enclosing hold, ARGV[5] fencing counter lifetime ms
-- Returns {hold count, fencing token} when held by ARGV[2] afterwards, {0, pttl} otherwise.
-- Every redis.call costs Redis ~2 µs here, a tenth of a loopback round trip: keep them few.
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- Only a free -> held transition takes a new token, so a later holder always has a larger
  -- one. The counter expires ARGV[5] ms after it was made (one key per lock name would pile up
  -- forever otherwise); a new counter starts at the server time in µs, above anything the old
  -- one reached. Done before any write so a wrong-typed counter fails the script cleanly.
  local token = redis.call('INCR', KEYS[2])
  if token == 1 then
    local now = redis.call('TIME')
    token = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', ARGV[5])
  end
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
