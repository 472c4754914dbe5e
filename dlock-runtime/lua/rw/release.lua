-- Give back one hold of one side of a read-write lock, or undo a cancelled re-entry.
-- KEYS[1] lock hash, KEYS[2] reader leases, KEYS[3] writer-waiting marker, KEYS[4] release
-- channel, KEYS[5] the latch of this request id (a release) or the re-entry marker (an undo),
-- KEYS[6] the owner's "done" latch for this side: a release that leaves the owner no hold of
-- the side, or finds none, writes it beside its own latch, and acquire.lua refuses a top-level
-- request of that owner that reaches Redis after it (one the client gave up on and undid)
-- ARGV[1] side 'r' | 'w', ARGV[2] owner id, ARGV[3] lease ms to refresh when holds remain (0:
-- a hard lease), ARGV[4] latch lifetime ms, ARGV[5] 'latch' (a release: at most once per
-- request id) or 'marker' (an undo: only if the re-entry's marker says it ran)
-- Returns -1 when ARGV[2] holds no such side (or, for an undo, the re-entry never ran), else
-- the holds it has left on that side.
-- Every check comes before the first write (Redis does not roll a failed script back). The
-- types are checked by the reads each path needs anyway (a read of a key of another type
-- fails, and pcall catches it), or by a path's first write, which then writes nothing.
-- Cost: each redis.call is most of a script's server time. The usual paths:
--   a writer's last hold: GET, HMGET, DEL, SET, SET, PUBLISH (6)
--   a reader's last hold: GET, HMGET, HLEN, ZREM, DEL, SET, SET, PUBLISH (8); with other
--     readers left, HDEL for DEL and no PUBLISH (7)
--   a writer's re-entry: GET, HMGET, PEXPIRE, SET, HSET (5); a reader's: TIME, ZADD too (7)
--   Before Redis 7.0 a reader's PEXPIRE needs a PTTL first (its expiry only moves out).
-- The latch's name ends in the request's random id, but a value of another type there is
-- still refused rather than overwritten (GET, not MGET with the done latch). The done latch is
-- only written here, never read: an owner's reads inside one write scope end and start again
-- under the same owner id, so a release answered from it could answer for another hold.

local side, owner, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local field = side .. ':' .. owner
local latch = ARGV[5] == 'latch'

local function wrong(role, key, what)
  return redis.error_reply('WRONGTYPE ' .. role .. ' `' .. key .. '` holds ' .. what)
end

-- The reply for a write refused by pcall: a wrong type names the key; any other refusal (OOM
-- on a full Redis before 7.0) is passed on as it is. Either way nothing was written.
local function refused(e, role, key, what)
  if string.find(e.err, 'WRONGTYPE', 1, true) then
    return wrong(role, key, what)
  end
  return redis.error_reply(e.err)
end

if latch then
  local answered = redis.pcall('GET', KEYS[5])
  if type(answered) == 'table' then
    return wrong('release latch', KEYS[5], 'a non-string value')
  end
  if answered then
    -- A retry of a release that already ran: the same answer, nothing released twice.
    return tonumber(answered)
  end
elseif redis.call('EXISTS', KEYS[5]) == 0 then
  return -1
end
-- A writer also asks for its own read hold: inside a write hold there is nobody else.
local got = redis.pcall('HMGET', KEYS[1], 'mode', field, 'r:' .. owner)
if got.err then
  return wrong('lock hash', KEYS[1], 'a non-hash value')
end
local mode, count, reads = got[1], tonumber(got[2]), side == 'w' and got[3]
local result = -1
if count then
  result = count - 1
end

-- Written once the path's checks are done: the request's answer (an undo instead takes its
-- marker, so it runs at most once).
local function answer()
  if not latch then
    redis.call('DEL', KEYS[5])
  elseif result > 0 then
    redis.call('SET', KEYS[5], result, 'PX', ARGV[4])
  else
    redis.call('SET', KEYS[5], result, 'PX', ARGV[4])
    redis.call('SET', KEYS[6], result, 'PX', ARGV[4])
  end
end

if result < 0 then
  local waiting = false
  if side == 'w' then
    -- A writer that gives up (the clean-up of a refused attempt lands here) stops keeping new
    -- readers out. A writer that holds has no claim: it dropped it when it got in.
    waiting = redis.pcall('GET', KEYS[3])
    if type(waiting) == 'table' then
      return wrong('writer-waiting marker', KEYS[3], 'a non-string value')
    end
  end
  answer()
  if waiting == owner then
    redis.call('DEL', KEYS[3])
    if mode ~= 'write' then
      -- It gave up without the lock: the readers its claim kept out may go now, not when the
      -- claim would have expired.
      redis.pcall('PUBLISH', KEYS[4], 'released')
    end
  end
  return result
end

if result > 0 then
  if lease > 0 and side == 'r' then
    -- GT: the holds left may have longer deadlines than this one's lease. The first write:
    -- refused (another type), it writes nothing.
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local moved = redis.pcall('ZADD', KEYS[2], 'GT', now + lease, owner)
    if type(moved) == 'table' then
      return refused(moved, 'reader leases', KEYS[2], 'a non-zset value')
    end
  end
  if lease > 0 and side == 'w' and not reads then
    -- A writer alone inside: the expiry is its lease's, as on a plain lock.
    redis.call('PEXPIRE', KEYS[1], lease)
  elseif lease > 0 then
    -- The expiry only moves out: it covers everyone inside. Redis 7+ (and Valkey, which
    -- reports 7.2.4) does it in one call; GT leaves a key without an expiry alone, so one that
    -- did not move is looked at again.
    local gt = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000
    if not (gt and redis.call('PEXPIRE', KEYS[1], lease, 'GT') == 1) and redis.call('PTTL', KEYS[1]) < lease then
      redis.call('PEXPIRE', KEYS[1], lease)
    end
  end
  answer()
  redis.call('HSET', KEYS[1], field, result)
  return result
end

-- The owner's last hold of this side. Who else is inside: besides 'mode' and this field, a
-- writer's own reads, or (for a reader) anyone's.
local others
if side == 'w' then
  others = reads and 1 or 0
else
  others = redis.call('HLEN', KEYS[1]) - 2
end
local longest
if side == 'r' then
  -- The first write: refused (another type), it writes nothing.
  local removed = redis.pcall('ZREM', KEYS[2], owner)
  if type(removed) == 'table' then
    return refused(removed, 'reader leases', KEYS[2], 'a non-zset value')
  end
elseif others > 0 and mode == 'write' then
  longest = redis.pcall('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if longest.err then
    return wrong('reader leases', KEYS[2], 'a non-zset value')
  end
end
if others <= 0 then
  -- Nobody left inside: free, and one message wakes the waiters (a writer, or readers). The
  -- reader leases were checked by ZREM before they are deleted; after a writer there are none
  -- to delete (expired ones may linger until their own expiry).
  if side == 'r' then
    redis.call('DEL', KEYS[1], KEYS[2])
  else
    redis.call('DEL', KEYS[1])
  end
  answer()
  redis.pcall('PUBLISH', KEYS[4], 'released')
  return 0
end
redis.call('HDEL', KEYS[1], field)
answer()
if longest then
  -- The writer leaves while it still reads (a downgrade): the lock turns read, lasting as long
  -- as the longest reader lease, and waiting readers may join.
  redis.call('HSET', KEYS[1], 'mode', 'read')
  if longest[2] then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(longest[2]) - now))
  end
  redis.pcall('PUBLISH', KEYS[4], 'released')
end
-- A reader leaving while others read (or while its own writer holds) wakes nobody.
return 0
