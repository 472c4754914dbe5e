-- Take, re-enter, or queue for a fair lock (after common.lua).
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] queue, KEYS[3] queue keep-alive, KEYS[4]
-- fencing counter, KEYS[5] re-entry marker
-- ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] marker lifetime ms, ARGV[4] '1' for a re-entry,
-- ARGV[5] fencing counter lifetime ms, ARGV[6] '1' to leave the expiry alone on a re-entry,
-- ARGV[7] how long a queued waiter keeps its place without coming back (and how long a grant
-- lasts before its owner renews it), ms
-- Returns {holds, token} when ARGV[2] holds the lock afterwards (token 0 for a re-entry),
-- {0, ms until the caller must come back to keep its place} otherwise.
-- Every check comes before the first write: Redis does not roll a failed script back.
-- Every key's type is checked by a read this script needs anyway (each TYPE call would cost a
-- command).
local lease, owner, keep = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[7])
local now_ms, now_us = server_time()
local count = redis.pcall('HGET', KEYS[1], owner)
local queued = redis.pcall('ZSCORE', KEYS[2], owner)
local gone = redis.pcall('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
local fence = redis.pcall('GET', KEYS[4])
local bad = failed(count, KEYS[1], 'hash', 'lock hash')
  or failed(queued, KEYS[2], 'zset', 'fair queue')
  or failed(gone, KEYS[3], 'zset', 'fair queue keep-alive')
  or failed(fence, KEYS[4], 'string', 'fencing counter')
if bad then
  return bad
end
if not tonumber(fence or '0') then
  return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[4] .. '` holds a non-number')
end
prune(now_ms, gone)
if #gone > 0 then
  -- The owner itself may have been among them (it came back too late): read its place again.
  queued = redis.call('ZSCORE', KEYS[2], owner)
end

if count then
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[5], 1, 'PX', ARGV[3])
    local n = redis.call('HINCRBY', KEYS[1], owner, 1)
    if ARGV[6] ~= '1' then
      redis.call('PEXPIRE', KEYS[1], lease)
    end
    return {n, 0}
  end
  -- Granted to this waiter by a release (or this request run twice): it holds, with its own
  -- lease from now on (a hard lease too: this is its first acquire), so the caller may count
  -- its lease from this request's send time.
  redis.call('PEXPIRE', KEYS[1], lease)
  return {1, tonumber(fence or '0')}
end

if redis.call('EXISTS', KEYS[1]) == 0 then
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
for _, k in ipairs({KEYS[2], KEYS[3]}) do
  if redis.call('PTTL', k) < keep * 2 then
    redis.call('PEXPIRE', k, keep * 2)
  end
end
return {0, math.floor(keep / 3)}
