-- Re-enter a lock in Redisson's RLock layout that an enclosing call of the same owner holds
-- (top-level acquires go to lock_acquire.lua).
-- KEYS[1] the lock hash, named as the lock itself: field '<uuid>:<thread id>' -> hold count,
-- its PTTL the lease; KEYS[2] re-entry marker (lets a cancelled re-entry be undone exactly
-- once: lock_undo_reentry.lua)
-- ARGV[1] lease ms, ARGV[2] the owner's field, ARGV[3] marker lifetime ms, ARGV[4] '1' to leave
-- the expiry alone (a hard lease ends where it was set)
-- Granted as Redisson grants it (tryLockInner): the key is missing or the field exists; then
-- the count goes up by one and the lease is set (unless hard).
-- Returns {hold count, 0} when the enclosing hold was still there (the holder knows its
-- token), {1, token} when it had been lost and the lock was free (a new free -> held
-- transition: the token is the server's clock in µs, as lock_acquire.lua's), {0, pttl} when
-- another owner holds it.
-- Every check comes before the first write: Redis does not roll a failed script back.
local held = false
if redis.call('EXISTS', KEYS[1]) == 1 then
  local field = redis.pcall('HEXISTS', KEYS[1], ARGV[2])
  if type(field) == 'table' then
    return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
  end
  if field == 0 then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  held = true
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if not (held and ARGV[4] == '1') then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
if held then
  return {count, 0}
end
local now = redis.call('TIME')
local us = now[2]
if #us < 6 then
  us = string.rep('0', 6 - #us) .. us
end
return {count, now[1] .. us}
