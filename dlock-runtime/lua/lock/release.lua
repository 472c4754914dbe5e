-- Release one hold of a lock, at most once per request id.
-- KEYS[1] lock hash, KEYS[2] release channel, KEYS[3] latch for this request id, KEYS[4] the
-- owner's "done" latch: the answer of its last release (0: freed it, -1: held nothing), kept
-- instead of KEYS[3] so that acquire.lua refuses a late request of an owner that is done
-- ARGV[1] owner id, ARGV[2] lease in ms to refresh when holds remain (0: a hard lease, keep
-- its expiry), ARGV[3] latch lifetime ms
-- Returns -1 when ARGV[1] does not hold the lock, else the holds it has left; {0, listeners}
-- when this freed it, listeners being how many subscribers PUBLISH reached (the client skips
-- its courtesy pause when nobody else was listening). A retry answered from the latch returns
-- the bare count.
-- Every check comes before the first write: Redis does not roll a failed script back.
-- Cost: five calls when it frees the lock (EXISTS, HGET, DEL, SET, PUBLISH).
-- One EXISTS tells whether either latch is there: it answers a number, where reading them
-- (MGET) builds a Lua table on every release (measured with callgrind: 3k instructions more
-- of the release's 68k). Only a retry reads them.
if redis.call('EXISTS', KEYS[3], KEYS[4]) > 0 then
  -- MGET answers nil for a value of another type where GET would refuse it: the latches'
  -- names end in a random id, so no user value can sit there.
  local latches = redis.call('MGET', KEYS[3], KEYS[4])
  local done = latches[1] or latches[2]
  if done then
    -- A retry of a release that already ran (reply lost to a timeout or reconnect): answer
    -- the same thing again instead of releasing twice.
    return tonumber(done)
  end
end
local count = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(count) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
-- The first write is one that frees memory or takes none (DEL, PEXPIRE): Redis before 7.0
-- refuses a script on a full server (maxmemory) only at its first write, and only if that
-- write may take memory; on 7.0+ the library's allow-oom flag lets it run whatever the order.
-- The usual last hold is told by its text: no number is converted on that path (see
-- acquire.lua's cost note), and the latch gets the text '0'.
local n = 1
if count ~= '1' then
  n = tonumber(count) or 0
end
if n == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[4], '0', 'PX', ARGV[3])
  -- pcall: a user without rights on the channel (ACL) is refused the PUBLISH, but the lock is
  -- free all the same; -1 tells the client, which warns (waiters wake at the lease's end).
  local heard = redis.pcall('PUBLISH', KEYS[2], 'released')
  if type(heard) ~= 'number' then
    heard = -1
  end
  return {0, heard}
end
if n < 1 then
  -- Held nothing: an undo of an acquire that may still land (see acquire.lua).
  redis.call('SET', KEYS[4], '-1', 'PX', ARGV[3])
  return -1
end
local result = n - 1
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('SET', KEYS[3], result, 'PX', ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], result)
return result
