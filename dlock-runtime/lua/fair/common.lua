-- Shared by the fair lock's scripts (prepended to each; see kinds/fair.rs).
-- Queue: KEYS[2] zset owner -> arrival (server µs), KEYS[3] zset owner -> keep-alive deadline
-- (server ms). Grants go to the head's own channel `<lock hash>:grant:<its client id>`.

local function check(key, want, role)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE ' .. role .. ' `' .. key .. '` holds a ' .. t)
  end
end

-- The error for a read that failed (`reply` is redis.pcall's error table), naming `key` and what
-- it is for when its type is the cause; nil when the read succeeded. Typed reads that a script
-- does anyway check the types for free: TYPE runs only once a read has failed.
local function failed(reply, key, want, role)
  if type(reply) == 'table' and reply.err then
    return check(key, want, role) or reply
  end
end

local function server_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
    tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Whether anybody is queued (the queue or its keep-alive set exists), with the fencing
-- counter's type checked: `fence` is its value as an MGET read it, nil for a value of another
-- type too, which EXISTS then tells from an absent one (a counter that exists counts three,
-- the two sets at most two). Returns queued, error.
local function queue_and_fence(fence)
  if fence then
    return redis.call('EXISTS', KEYS[2], KEYS[3]) > 0
  end
  local n = redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4], KEYS[4], KEYS[4])
  if n >= 3 then
    return false, redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[4] .. '` holds a non-string value')
  end
  return n > 0
end

-- Waiters that stopped keeping their place (their process died) leave the queue; judged by
-- the server's clock only. `gone`: the keep-alive set's expired owners, if the caller has read
-- them already.
local function prune(now_ms, gone)
  gone = gone or redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  for _, o in ipairs(gone) do
    redis.call('ZREM', KEYS[2], o)
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  end
end

-- A new token for a free -> held transition: max(last + 1, server time in µs). The clock term
-- keeps tokens rising when the counter went back (an older RDB or AOF restored, a replica that
-- missed the last writes promoted, the counter expired); the counter term keeps them rising
-- within one µs or when the clock steps back a little. `read`: the counter's value as the
-- caller read (and checked) it, false when it does not exist. A Lua number goes to Redis as
-- its integer digits (exact below 2^53; a µs clock is near 2^51).
local function next_token(now_us, fence_ms, read)
  local token = math.max((tonumber(read or '0') or 0) + 1, now_us)
  redis.call('SET', KEYS[4], token, 'PX', fence_ms)
  return token
end

-- next_token for a caller that has not read the counter: SET .. GET writes the clock term and
-- reads the last token in one call, and refuses a value of another type without writing it,
-- so it may be the script's first write. Returns token, error.
local function take_token(fence_ms)
  local _, now_us = server_time()
  local last = redis.pcall('SET', KEYS[4], now_us, 'PX', fence_ms, 'GET')
  if type(last) == 'table' then
    if string.find(last.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[4] .. '` holds a non-string value')
    end
    -- Refused for another reason (OOM on a full Redis before 7.0): nothing was written.
    return nil, redis.error_reply(last.err)
  end
  if not last then
    return now_us
  end
  local n = tonumber(last)
  if not n then
    -- Not a counter: put the string back (its expiry, if it had one, is not restored).
    redis.call('SET', KEYS[4], last)
    return nil, redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[4] .. '` holds a non-number')
  end
  if n < now_us then
    return now_us
  end
  -- The counter was ahead of the clock (rare): one past it.
  redis.call('SET', KEYS[4], n + 1, 'PX', fence_ms)
  return n + 1
end

-- Hands the free lock to the head of the queue, if any, for `grant_ms` (the head turns that into
-- its own lease with a renewal; a head that died lets it expire), and tells it on its channel.
-- Returns true when somebody was granted. `fence`: the counter as the caller read it (see
-- next_token).
local function grant_next(grant_ms, fence_ms, fence)
  local now_ms, now_us = server_time()
  prune(now_ms)
  local head = redis.call('ZPOPMIN', KEYS[2])[1]
  if not head then
    return false
  end
  local token = next_token(now_us, fence_ms, fence)
  redis.call('HSET', KEYS[1], head, 1)
  redis.call('PEXPIRE', KEYS[1], grant_ms)
  redis.call('ZREM', KEYS[3], head)
  -- Told on the grantee's own channel: each waiting owner listens on its own, so the message
  -- wakes exactly the one it grants to, also among several waiters of one client.
  redis.pcall('PUBLISH', KEYS[1] .. ':grant:' .. head, head .. ' ' .. string.format('%.0f', token))
  return true
end
