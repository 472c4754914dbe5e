-- Take every permit of a semaphore back, whoever holds them, and wake its waiters.
-- KEYS[1] holders, KEYS[2] permit count, KEYS[3] release channel
-- Returns 1 when permits were held, 0 when none was.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'zset' then
  -- Never delete somebody else's data that merely shares the key.
  return redis.error_reply('WRONGTYPE semaphore holders `' .. KEYS[1] .. '` holds a ' .. kind)
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.pcall('PUBLISH', KEYS[3], 'released')
return 1
