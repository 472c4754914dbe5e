-- Delete a read-write lock whoever holds it and wake its waiters.
-- KEYS[1] lock hash, KEYS[2] reader leases, KEYS[3] writer-waiting marker, KEYS[4] channel
-- Returns 1 when the lock was held, 0 when it was free.
-- Cost: HLEN, DEL, PUBLISH (HLEN checks the type, where TYPE's status reply would become a
-- Lua table).
local n = redis.pcall('HLEN', KEYS[1])
if type(n) == 'table' then
  -- Never delete somebody else's data that merely shares the key.
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
if n == 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.pcall('PUBLISH', KEYS[4], 'released')
return 1
