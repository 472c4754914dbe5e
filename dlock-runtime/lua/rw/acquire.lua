-- Take (or re-enter) one side of a read-write lock.
-- KEYS[1] lock hash: 'mode' -> 'read' | 'write', 'w:<owner>' -> write holds, 'r:<owner>' -> read
--   holds; its PTTL covers the longest lease of anyone inside
-- KEYS[2] reader leases: zset owner -> deadline (server ms); each reader expires on its own
-- KEYS[3] writer-waiting marker: the owner of the first writer refused; new readers queue
--   behind it until it gets in or the marker expires
-- KEYS[4] the fencing counter of the lock's cluster slot (shared by every lock in that slot),
-- KEYS[5] re-entry marker, KEYS[6] the owner's "done" latch for this
--   side (release.lua writes it when it leaves the owner no hold of the side, or finds none)
-- ARGV[1] side 'r' | 'w', ARGV[2] owner id, ARGV[3] lease ms, ARGV[4] '1' for a re-entry of an
-- enclosing hold or a writer's own read (a downgrade; one more hold if it already reads):
-- KEYS[5] is then set whenever a hold is granted, so an undo can tell, ARGV[5] marker
-- lifetime ms, ARGV[6] fencing counter lifetime ms,
-- ARGV[7] '1' to leave leases alone on a re-entry of the same hold (a hard lease; a writer's
-- read is a hold of its own and sends '0'), ARGV[8] writer-waiting
-- marker lifetime ms
-- Returns {holds, token} when ARGV[2] holds the side afterwards (token 0 for a re-entry and for
-- a writer's own read: the client keeps the enclosing hold's; a new one for a reader joining
-- others), {0, ms to wait} otherwise
-- ({0, 1} for a top-level request of an owner that is done: it reached Redis late, after the
-- client gave up and undid it).
-- Every check comes before the first write (Redis does not roll a failed script back). The
-- types are checked by the reads each path needs anyway (a read of a key of another type
-- fails, and pcall catches it), the fencing counter's by SET .. GET as it writes (see below).
-- Cost: each redis.call is most of a script's server time. The usual paths:
--   a free lock, top-level: EXISTS, TIME, SET .. GET, HSET, PEXPIRE (5); a reader also ZADD,
--     PEXPIRE (7); a writer that waited for readers also HMGET, GET, DEL (8)
--   a writer's re-entry: HMGET, SET, HSET, PEXPIRE (4)
--   a reader's re-entry: HMGET, TIME, ZRANGEBYSCORE, SET, HSET, ZADD, PEXPIRE, PEXPIRE (8)
--   a reader joining readers: EXISTS, HMGET, TIME, ZRANGEBYSCORE, GET, SET .. GET, HSET, ZADD,
--     PEXPIRE, PEXPIRE (10)
--   a writer refused by a writer: EXISTS, HMGET, GET, SET, PTTL (5; by readers, TIME and
--     ZRANGEBYSCORE too)
--   Before Redis 7.0 a PEXPIRE that must only move an expiry out needs a PTTL first.

local side, owner, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local field = side .. ':' .. owner
local nested = ARGV[4] == '1'

local function wrong(role, key, what)
  return redis.error_reply('WRONGTYPE ' .. role .. ' `' .. key .. '` holds ' .. what)
end

-- The writer-waiting marker (false: none), or nil and an error.
local function marker()
  local w = redis.pcall('GET', KEYS[3])
  if type(w) == 'table' then
    return nil, wrong('writer-waiting marker', KEYS[3], 'a non-string value')
  end
  return w
end

-- The last token handed out, or nil and an error.
local function last_token()
  local last = redis.pcall('GET', KEYS[4])
  if type(last) == 'table' then
    if string.find(last.err, 'WRONGTYPE', 1, true) then
      return nil, wrong('fencing counter', KEYS[4], 'a non-string value')
    end
    -- Refused for another reason (OOM on a full Redis before 7.0): nothing was written.
    return nil, redis.error_reply(last.err)
  end
  local n = tonumber(last or '0')
  if not n then
    return nil, wrong('fencing counter', KEYS[4], 'a non-number')
  end
  return n
end

