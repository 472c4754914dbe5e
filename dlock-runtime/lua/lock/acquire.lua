-- Acquire or re-enter a lock.
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] fencing counter, KEYS[3] re-entry marker,
-- KEYS[4] the owner's "done" latch (release.lua writes it with the owner's last release)
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] marker lifetime in ms,
-- ARGV[4] '1' when this is a re-entry of an enclosing hold, ARGV[5] fencing counter lifetime ms,
-- ARGV[6] '1' to leave the expiry alone on a re-entry (a hard lease ends where it was set)
-- Returns {hold count, fencing token} when held by ARGV[2] afterwards ({count, 0} for a
-- re-entry: the holder knows its token), {0, pttl} otherwise.
-- Every check comes before the first write: Redis does not roll a failed script back.
if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('EXISTS', KEYS[4]) == 1 then
    -- This owner gave its last hold back, or its undo found it holding nothing: this is a
    -- request of it that reached Redis late (it waited in a frozen connection while the
    -- client gave up and undid it over another). Granting it would leave the lock held by
    -- nobody until its lease ends.
    return {0, 1}
  end
  -- A free -> held transition: the token is max(last + 1, server time in µs). The clock term
  -- keeps tokens rising when the counter went back (Redis restored an older RDB or AOF, a
  -- replica that missed the last writes was promoted, the counter expired); the counter term
  -- keeps them rising within one µs or if the clock steps back a little.
  local last = redis.pcall('GET', KEYS[2])
  if type(last) == 'table' then
    return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-string value')
  end
  last = tonumber(last or '0')
  if not last then
    return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-number')
  end
  local now = redis.call('TIME')
  local token = math.max(last + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  -- The counter expires (one key per lock name would pile up forever); the clock term makes
  -- that harmless.
  redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', ARGV[5])
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
  end
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, token}
end
local held = redis.pcall('HEXISTS', KEYS[1], ARGV[2])
if type(held) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
if held == 1 and ARGV[4] ~= '1' then
  -- A top-level acquire finds its own (fresh) owner id already there: this is the same
  -- request run twice (a client re-sent it after a dropped connection). Answer as the first
  -- run did, changing nothing: the counter still holds the token that run handed out.
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if held == 1 then
  -- The marker lets a cancelled re-entry be undone exactly once (undo_reentry.lua).
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
  end
  local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  if ARGV[6] ~= '1' then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
  return {count, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
