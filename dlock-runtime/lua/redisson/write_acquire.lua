-- Take or re-enter the write side of a lock in Redisson's RReadWriteLock layout
-- (RedissonWriteLock, Redisson 3.24+ and 4.x).
-- KEYS[1] the lock hash ('mode' -> 'write', '<uuid>:<tid>:write' -> holds), KEYS[2] re-entry
-- marker
-- ARGV[1] lease ms, ARGV[2] the writer field '<uuid>:<tid>:write', ARGV[3] marker lifetime ms,
-- ARGV[4] '1' for a re-entry, ARGV[5] '1' to leave the expiry alone on a re-entry (hard lease)
-- Granted as Redisson grants it: free, or write held by this writer (a re-entry adds the lease
-- to the time left, as Redisson does). Nothing else is written: RReadWriteLock keeps no
-- counter. The token of a new writer is the server's clock in µs, read, not stored; a
-- re-entry gets 0 (the enclosing hold's token stands).
-- Returns {holds, token} when granted, {0, pttl} otherwise.
-- HGET refuses a non-hash: the type check costs no call of its own.
local mode = redis.pcall('HGET', KEYS[1], 'mode')
if type(mode) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
local now = redis.call('TIME')
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
  end
  return {1, clock}
end
local count = redis.call('HGET', KEYS[1], ARGV[2])
if mode == 'write' and count then
  if ARGV[4] ~= '1' then
    -- The same first request ran twice: answer as a grant, changing nothing.
    return {tonumber(count), clock}
  end
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  if ARGV[5] ~= '1' then
    redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[1]) + tonumber(ARGV[1]))
  end
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
  return {n, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
