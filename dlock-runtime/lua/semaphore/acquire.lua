-- Take one permit of a semaphore with expiring permits.
-- KEYS[1] holders (sorted set: owner id -> deadline, Redis server time in ms),
-- KEYS[2] permit count (a string beside it, same hash tag)
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] the permit count the caller was built with
-- Returns {1, 0} when ARGV[2] holds a permit afterwards; {0, ms until the earliest holder's
-- deadline} when every permit is taken (a waiter retries then, so a crashed holder's permit
-- is taken up without any release message); the error `ERR DLOCK_PERMITS <count>` when the
-- semaphore is in use with another permit count.
-- Deadlines are the server's TIME, never a client clock. Expired holders are pruned here (and
-- by every other writing script): a crashed holder's permit is free from its deadline on.
-- Both keys expire at the latest deadline; an idle semaphore leaves nothing behind.
-- Every check comes before the first write: Redis does not roll a failed script back.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'zset' then
  return redis.error_reply('WRONGTYPE semaphore holders `' .. KEYS[1] .. '` holds a ' .. kind)
end
local stored = redis.pcall('GET', KEYS[2])
if type(stored) == 'table' then
  return redis.error_reply('WRONGTYPE semaphore permit count `' .. KEYS[2] .. '` holds a non-string value')
end
if stored and not tonumber(stored) then
  return redis.error_reply('WRONGTYPE semaphore permit count `' .. KEYS[2] .. '` holds a non-number')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local permits = tonumber(ARGV[3])
-- Holders whose deadline is still ahead; the count only binds while there are any.
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if live > 0 and stored and tonumber(stored) ~= permits then
  return redis.error_reply('ERR DLOCK_PERMITS ' .. stored)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not mine and live >= permits then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - now, 1)}
end
-- A fresh owner id already present is this same request run twice (a client re-sent it after
-- a dropped connection): the same permit, its deadline set again.
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[1])), ARGV[2])
redis.call('SET', KEYS[2], permits)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
return {1, 0}
