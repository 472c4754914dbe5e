-- Delete a Redisson-layout lock whoever holds it and wake its waiters (Redisson's
-- forceUnlock: DEL, then the unlock message '0').
-- KEYS[1] the lock hash, KEYS[2] its channel; ARGV[1] 'PUBLISH' or 'SPUBLISH'
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
redis.pcall(ARGV[1], KEYS[2], '0')
return 1
