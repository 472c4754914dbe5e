-- Take or re-enter a lock in Redisson's RLock layout (Redisson 3.24+ and 4.x).
-- KEYS[1] the lock hash, named as the lock itself: field '<uuid>:<thread id>' -> hold count,
-- its PTTL the lease; KEYS[2] re-entry marker (only written for a re-entry, ARGV[4] = '1')
-- ARGV[1] lease ms, ARGV[2] the owner's field, ARGV[3] marker lifetime ms, ARGV[4] '1' for a
-- re-entry of an enclosing hold, ARGV[5] '1' to leave the expiry alone on a re-entry (a hard
-- lease ends where it was set)
-- Granted as Redisson grants it (tryLockInner): the key is missing or the field exists; then
-- the count goes up by one and the lease is set. Nothing else is written: RLock keeps no
-- counter, and one kept here would be one key per lock name that nothing ever deletes.
-- The token of a new holder is the server's clock in µs, read, not stored; a re-entry gets 0
-- (the holder knows its token).
-- Returns {hold count, token} when granted, {0, pttl} otherwise (where Redisson's script
-- answers nil or the PTTL).
-- Every check comes before the first write: Redis does not roll a failed script back.
-- Cost: a free key takes four calls (EXISTS, TIME, HINCRBY, PEXPIRE), Redisson's three and the
-- clock; the type is checked by the HEXISTS a present key needs anyway.
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
local now = redis.call('TIME')
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
if held and ARGV[4] ~= '1' then
  -- A first acquire finds its own fresh field: the same request ran twice (re-sent after a
  -- dropped connection). Answer as a grant, changing nothing: the hold is still this one's,
  -- so any later holder reads a later clock.
  return {tonumber(redis.call('HGET', KEYS[1], ARGV[2])), clock}
end
if ARGV[4] == '1' then
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
end
local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if not (held and ARGV[5] == '1') then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
if held then
  return {count, 0}
end
return {count, clock}
