-- Release one hold of a fair lock, at most once per request id, handing a freed lock to the
-- head of the queue (after common.lua). Also how a waiter leaves the queue: an owner that
-- holds nothing is taken out of it.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] queue keep-alive, KEYS[4] fencing counter,
-- KEYS[5] release channel (nobody queued), KEYS[6] latch of this request id
-- ARGV[1] owner id, ARGV[2] lease ms to refresh when holds remain (0: a hard lease),
-- ARGV[3] latch lifetime ms, ARGV[4] grant lifetime ms, ARGV[5] fencing counter lifetime ms
-- Returns -1 when ARGV[1] does not hold the lock, else the holds it has left (0 = freed).
local bad = checks() or check(KEYS[6], 'string', 'release latch')
if bad then
  return bad
end
local done = redis.call('GET', KEYS[6])
if done then
  return tonumber(done)
end
local owner = ARGV[1]
local count = tonumber(redis.call('HGET', KEYS[1], owner))
local result = -1
if count then
  result = count - 1
end
redis.call('SET', KEYS[6], result, 'PX', ARGV[3])
redis.call('ZREM', KEYS[2], owner)
redis.call('ZREM', KEYS[3], owner)
if result > 0 then
  redis.call('HSET', KEYS[1], owner, result)
  if tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
elseif result == 0 then
  redis.call('DEL', KEYS[1])
  if not grant_next(tonumber(ARGV[4]), ARGV[5]) then
    redis.pcall('PUBLISH', KEYS[5], 'released')
  end
end
return result
