-- Take or re-enter a lock in Redisson's RFencedLock layout (Redisson 3.24+ and 4.x): RLock's
-- hash plus the fencing counter.
-- KEYS[1] the lock hash, named as the lock itself: field '<uuid>:<thread id>' -> hold count,
-- its PTTL the lease; KEYS[2] RFencedLock's counter 'redisson_lock_token:{<name>}';
-- KEYS[3] re-entry marker (only written for a re-entry, ARGV[4] = '1')
-- ARGV[1] lease ms, ARGV[2] the owner's field, ARGV[3] marker lifetime ms, ARGV[4] '1' for a
-- re-entry of an enclosing hold, ARGV[5] '1' to leave the expiry alone on a re-entry (a hard
-- lease ends where it was set)
-- Granted as Redisson grants it (tryLockInner): the key is missing or the field exists; then
-- the counter is INCRemented as RFencedLock does on every grant (re-entries included), so Java
-- and Rust holders draw from one sequence, the count goes up by one and the lease is set.
-- The counter is never expired: Java's RFencedLock keeps counting from it, and an expired one
-- would start again at 1, below tokens already handed out.
-- Returns {hold count, token} when granted, {0, pttl} otherwise (where Redisson's script
-- answers nil or the PTTL).
-- Every check comes before the first write: Redis does not roll a failed script back.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a ' .. kind)
end
local last = redis.pcall('GET', KEYS[2])
if type(last) == 'table' then
  return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-string value')
end
if last and not tonumber(last) then
  return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-number')
end
local held = kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1
if kind == 'hash' and not held then
  return {0, redis.call('PTTL', KEYS[1])}
end
if held and ARGV[4] ~= '1' then
  -- A first acquire finds its own fresh field: the same request ran twice (re-sent after a
  -- dropped connection). Answer as the first run did, changing nothing.
  return {tonumber(redis.call('HGET', KEYS[1], ARGV[2])), tonumber(last or '0')}
end
local token = redis.call('INCR', KEYS[2])
if ARGV[4] == '1' then
  redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
end
local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if not (held and ARGV[5] == '1') then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {count, token}
