-- Give back one hold of a lock in Redisson's layout, at most once per request id (Redisson's
-- unlockInner, 3.24+ and 4.x).
-- KEYS[1] the lock hash, KEYS[2] 'redisson_lock__channel:{<name>}', KEYS[3] the unlock latch
-- 'redisson_unlock_latch:{<name>}:<request id>'
-- ARGV[1] the owner's field, ARGV[2] lease ms to set when holds remain (0: a hard lease, keep
-- its expiry), ARGV[3] latch lifetime ms, ARGV[4] 'PUBLISH', or 'SPUBLISH' on a cluster that has
-- sharded pub/sub (as Redisson's sharded-subscription mode AUTO does)
-- The latch holds what Redisson stores there: 1 when the release freed the lock, 0 when holds
-- remain. Freeing publishes Redisson's unlock message '0'.
-- Returns -1 when ARGV[1] holds nothing, the holds left when some remain, {0, listeners} when
-- this freed it (listeners: how many subscribers the message reached, -1 if it was refused);
-- a retry answered from the latch gets 0 (freed) or 1 (holds remained).
local done = redis.pcall('GET', KEYS[3])
if type(done) == 'table' then
  return redis.error_reply('WRONGTYPE release latch `' .. KEYS[3] .. '` holds a non-string value')
end
if done then
  if done == '1' then
    return 0
  end
  return 1
end
-- HGET reads the count and checks the type in one call; the last hold then needs no HINCRBY.
-- Cost: five calls when it frees the lock (GET, HGET, DEL, PUBLISH, SET).
local held = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(held) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
-- The usual last hold is told by its text: no number is converted on that path, and the
-- latch gets the text '1' (a Lua number would be printed with "%.17g": see
-- lock/acquire.lua's cost note).
if held ~= '1' then
  local count = tonumber(held)
  if not count then
    return -1
  end
  if count > 1 then
    local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
    if tonumber(ARGV[2]) > 0 then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    redis.call('SET', KEYS[3], '0', 'PX', ARGV[3])
    return left
  end
end
redis.call('DEL', KEYS[1])
-- pcall: an ACL user refused the channel still frees the lock; waiters then wake at its PTTL.
local heard = redis.pcall(ARGV[4], KEYS[2], '0')
if type(heard) ~= 'number' then
  heard = -1
end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
return {0, heard}
