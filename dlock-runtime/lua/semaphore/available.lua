-- How many permits of a semaphore are free right now (read only).
-- KEYS[1] holders (owner id -> deadline in server ms), KEYS[2] permit count
-- ARGV[1] the permit count the caller was built with
-- Returns the permits free (holders past their deadline count as free); the error
-- `ERR DLOCK_PERMITS <count>` when the semaphore is in use with another permit count.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'zset' then
  return redis.error_reply('WRONGTYPE semaphore holders `' .. KEYS[1] .. '` holds a ' .. kind)
end
local stored = redis.pcall('GET', KEYS[2])
if type(stored) == 'table' then
  return redis.error_reply('WRONGTYPE semaphore permit count `' .. KEYS[2] .. '` holds a non-string value')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local permits = tonumber(ARGV[1])
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if live > 0 and stored and tonumber(stored) ~= permits then
  return redis.error_reply('ERR DLOCK_PERMITS ' .. stored)
end
return math.max(permits - live, 0)
