-- Give back one write hold of a lock in Redisson's RReadWriteLock layout (RedissonWriteLock's
-- unlockInner, Redisson 3.24+ and 4.x), at most once per request id; or undo a cancelled
-- re-entry.
-- KEYS[1] the lock hash, KEYS[2] 'redisson_rwlock:{<name>}', KEYS[3] the unlock latch (a
-- release) or the re-entry marker (an undo)
-- ARGV[1] the writer field, ARGV[2] lease ms to set when holds remain (0: a hard lease),
-- ARGV[3] latch lifetime ms, ARGV[4] 'PUBLISH' or 'SPUBLISH', ARGV[5] 'latch' or 'marker'
-- The last write hold frees the lock with Redisson's message '1' (every waiter wakes: readers
-- may all enter), or, when the same owner still reads (a downgrade), turns it to 'read'.
-- Returns -1 when ARGV[1] holds no write, else the holds left; {0, listeners} when freed.
local latch = ARGV[5] == 'latch'
local done = redis.pcall('GET', KEYS[3])
if type(done) == 'table' then
  return redis.error_reply('WRONGTYPE release latch `' .. KEYS[3] .. '` holds a non-string value')
end
if latch and done then
  if done == '1' then
    return 0
  end
  return 1
end
-- One HMGET reads the mode and this owner's holds and checks the type (it refuses a
-- non-hash), before the first write.
local fields = redis.pcall('HMGET', KEYS[1], 'mode', ARGV[1])
if fields.err then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
local mode, holds = fields[1], fields[2]
if not latch and redis.call('DEL', KEYS[3]) == 0 then
  return -1
end
if mode == false then
  redis.pcall(ARGV[4], KEYS[2], '1')
  if latch then
    redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
  end
  return -1
end
if mode ~= 'write' or not holds then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then
  if tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  if latch then
    redis.call('SET', KEYS[3], 0, 'PX', ARGV[3])
  end
  return n
end
redis.call('HDEL', KEYS[1], ARGV[1])
local result = 0
if redis.call('HLEN', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
  local heard = redis.pcall(ARGV[4], KEYS[2], '1')
  if type(heard) ~= 'number' then
    heard = -1
  end
  result = {0, heard}
else
  -- The writer's own reads remain (a downgrade): the lock is read now.
  redis.call('HSET', KEYS[1], 'mode', 'read')
end
if latch then
  redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
end
return result
