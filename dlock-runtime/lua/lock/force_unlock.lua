-- Delete a lock whoever holds it and wake its waiters.
-- KEYS[1] lock hash, KEYS[2] release channel
-- Returns 1 when a lock was deleted, 0 when it was free.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  -- Never delete somebody else's data that merely shares the key.
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind)
end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', KEYS[2], 'released')
return 1
