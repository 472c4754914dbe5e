-- Take, re-enter, or queue for a fair lock (after common.lua).
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] queue, KEYS[3] queue keep-alive, KEYS[4]
-- fencing counter, KEYS[5] re-entry marker, KEYS[6] the owner's "done" latch (release.lua
-- writes it with the owner's last release, or when the owner held nothing)
-- ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] marker lifetime ms, ARGV[4] '1' for a re-entry,
-- ARGV[5] fencing counter lifetime ms, ARGV[6] '1' to leave the expiry alone on a re-entry,
-- ARGV[7] how long a queued waiter keeps its place without coming back (and how long a grant
-- lasts before its owner renews it), ms
-- Returns {holds, token} when ARGV[2] holds the lock afterwards (token 0 for a re-entry),
-- {0, ms until the caller must come back to keep its place} otherwise (also to an owner that
-- is done, which is neither granted nor queued).
-- Every check comes before the first write (Redis does not roll a failed script back), except
-- the fencing counter's on a free lock, which SET .. GET makes as it writes (see common.lua).
-- Each key's type is checked by a read this script needs anyway (a TYPE call costs a command)
-- or by EXISTS finding it absent; a re-entry touches only the hash and the marker.
-- Cost: every redis.call is most of a script's server time. A free lock nobody queues for
-- makes five: EXISTS, TIME, SET .. GET, HSET, PEXPIRE; a re-entry five: EXISTS, HGET, SET,
-- HINCRBY, PEXPIRE; a queued waiter keeping its place nine: EXISTS, HGET, EXISTS, TIME,
-- ZSCORE, ZRANGEBYSCORE, ZADD, PEXPIRE, PEXPIRE.
local lease, owner, keep = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[7])

-- One call answers "free, nobody queued, and this owner is not done" for the four keys (they
-- share a hash slot).
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[6]) == 0 then
  local token, bad = take_token(ARGV[5])
  if bad then
    return bad
  end
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[5], 1, 'PX', ARGV[3])
  end
  redis.call('HSET', KEYS[1], owner, 1)
  redis.call('PEXPIRE', KEYS[1], lease)
  return {1, token}
end

local count = redis.pcall('HGET', KEYS[1], owner)
local bad = failed(count, KEYS[1], 'hash', 'lock hash')
if bad then
  return bad
end
if count then
  if ARGV[4] == '1' then
    -- The marker lets a cancelled re-entry be undone exactly once (undo_reentry.lua).
    redis.call('SET', KEYS[5], 1, 'PX', ARGV[3])
    local n = redis.call('HINCRBY', KEYS[1], owner, 1)
    if ARGV[6] ~= '1' then
      redis.call('PEXPIRE', KEYS[1], lease)
    end
    return {n, 0}
  end
  -- Granted to this waiter by a release (or this request run twice): it holds, with its own
  -- lease from now on (a hard lease too: this is its first acquire), so the caller may count
  -- its lease from this request's send time. The counter holds the token of that grant.
  local fence = redis.pcall('GET', KEYS[4])
  bad = failed(fence, KEYS[4], 'string', 'fencing counter')
  if bad then
    return bad
  end
  if not tonumber(fence or '0') then
    return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[4] .. '` holds a non-number')
  end
  redis.call('PEXPIRE', KEYS[1], lease)
  return {1, tonumber(fence or '0')}
end

-- Held by another, or queued for. The lock's existence and the done latch in one call: the
-- latch counts twice, so an odd count is the lock.
local n = redis.call('EXISTS', KEYS[1], KEYS[6], KEYS[6])
if n >= 2 then
  -- This owner gave its last hold back, or its release found it holding nothing (its acquire
  -- ended without the lock and took its place back): this is a request of it that reached
  -- Redis late (it waited in a frozen connection while the client gave up and undid it over
  -- another). Granting or queueing it would hold the lock, or a place ahead of others, for
  -- nobody.
  return {0, math.floor(keep / 3)}
end
local free = n == 0
local now_ms, now_us = server_time()
local queued = redis.pcall('ZSCORE', KEYS[2], owner)
local gone = redis.pcall('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
-- The counter only matters where a token may be handed out: on a free lock.
local fence = free and redis.pcall('GET', KEYS[4])
bad = failed(queued, KEYS[2], 'zset', 'fair queue')
  or failed(gone, KEYS[3], 'zset', 'fair queue keep-alive')
  or failed(fence, KEYS[4], 'string', 'fencing counter')
if bad then
  return bad
end
if free and not tonumber(fence or '0') then
  return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[4] .. '` holds a non-number')
end
prune(now_ms, gone)
if #gone > 0 then
  -- The owner itself may have been among them (it came back too late): read its place again.
  queued = redis.call('ZSCORE', KEYS[2], owner)
end

if free then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not head or head == owner then
    local token = next_token(now_us, ARGV[5], fence)
    if ARGV[4] == '1' then
      redis.call('SET', KEYS[5], 1, 'PX', ARGV[3])
    end
    redis.call('HSET', KEYS[1], owner, 1)
    redis.call('PEXPIRE', KEYS[1], lease)
    if queued then
      redis.call('ZREM', KEYS[2], owner)
      redis.call('ZREM', KEYS[3], owner)
    end
    return {1, token}
  end
  -- Free, but somebody came first (its holder expired without a release): its turn now.
  if grant_next(keep, ARGV[5], fence) then
    -- Its prune reads the clock again and may have dropped this owner's place too.
    queued = redis.call('ZSCORE', KEYS[2], owner)
  end
end

-- Queue (first come, first served by server time), or keep the place.
if not queued then
  local tail = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', KEYS[2], math.max(now_us, (tonumber(tail) or 0) + 1), owner)
end
redis.call('ZADD', KEYS[3], now_ms + keep, owner)
-- Both sets live twice the keep-alive from the last waiter's visit. Every script that sets
-- their expiry sets this one (KEEP_PLACE is the same for every client), so it never shortens
-- a longer one: no PTTL read first.
redis.call('PEXPIRE', KEYS[2], keep * 2)
redis.call('PEXPIRE', KEYS[3], keep * 2)
return {0, math.floor(keep / 3)}
