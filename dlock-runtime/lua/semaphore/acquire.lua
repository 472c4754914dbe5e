-- Take one permit of a semaphore with expiring permits.
-- KEYS[1] holders (sorted set: owner id -> deadline, Redis server time in ms),
-- KEYS[2] permit count (a string beside it, same hash tag), KEYS[3] the owner's "done" latch
-- (release.lua writes it when the owner gives its permit back, or its undo finds none)
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] the permit count the caller was built with
-- Returns {1, 0} when ARGV[2] holds a permit afterwards; {0, ms until the earliest holder's
-- deadline} when every permit is taken (a waiter retries then, so a crashed holder's permit
-- is taken up without any release message), {0, 1} for an owner that is done; the error
-- `ERR DLOCK_PERMITS <count>` when the semaphore is in use with another permit count.
-- Deadlines are the server's TIME, never a client clock. Expired holders are pruned here (and
-- by release.lua): a crashed holder's permit is free from its deadline on.
-- Both keys expire at the latest deadline; an idle semaphore leaves nothing behind.
-- Every check comes before the first write: Redis does not roll a failed script back.
-- Cost: every redis.call is most of a script's server time. The usual path of a semaphore
-- nobody holds makes five: EXISTS, TIME, ZADD, SET, PEXPIREAT. One held by others: EXISTS,
-- TIME, MGET, ZREMRANGEBYSCORE, ZCARD, ZADD, ZRANGE, and PEXPIREAT, SET when this deadline is
-- the latest.
local lease, owner, permits = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])

-- One call answers "nobody holds a permit, and this owner is not done" for all three keys
-- (they share a hash slot). With both semaphore keys absent there is no type to check.
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) == 0 then
  local t = redis.call('TIME')
  local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + lease
  -- A Lua number goes to Redis as its integer digits (exact: ms are far below 2^53).
  redis.call('ZADD', KEYS[1], deadline, owner)
  redis.call('SET', KEYS[2], permits, 'PXAT', deadline)
  redis.call('PEXPIREAT', KEYS[1], deadline)
  return {1, 0}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The done latch's name ends in the owner's random id, so no user value sits there; MGET
-- answers nil for a count of another type, which GET then names.
local read = redis.call('MGET', KEYS[2], KEYS[3])
if read[2] then
  -- This owner gave its permit back, or its undo found none: this is a request of it that
  -- reached Redis late (it waited in a frozen connection while the client gave up and undid it
  -- over another). Granting it would keep a permit from everyone until its lease ends.
  return {0, 1}
end
local stored = read[1]
if not stored then
  stored = redis.pcall('GET', KEYS[2])
  if type(stored) == 'table' then
    return redis.error_reply('WRONGTYPE semaphore permit count `' .. KEYS[2] .. '` holds a non-string value')
  end
end
if stored and not tonumber(stored) then
  return redis.error_reply('WRONGTYPE semaphore permit count `' .. KEYS[2] .. '` holds a non-number')
end
local function wrong_holders()
  return redis.error_reply('WRONGTYPE semaphore holders `' .. KEYS[1] .. '` holds a non-sorted-set value')
end
if stored and tonumber(stored) ~= permits then
  -- Holders whose deadline is still ahead; the count only binds while there are any. Read
  -- before the prune below, which writes.
  local live = redis.pcall('ZCOUNT', KEYS[1], '(' .. now, '+inf')
  if type(live) == 'table' then
    return wrong_holders()
  end
  if live > 0 then
    return redis.error_reply('ERR DLOCK_PERMITS ' .. stored)
  end
end
-- The prune is also the holders' type check: it refuses another type without writing.
local pruned = redis.pcall('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if type(pruned) == 'table' then
  return wrong_holders()
end
local live = redis.call('ZCARD', KEYS[1])
if live >= permits and not redis.call('ZSCORE', KEYS[1], owner) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - now, 1)}
end
-- A fresh owner id already present is this same request run twice (a client re-sent it after
-- a dropped connection): the same permit, its deadline set again.
local deadline = now + lease
redis.call('ZADD', KEYS[1], deadline, owner)
-- The keys expire at the latest deadline. Every script that sets a deadline moves the expiry
-- up to it when it is the latest, so an expiry never falls short of a live deadline: when
-- another holder's is later, both keys already outlive this one.
local last = tonumber(redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])
if last <= deadline then
  redis.call('PEXPIREAT', KEYS[1], deadline)
  redis.call('SET', KEYS[2], permits, 'PXAT', deadline)
elseif tonumber(stored) ~= permits then
  -- No count, or a stale one nobody was bound by: ours, with the holders' expiry.
  redis.call('SET', KEYS[2], permits, 'PXAT', last)
end
return {1, 0}
