-- Take (or re-enter) one side of a read-write lock.
-- KEYS[1] lock hash: 'mode' -> 'read' | 'write', 'w:<owner>' -> write holds, 'r:<owner>' -> read
--   holds; its PTTL covers the longest lease of anyone inside
-- KEYS[2] reader leases: zset owner -> deadline (server ms); each reader expires on its own
-- KEYS[3] writer-waiting marker: the owner of the first writer refused; new readers queue
--   behind it until it gets in or the marker expires
-- KEYS[4] fencing counter, KEYS[5] re-entry marker
-- ARGV[1] side 'r' | 'w', ARGV[2] owner id, ARGV[3] lease ms, ARGV[4] '1' for a re-entry of an
-- enclosing hold or a writer's own read (a downgrade; one more hold if it already reads):
-- KEYS[5] is then set whenever a hold is granted, so an undo can tell, ARGV[5] marker
-- lifetime ms, ARGV[6] fencing counter lifetime ms,
-- ARGV[7] '1' to leave leases alone on a re-entry of the same hold (a hard lease; a writer's
-- read is a hold of its own and sends '0'), ARGV[8] writer-waiting
-- marker lifetime ms
-- Returns {holds, token} when ARGV[2] holds the side afterwards (token 0 for a re-entry, the
-- writer's for its own read, a new one for a reader joining others), {0, ms to wait} otherwise.
-- Every check comes before the first write: Redis does not roll a failed script back.
local function check(key, want, role)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE ' .. role .. ' `' .. key .. '` holds a ' .. t)
  end
end
local bad = check(KEYS[1], 'hash', 'lock hash') or check(KEYS[2], 'zset', 'reader leases')
  or check(KEYS[3], 'string', 'writer-waiting marker') or check(KEYS[4], 'string', 'fencing counter')
if bad then
  return bad
end
local last = tonumber(redis.call('GET', KEYS[4]) or '0')
if not last then
  return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[4] .. '` holds a non-number')
end

local side, owner, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local field = side .. ':' .. owner
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A key's expiry only ever moves out here: it covers everyone inside.
local function extend(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Readers whose lease ran out (their process died) leave; the last one frees the lock.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #expired > 0 then
  for _, o in ipairs(expired) do
    redis.call('HDEL', KEYS[1], 'r:' .. o)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('HGET', KEYS[1], 'mode') == 'read' and redis.call('HLEN', KEYS[1]) == 1 then
    redis.call('DEL', KEYS[1])
  end
end

-- One reader entry may serve several holds of its owner (reads taken one after another inside
-- one write scope), each counting its lease from its own request: a deadline only moves out
-- (GT), so no hold's share is cut short by another's.
local function enter(count)
  redis.call('HSET', KEYS[1], field, count)
  if side == 'r' then
    redis.call('ZADD', KEYS[2], 'GT', now + lease, owner)
    extend(KEYS[2], lease)
  end
  extend(KEYS[1], lease)
end

local mode = redis.call('HGET', KEYS[1], 'mode')
local waiting = redis.call('GET', KEYS[3])
if not mode then
  if side == 'r' and waiting then
    -- Free, but only because the readers a waiting writer waited for have left: the lock is
    -- that writer's next (it was woken by the last one's release). A reader asking now, often
    -- the one that just left, queues behind it like any new reader; it retries when the claim
    -- ends at the latest (the writer's release, or its giving up, publishes before then).
    return {0, redis.call('PTTL', KEYS[3])}
  end
  -- Free -> held: a new token, max(last + 1, server time in µs) (see lua/lock/acquire.lua).
  local token = math.max(last + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', KEYS[4], string.format('%.0f', token), 'PX', ARGV[6])
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[5], 1, 'PX', ARGV[5])
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'mode', side == 'r' and 'read' or 'write')
  redis.call('PEXPIRE', KEYS[1], lease)
  enter(1)
  if side == 'w' and redis.call('GET', KEYS[3]) == owner then
    redis.call('DEL', KEYS[3])
  end
  return {1, token}
end

local count = redis.call('HGET', KEYS[1], field)
if count then
  if ARGV[4] ~= '1' then
    -- The same top-level request run twice (a re-send after a dropped connection): answer as
    -- the first run did, changing nothing.
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
  local downgrade = mode == 'write' and redis.call('HEXISTS', KEYS[1], 'w:' .. owner) == 1
  if downgrade or (mode == 'read' and not waiting) then
    if ARGV[4] == '1' then
      -- Sent with a marker (a writer's read, see Lock::acquire_as): an undo finds it.
      redis.call('SET', KEYS[5], 1, 'PX', ARGV[5])
    end
    enter(1)
    if downgrade then
      return {1, last}
    end
    -- A reader joining others gets a token of its own, lifted like a free -> held one: the
    -- read period's token may predate a writer this server never saw (a failover to a
    -- replica that missed it), and two readers with one token could not be told apart by a
    -- fence.
    local token = math.max(last + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
    redis.call('SET', KEYS[4], string.format('%.0f', token), 'PX', ARGV[6])
    return {1, token}
  end
  -- Behind a writer inside, or one waiting: retry when that one's time is up at the latest
  -- (a release before then publishes).
  local pttl = redis.call('PTTL', KEYS[1])
  if waiting and mode == 'read' then
    pttl = redis.call('PTTL', KEYS[3])
  end
  return {0, pttl}
end

-- A writer that cannot get in: the first one refused keeps new readers out until it is in.
-- It must come back before its marker expires, so it waits at most half of it at a time.
local intent = tonumber(ARGV[8])
if not waiting or waiting == owner then
  redis.call('SET', KEYS[3], owner, 'PX', intent)
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 or pttl > intent / 2 then
  pttl = math.floor(intent / 2)
end
return {0, pttl}
