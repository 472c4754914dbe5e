-- Undo a fair lock's re-entry whose caller was cancelled before it saw the reply (after
-- common.lua); like lua/lock/undo_reentry.lua, but a freed lock goes to the queue's head.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] queue keep-alive, KEYS[4] fencing counter,
-- KEYS[5] release channel, KEYS[6] re-entry marker
-- ARGV[1] owner id, ARGV[2] grant lifetime ms, ARGV[3] fencing counter lifetime ms
-- Returns 1 when the re-entry was undone, 0 when there was none (its marker is gone).
-- Every check comes before the first write: Redis does not roll a failed script back. The
-- queue and the counter matter only if the undo frees the lock, and are checked only then.
-- Cost: three calls when holds remain (the usual case): HGET, DEL, HINCRBY.
local count = redis.pcall('HGET', KEYS[1], ARGV[1])
local bad = failed(count, KEYS[1], 'hash', 'lock hash')
if bad then
  return bad
end
count = tonumber(count)
local waiting, fence = false, false
if count and count <= 1 then
  fence = redis.call('MGET', KEYS[4])[1]
  waiting, bad = queue_and_fence(fence)
  if waiting and not bad then
    bad = failed(redis.pcall('ZCARD', KEYS[2]), KEYS[2], 'zset', 'fair queue')
      or failed(redis.pcall('ZCARD', KEYS[3]), KEYS[3], 'zset', 'fair queue keep-alive')
  end
  if bad then
    return bad
  end
end
if redis.call('DEL', KEYS[6]) == 1 and count then
  if count <= 1 then
    redis.call('DEL', KEYS[1])
    if not (waiting and grant_next(tonumber(ARGV[2]), ARGV[3], fence)) then
      redis.pcall('PUBLISH', KEYS[5], 'released')
    end
  else
    redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  end
  return 1
end
return 0