-- A new token, written: max(last + 1, server time in µs), as lua/lock/acquire.lua makes it (the
-- clock term keeps tokens rising when the counter went back, the counter term within one µs).
-- Returns it, or nil and an error; this is the first write of any path that calls it.
local function next_token(t)
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- The clock term wins unless the clock went back, so it is written first and the last token
  -- read in the same call; a counter that was ahead is then written again, once. SET .. GET
  -- refuses a value of another type without writing. A Lua number goes to Redis as its integer
  -- digits (exact below 2^53; a µs clock is near 2^51).
  local last = redis.pcall('SET', KEYS[4], token, 'PX', ARGV[6], 'GET')
  if type(last) == 'table' then
    if string.find(last.err, 'WRONGTYPE', 1, true) then
      return nil, wrong('fencing counter', KEYS[4], 'a non-string value')
    end
    -- Refused for another reason (OOM on a full Redis before 7.0): nothing was written.
    return nil, redis.error_reply(last.err)
  end
  if last then
    local n = tonumber(last)
    if not n then
      -- Not a counter: put the string back (its expiry, if it had one, is not restored).
      redis.call('SET', KEYS[4], last)
      return nil, wrong('fencing counter', KEYS[4], 'a non-number')
    end
    if n >= token then
      token = n + 1
      redis.call('SET', KEYS[4], token, 'PX', ARGV[6])
    end
  end
  return token
end

-- A key's expiry only ever moves out here: it covers everyone inside. Redis 7+ (and Valkey,
-- which reports 7.2.4) does it in one call; GT leaves a key without an expiry alone, so one that
-- did not move is looked at again.
local gt = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000
local function extend(key, ms)
  if gt and redis.call('PEXPIRE', key, ms, 'GT') == 1 then
    return
  end
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- The hash's mode, this owner's holds of this side, and of the other side (a reader's own
-- write hold makes its read a downgrade; a writer without reads of its own is alone inside).
local mode, count, sibling = false, false, false
local done = false -- a top-level request of an owner that is done (see below)
local present -- what EXISTS counted (top-level requests)
local function read_hash()
  local other = (side == 'r' and 'w:' or 'r:') .. owner
  local got = redis.pcall('HMGET', KEYS[1], 'mode', field, other)
  if got.err then
    return wrong('lock hash', KEYS[1], 'a non-hash value')
  end
  mode, count, sibling = got[1], got[2], got[3]
end
if nested then
  -- A re-entry, or a writer's read: its enclosing hold is (normally) there.
  local bad = read_hash()
  if bad then
    return bad
  end
else
  -- One call for the lock hash, reader leases, writer-waiting marker and done latch (they share
  -- a hash slot): EXISTS counts a key once per mention, so the latch, named four times, is
  -- told apart from the other three. Usually it says 0: a free lock, nobody waiting, and
  -- nothing of another type under any key this acquire writes.
  present = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[6], KEYS[6], KEYS[6], KEYS[6])
  done = present >= 4
  present = present % 4
  if present > 0 then
    local bad = read_hash()
    if bad then
      return bad
    end
  end
end

