-- Delete one side of a lock in Redisson's RReadWriteLock layout whoever holds it (Redisson's
-- forceUnlock of RedissonReadLock / RedissonWriteLock): only if the lock is in that mode.
-- KEYS[1] the lock hash, KEYS[2] 'redisson_rwlock:{<name>}'
-- ARGV[1] 'read' or 'write', ARGV[2] the message ('0' for read, '1' for write),
-- ARGV[3] 'PUBLISH' or 'SPUBLISH'
-- Returns 1 when deleted, 0 otherwise.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind)
end
if redis.call('HGET', KEYS[1], 'mode') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[3], KEYS[2], ARGV[2])
return 1
