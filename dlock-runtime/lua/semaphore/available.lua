-- How many permits of a semaphore are free right now (read only).
-- KEYS[1] holders (owner id -> deadline in server ms), KEYS[2] permit count
-- ARGV[1] the permit count the caller was built with
-- Returns the permits free (holders past their deadline count as free); the error
-- `ERR DLOCK_PERMITS <count>` when the semaphore is in use with another permit count.
-- Cost: three calls (TIME, GET, ZCOUNT); each key's type is checked by the read of it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stored = redis.pcall('GET', KEYS[2])
if type(stored) == 'table' then
  return redis.error_reply('WRONGTYPE semaphore permit count `' .. KEYS[2] .. '` holds a non-string value')
end
local live = redis.pcall('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if type(live) == 'table' then
  return redis.error_reply('WRONGTYPE semaphore holders `' .. KEYS[1] .. '` holds a non-sorted-set value')
end
local permits = tonumber(ARGV[1])
if live > 0 and stored and tonumber(stored) ~= permits then
  return redis.error_reply('ERR DLOCK_PERMITS ' .. stored)
end
return math.max(permits - live, 0)
