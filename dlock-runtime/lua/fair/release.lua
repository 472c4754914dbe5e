-- Release one hold of a fair lock, at most once per request id, handing a freed lock to the
-- head of the queue (after common.lua). Also how a waiter leaves the queue: an owner that
-- holds nothing is taken out of it.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] queue keep-alive, KEYS[4] fencing counter,
-- KEYS[5] release channel (nobody queued), KEYS[6] latch of this request id
-- ARGV[1] owner id, ARGV[2] lease ms to refresh when holds remain (0: a hard lease),
-- ARGV[3] latch lifetime ms, ARGV[4] grant lifetime ms, ARGV[5] fencing counter lifetime ms
-- Returns -1 when ARGV[1] does not hold the lock, else the holds it has left (0 = freed).
-- Every key's type is checked by a read this script needs anyway, before the first write (a
-- handoff waits for this script: each TYPE call would cost it a command).
local owner = ARGV[1]
local done = redis.pcall('GET', KEYS[6])
local count = redis.pcall('HGET', KEYS[1], owner)
local queued = redis.pcall('ZSCORE', KEYS[2], owner)
local keeping = redis.pcall('ZSCORE', KEYS[3], owner)
local fence = redis.pcall('GET', KEYS[4])
local bad = failed(done, KEYS[6], 'string', 'release latch')
  or failed(count, KEYS[1], 'hash', 'lock hash')
  or failed(queued, KEYS[2], 'zset', 'fair queue')
  or failed(keeping, KEYS[3], 'zset', 'fair queue keep-alive')
  or failed(fence, KEYS[4], 'string', 'fencing counter')
if bad then
  return bad
end
if done then
  return tonumber(done)
end
count = tonumber(count)
local result = -1
if count then
  result = count - 1
end
redis.call('SET', KEYS[6], result, 'PX', ARGV[3])
if queued then
  redis.call('ZREM', KEYS[2], owner)
end
if keeping then
  redis.call('ZREM', KEYS[3], owner)
end
if result > 0 then
  redis.call('HSET', KEYS[1], owner, result)
  if tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
elseif result == 0 then
  redis.call('DEL', KEYS[1])
  if not grant_next(tonumber(ARGV[4]), ARGV[5], fence) then
    redis.pcall('PUBLISH', KEYS[5], 'released')
  end
end
return result
