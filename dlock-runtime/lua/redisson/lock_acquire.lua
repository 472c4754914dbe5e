-- Take a lock in Redisson's RLock layout (Redisson 3.24+ and 4.x) for a new owner (a
-- top-level acquire; re-entries go to lock_reenter.lua, which carries the marker and the
-- hard-lease flag this path never needs).
-- KEYS[1] the lock hash, named as the lock itself: field '<uuid>:<thread id>' -> hold count,
-- its PTTL the lease
-- ARGV[1] lease ms, ARGV[2] the owner's field
-- Granted as Redisson grants it (tryLockInner): the key is missing (or the field exists, see
-- below); then the count is one and the lease is set. Nothing else is written: RLock keeps no
-- counter, and one kept here would be one key per lock name that nothing ever deletes.
-- The token of a new holder is the server's clock in µs, read, not stored, and kept as text
-- (no number conversion: see lock/acquire.lua's cost note).
-- Returns {1, token} when granted, {0, pttl} otherwise (where Redisson's script answers nil or
-- the PTTL).
-- Every check comes before the first write: Redis does not roll a failed script back.
-- Cost: a free key takes four calls (EXISTS, TIME, HSET, PEXPIRE), Redisson's three and the
-- clock; the type is checked by the HGET a present key needs anyway.
local function clock()
  local now = redis.call('TIME')
  local us = now[2]
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  return now[1] .. us
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- HSET of a missing hash writes what Redisson's HINCRBY writes there: the field at 1.
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, clock()}
end
local count = redis.pcall('HGET', KEYS[1], ARGV[2])
if type(count) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
if not count then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- A first acquire finds its own fresh field: the same request ran twice (re-sent after a
-- dropped connection). Answer as a grant, changing nothing: the hold is still this one's, so
-- any later holder reads a later clock.
return {count, clock()}
