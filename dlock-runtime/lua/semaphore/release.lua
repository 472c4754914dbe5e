-- Give back one permit of a semaphore, at most once per request id.
-- KEYS[1] holders (owner id -> deadline in server ms), KEYS[2] permit count,
-- KEYS[3] release channel, KEYS[4] latch for this request id
-- ARGV[1] owner id, ARGV[2] latch lifetime ms
-- Returns -1 when ARGV[1] holds no permit (never granted, given back, or past its deadline:
-- then it may already be someone else's), 0 when it gave one back.
-- Publishes once, and only when a permit was freed.
-- Every check comes before the first write: Redis does not roll a failed script back.
local done = redis.pcall('GET', KEYS[4])
if type(done) == 'table' then
  return redis.error_reply('WRONGTYPE release latch `' .. KEYS[4] .. '` holds a non-string value')
end
if done then
  -- A retry of a release that already ran (reply lost to a timeout or reconnect): answer the
  -- same thing again instead of releasing twice.
  return tonumber(done)
end
local deadline = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(deadline) == 'table' then
  return redis.error_reply('WRONGTYPE semaphore holders `' .. KEYS[1] .. '` holds a non-sorted-set value')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local result = -1
if deadline and tonumber(deadline) > now then
  result = 0
end
redis.call('SET', KEYS[4], result, 'PX', ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if result == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.pcall('PUBLISH', KEYS[3], 'released')
end
-- The sorted set is gone with its last member; the count goes with it.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
return result
