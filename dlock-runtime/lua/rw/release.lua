-- Give back one hold of one side of a read-write lock, or undo a cancelled re-entry.
-- KEYS[1] lock hash, KEYS[2] reader leases, KEYS[3] writer-waiting marker, KEYS[4] release
-- channel, KEYS[5] the latch of this request id (a release) or the re-entry marker (an undo)
-- ARGV[1] side 'r' | 'w', ARGV[2] owner id, ARGV[3] lease ms to refresh when holds remain (0:
-- a hard lease), ARGV[4] latch lifetime ms, ARGV[5] 'latch' (a release: at most once per
-- request id) or 'marker' (an undo: only if the re-entry's marker says it ran)
-- Returns -1 when ARGV[2] holds no such side (or, for an undo, the re-entry never ran), else
-- the holds it has left on that side.
-- Every check comes before the first write: Redis does not roll a failed script back.
local function check(key, want, role)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE ' .. role .. ' `' .. key .. '` holds a ' .. t)
  end
end
local bad = check(KEYS[1], 'hash', 'lock hash') or check(KEYS[2], 'zset', 'reader leases')
  or check(KEYS[3], 'string', 'writer-waiting marker') or check(KEYS[5], 'string', 'release latch')
if bad then
  return bad
end
local side, owner, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
if ARGV[5] == 'latch' then
  local done = redis.call('GET', KEYS[5])
  if done then
    -- A retry of a release that already ran: the same answer, nothing released twice.
    return tonumber(done)
  end
elseif redis.call('DEL', KEYS[5]) == 0 then
  return -1
end

local field = side .. ':' .. owner
-- A writer that leaves (or gives up: the clean-up of a refused attempt lands here too) stops
-- keeping new readers out.
if side == 'w' and redis.call('GET', KEYS[3]) == owner then
  redis.call('DEL', KEYS[3])
  if redis.call('HGET', KEYS[1], 'mode') ~= 'write' then
    -- It gave up without the lock: the readers its claim kept out may go now, not when the
    -- claim would have expired.
    redis.pcall('PUBLISH', KEYS[4], 'released')
  end
end
local count = tonumber(redis.call('HGET', KEYS[1], field))
local result = -1
if count then
  result = count - 1
end
if ARGV[5] == 'latch' then
  redis.call('SET', KEYS[5], result, 'PX', ARGV[4])
end
if result < 0 then
  return result
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if result > 0 then
  redis.call('HSET', KEYS[1], field, result)
  if lease > 0 then
    if side == 'r' then
      -- GT: the holds left may have longer deadlines than this one's lease.
      redis.call('ZADD', KEYS[2], 'GT', now + lease, owner)
    end
    if redis.call('PTTL', KEYS[1]) < lease then
      redis.call('PEXPIRE', KEYS[1], lease)
    end
  end
  return result
end

redis.call('HDEL', KEYS[1], field)
if side == 'r' then
  redis.call('ZREM', KEYS[2], owner)
end
local mode = redis.call('HGET', KEYS[1], 'mode')
if redis.call('HLEN', KEYS[1]) <= 1 then
  -- Nobody left inside: free, and one message wakes the waiters (a writer, or readers).
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.pcall('PUBLISH', KEYS[4], 'released')
elseif side == 'w' and mode == 'write' then
  -- The writer leaves while it still reads (a downgrade): the lock turns read, lasting as long
  -- as the longest reader lease, and waiting readers may join.
  redis.call('HSET', KEYS[1], 'mode', 'read')
  local longest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if longest[2] then
    redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(longest[2]) - now))
  end
  redis.pcall('PUBLISH', KEYS[4], 'released')
end
-- A reader leaving while others read (or while its own writer holds) wakes nobody.
return 0
