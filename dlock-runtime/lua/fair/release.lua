-- Release one hold of a fair lock, at most once per request id, handing a freed lock to the
-- head of the queue (after common.lua). Also how a waiter leaves the queue: an owner that
-- holds nothing is taken out of it.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] queue keep-alive, KEYS[4] fencing counter,
-- KEYS[5] release channel (nobody queued), KEYS[6] latch of this request id, KEYS[7] the
-- owner's "done" latch: the answer of its last release (0: freed it, -1: held nothing), kept
-- instead of KEYS[6] so that acquire.lua refuses a late request of an owner that is done
-- ARGV[1] owner id, ARGV[2] lease ms to refresh when holds remain (0: a hard lease),
-- ARGV[3] latch lifetime ms, ARGV[4] grant lifetime ms, ARGV[5] fencing counter lifetime ms
-- Returns -1 when ARGV[1] does not hold the lock, else the holds it has left (0 = freed).
-- Every check comes before the first write: Redis does not roll a failed script back. Each
-- key's type is checked by a read this script needs anyway, or by EXISTS finding it absent (a
-- handoff waits for this script: each TYPE call would cost it a command).
-- Cost: every redis.call is most of a script's server time. Freeing the lock with nobody
-- queued makes six: MGET, HGET, EXISTS, DEL, SET, PUBLISH; a partial release five: MGET, HGET,
-- PEXPIRE, SET, HSET.
local owner = ARGV[1]
-- Both latches and the counter in one MGET, which answers nil for a value of another type
-- where GET would refuse it: the latches' names end in random ids, so no user value sits
-- there, and the counter's type is told apart below.
local read = redis.call('MGET', KEYS[6], KEYS[7], KEYS[4])
local done = read[1] or read[2]
if done then
  -- A retry of a release that already ran (reply lost to a timeout or reconnect): answer the
  -- same thing again instead of releasing twice.
  return tonumber(done)
end
local count = redis.pcall('HGET', KEYS[1], owner)
local bad = failed(count, KEYS[1], 'hash', 'lock hash')
if bad then
  return bad
end
count = tonumber(count)
local result = -1
if count then
  result = count - 1
end

if result > 0 then
  -- Holds remain: the queue and the counter are not touched. The first write is one that
  -- takes no memory (Redis before 7.0 refuses a script on a full server at its first write
  -- only if that write may take memory).
  if tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  redis.call('SET', KEYS[6], result, 'PX', ARGV[3])
  redis.call('HSET', KEYS[1], owner, result)
  return result
end

local waiting
waiting, bad = queue_and_fence(read[3])
if bad then
  return bad
end
local queued, keeping = false, false
if waiting then
  queued = redis.pcall('ZSCORE', KEYS[2], owner)
  keeping = redis.pcall('ZSCORE', KEYS[3], owner)
  bad = failed(queued, KEYS[2], 'zset', 'fair queue')
    or failed(keeping, KEYS[3], 'zset', 'fair queue keep-alive')
  if bad then
    return bad
  end
end
if queued then
  redis.call('ZREM', KEYS[2], owner)
end
if keeping then
  redis.call('ZREM', KEYS[3], owner)
end
if result == 0 then
  redis.call('DEL', KEYS[1])
end
redis.call('SET', KEYS[7], result, 'PX', ARGV[3])
if result == 0 then
  if not (waiting and grant_next(tonumber(ARGV[4]), ARGV[5], read[3])) then
    redis.pcall('PUBLISH', KEYS[5], 'released')
  end
end
return result
