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
-- Every check comes before the first write: Redis does not roll a failed script back. INCR is
-- the counter's check and its write at once: it refuses a non-integer or a non-string without
-- writing. Cost: a free key takes four calls (EXISTS, INCR, HINCRBY, PEXPIRE).
local present = redis.call('EXISTS', KEYS[1]) == 1
local held = false
if present then
  local field = redis.pcall('HEXISTS', KEYS[1], ARGV[2])
  if type(field) == 'table' then
    return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
  end
  if field == 0 then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  held = true
end
if held and ARGV[4] ~= '1' then
  -- A first acquire finds its own fresh field: the same request ran twice (re-sent after a
  -- dropped connection). Answer as the first run did, changing nothing.
  local last = redis.pcall('GET', KEYS[2])
  if type(last) ~= 'string' then
    last = '0'
  end
  return {tonumber(redis.call('HGET', KEYS[1], ARGV[2])), tonumber(last) or 0}
end
local token = redis.pcall('INCR', KEYS[2])
if type(token) == 'table' then
  if string.find(token.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-string value')
  end
  if string.find(token.err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-number')
  end
  return token
end
if ARGV[4] == '1' then
  redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
end
local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if not (held and ARGV[5] == '1') then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {count, token}
