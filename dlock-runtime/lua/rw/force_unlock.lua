-- Delete a read-write lock whoever holds it and wake its waiters.
-- KEYS[1] lock hash, KEYS[2] reader leases, KEYS[3] writer-waiting marker, KEYS[4] channel
-- Returns 1 when the lock was held, 0 when it was free.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('DEL', KEYS[2], KEYS[3])
  return 0
end
if kind ~= 'hash' then
  -- Never delete somebody else's data that merely shares the key.
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.pcall('PUBLISH', KEYS[4], 'released')
return 1
