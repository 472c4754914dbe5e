-- Take or re-enter the read side of a lock in Redisson's RReadWriteLock layout (RedissonReadLock,
-- Redisson 3.24+ and 4.x).
-- KEYS[1] the lock hash, named as the lock: 'mode' -> 'read' | 'write', '<uuid>:<tid>' -> read
-- holds, '<uuid>:<tid>:write' -> write holds; KEYS[2] the owner's timeout prefix
-- '{<name>}:<uuid>:<tid>:rwlock_timeout' (hold n lives in '<prefix>:<n>' with its own lease);
-- KEYS[3] re-entry marker
-- ARGV[1] lease ms, ARGV[2] the owner's field, ARGV[3] the same owner's writer field,
-- ARGV[4] marker lifetime ms, ARGV[5] '1' for a re-entry (or a writer's own read: a downgrade)
-- Granted as Redisson grants it: free, read, or write held by this owner's writer. The hash
-- then lasts at least the lease. Nothing else is written: RReadWriteLock keeps no counter, and
-- one kept here would be one key per lock name that nothing ever deletes. The token is the
-- server's clock in µs, read, not stored (a writer's own read gets one after the writer's).
-- Returns {read holds of ARGV[2], token} when granted, {0, pttl} otherwise.
-- Every check comes before the first write: Redis does not roll a failed script back.
-- One HMGET reads both fields and checks the type (it refuses a non-hash).
local fields = redis.pcall('HMGET', KEYS[1], 'mode', ARGV[2])
if fields.err then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
local mode, count = fields[1], fields[2]
local now = redis.call('TIME')
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
if count and ARGV[5] ~= '1' then
  -- A first acquire finds its own fresh field: the same request ran twice. Answer as a grant,
  -- changing nothing.
  return {tonumber(count), clock}
end
if not (mode == false or mode == 'read'
    or (mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1)) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
redis.call('SET', KEYS[2] .. ':' .. n, 1, 'PX', ARGV[1])
if mode == false then
  -- A new hash: its expiry is this lease.
  redis.call('HSET', KEYS[1], 'mode', 'read')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
else
  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[1])))
end
if ARGV[5] == '1' then
  redis.call('SET', KEYS[3], 1, 'PX', ARGV[4])
end
return {n, clock}
