-- Release one hold of a lock, at most once per request id.
-- KEYS[1] lock hash, KEYS[2] release channel, KEYS[3] latch for this request id
-- ARGV[1] owner id, ARGV[2] lease in ms to refresh when holds remain (0: a hard lease, keep
-- its expiry), ARGV[3] latch lifetime ms
-- Returns -1 when ARGV[1] does not hold the lock, else the holds it has left (0 = freed).
local done = redis.call('GET', KEYS[3])
if done then
  -- A retry of a release that already ran (reply lost to a timeout or reconnect): answer the
  -- same thing again instead of releasing twice.
  return tonumber(done)
end
local result
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not count then
  result = -1
else
  result = count - 1
  if result > 0 then
    redis.call('HSET', KEYS[1], ARGV[1], result)
    if tonumber(ARGV[2]) > 0 then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
  else
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', KEYS[2], 'released')
  end
end
redis.call('SET', KEYS[3], result, 'PX', ARGV[3])
return result
