-- Give back one read hold of a lock in Redisson's RReadWriteLock layout (RedissonReadLock's
-- unlockInner, Redisson 3.24+ and 4.x), at most once per request id; or undo a cancelled
-- re-entry.
-- KEYS[1] the lock hash, KEYS[2] 'redisson_rwlock:{<name>}', KEYS[3] the owner's timeout prefix,
-- KEYS[4] the key prefix '{<name>}', KEYS[5] the unlock latch
-- 'redisson_unlock_latch:{<name>}:<request id>' (a release) or the re-entry marker (an undo)
-- ARGV[1] the owner's field, ARGV[2] latch lifetime ms, ARGV[3] 'PUBLISH' or 'SPUBLISH',
-- ARGV[4] 'latch' (a release) or 'marker' (an undo: only if the re-entry ran)
-- The lock goes when no hold with time left remains (and no writer); then Redisson's unlock
-- message '0'. Otherwise the hash lives as long as its longest remaining read hold.
-- Returns -1 when ARGV[1] holds no read, else its read holds left; {0, listeners} when this
-- freed the lock. The latch holds Redisson's 1 (freed) or 0.
local latch = ARGV[4] == 'latch'
local done = redis.pcall('GET', KEYS[5])
if type(done) == 'table' then
  return redis.error_reply('WRONGTYPE release latch `' .. KEYS[5] .. '` holds a non-string value')
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
if not latch and redis.call('DEL', KEYS[5]) == 0 then
  return -1
end
if mode == false then
  -- Nothing held: Redisson still publishes, so a waiter that missed a release wakes.
  redis.pcall(ARGV[3], KEYS[2], '0')
  if latch then
    redis.call('SET', KEYS[5], 1, 'PX', ARGV[2])
  end
  return -1
end
if not holds then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('DEL', KEYS[3] .. ':' .. (n + 1))
if redis.call('HLEN', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    local holds = tonumber(redis.call('HGET', KEYS[1], field))
    if holds then
      for i = holds, 1, -1 do
        longest = math.max(longest,
          redis.call('PTTL', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if longest > 0 or mode == 'write' then
    if longest > 0 then
      redis.call('PEXPIRE', KEYS[1], longest)
    end
    if latch then
      redis.call('SET', KEYS[5], 0, 'PX', ARGV[2])
    end
    return n
  end
end
redis.call('DEL', KEYS[1])
local heard = redis.pcall(ARGV[3], KEYS[2], '0')
if type(heard) ~= 'number' then
  heard = -1
end
if latch then
  redis.call('SET', KEYS[5], 1, 'PX', ARGV[2])
end
return {0, heard}