local t, now
local waiting -- the writer-waiting marker once read (false: none)
local err
if mode and (side == 'r' or mode == 'read') then
  -- Readers whose lease ran out (their process died) leave, before anything is decided: the
  -- last one frees the lock, and the asker may be one. Not needed by a writer beside a writer
  -- (readers inside then are that writer's own reads).
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local expired = redis.pcall('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  if expired.err then
    return wrong('reader leases', KEYS[2], 'a non-zset value')
  end
  if #expired > 0 then
    -- The sweep writes: the keys the rest may write are checked first (a rare path).
    waiting, err = marker()
    if err then
      return err
    end
    local _, bad = last_token()
    if bad then
      return bad
    end
    for _, o in ipairs(expired) do
      redis.call('HDEL', KEYS[1], 'r:' .. o)
      if side == 'r' and o == owner then
        count = false
      end
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    if mode == 'read' and redis.call('HLEN', KEYS[1]) == 1 then
      redis.call('DEL', KEYS[1])
      mode = false
    end
  end
end

if not mode then
  if not nested and done then
    -- This owner gave its last hold of the side back, or its undo found it holding nothing:
    -- this is a request of it that reached Redis late (it waited in a frozen connection while
    -- the client gave up and undid it over another). Granting it would leave the lock held by
    -- nobody until its lease ends.
    return {0, 1}
  end
  if waiting == nil and present == 0 then
    waiting = false
  elseif waiting == nil then
    waiting, err = marker()
    if err then
      return err
    end
  end
  if side == 'r' and waiting then
    -- Free, but only because the readers a waiting writer waited for have left: the lock is
    -- that writer's next (it was woken by the last one's release). A reader asking now, often
    -- the one that just left, queues behind it like any new reader; it retries when the claim
    -- ends at the latest (the writer's release, or its giving up, publishes before then).
    return {0, redis.call('PTTL', KEYS[3])}
  end
  -- Unless EXISTS said otherwise, the reader leases may be there (leases that outlived the
  -- hash by a moment, or another type), or a hash without a mode (not dlock's): a rare path.
  local stale = false
  if not t then
    stale = nested or present > (waiting and 1 or 0)
    -- Without a hash they hold nothing live (the hash outlives every reader's deadline), so
    -- nothing is swept; only their type is checked.
    if stale and type(redis.pcall('ZCARD', KEYS[2])) == 'table' then
      return wrong('reader leases', KEYS[2], 'a non-zset value')
    end
    t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local token
  token, err = next_token(t)
  if err then
    return err
  end
  if stale then
    -- A hash without a mode goes (if there is one).
    redis.call('DEL', KEYS[1])
  end
  if nested then
    redis.call('SET', KEYS[5], 1, 'PX', ARGV[5])
  end
  -- The hash is new: its fields in one call, and its expiry set, not compared.
  redis.call('HSET', KEYS[1], 'mode', side == 'r' and 'read' or 'write', field, 1)
  redis.call('PEXPIRE', KEYS[1], lease)
  if side == 'r' then
    redis.call('ZADD', KEYS[2], now + lease, owner)
    redis.call('PEXPIRE', KEYS[2], lease)
  elseif waiting == owner then
    redis.call('DEL', KEYS[3])
  end
  return {1, token}
end

-- One reader entry may serve several holds of its owner (reads taken one after another inside
-- one write scope), each counting its lease from its own request: a deadline only moves out
-- (GT), so no hold's share is cut short by another's. A reader's `now` is set: the sweep ran.
local function enter(n)
  redis.call('HSET', KEYS[1], field, n)
  if side == 'r' then
    redis.call('ZADD', KEYS[2], 'GT', now + lease, owner)
    extend(KEYS[2], lease)
    extend(KEYS[1], lease)
  elseif sibling then
    extend(KEYS[1], lease)
  else
    -- A writer alone inside: the expiry is its lease's, as on a plain lock.
    redis.call('PEXPIRE', KEYS[1], lease)
  end
end

if count then
  if not nested then
    -- The same top-level request run twice (a re-send after a dropped connection): answer as
    -- the first run did, changing nothing.
    local last, bad = last_token()
    if bad then
      return bad
    end
    return {1, last}
  end
  redis.call('SET', KEYS[5], 1, 'PX', ARGV[5])
  count = tonumber(count) + 1
  if ARGV[7] == '1' then
    redis.call('HSET', KEYS[1], field, count)
  else
    enter(count)
  end
  return {count, 0}
end

if side == 'r' then
  local downgrade = mode == 'write' and sibling
  if mode == 'read' and waiting == nil then
    waiting, err = marker()
    if err then
      return err
    end
  end
  if downgrade or (mode == 'read' and not waiting) then
    local token
    if downgrade then
      -- The writer's own read: token 0, and the client keeps the writer's. The counter is
      -- shared by the locks of the cluster slot, so its value now may be a later lock's.
      token = 0
    elseif not nested and done then
      -- A late request of an owner that is done (see above) joins no readers either.
      return {0, 1}
    else
      -- A reader joining others gets a token of its own, lifted like a free -> held one: the
      -- read period's token may predate a writer this server never saw (a failover to a
      -- replica that missed it), and two readers with one token could not be told apart by a
      -- fence.
      token, err = next_token(t)
    end
    if err then
      return err
    end
    if nested then
      -- Sent with a marker (a writer's read, see Lock::acquire_as): an undo finds it.
      redis.call('SET', KEYS[5], 1, 'PX', ARGV[5])
    end
    enter(1)
    return {1, token}
  end
  -- Behind a writer inside, or one waiting: retry when that one's time is up at the latest
  -- (a release before then publishes).
  if mode == 'read' then
    return {0, redis.call('PTTL', KEYS[3])}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end

-- A writer that cannot get in: the first one refused keeps new readers out until it is in.
-- It must come back before its marker expires, so it waits at most half of it at a time.
if not nested and done then
  -- A late request of an owner that is done (see above) stakes no claim: nobody would come
  -- back for it, and new readers would queue behind it until it expired.
  return {0, 1}
end
if waiting == nil then
  waiting, err = marker()
  if err then
    return err
  end
end
local intent = tonumber(ARGV[8])
if not waiting or waiting == owner then
  redis.call('SET', KEYS[3], owner, 'PX', intent)
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 or pttl > intent / 2 then
  pttl = math.floor(intent / 2)
end
return {0, pttl}
