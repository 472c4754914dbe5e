-- Shared by the fair lock's scripts (prepended to each; see kind/fair.rs).
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
-- does anyway check the types for free, where a TYPE call would cost each call a command.
local function failed(reply, key, want, role)
  if type(reply) == 'table' and reply.err then
    return check(key, want, role) or reply
  end
end

local function checks()
  return check(KEYS[1], 'hash', 'lock hash') or check(KEYS[2], 'zset', 'fair queue')
    or check(KEYS[3], 'zset', 'fair queue keep-alive') or check(KEYS[4], 'string', 'fencing counter')
end

local function server_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
    tonumber(t[1]) * 1000000 + tonumber(t[2])
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

-- A new token for a free -> held transition: max(last + 1, server time in µs). `read`: the
-- counter's value if the caller has read it already (false when it does not exist).
local function next_token(now_us, fence_ms, read)
  if read == nil then
    read = redis.call('GET', KEYS[4])
  end
  local last = tonumber(read or '0') or 0
  local token = math.max(last + 1, now_us)
  redis.call('SET', KEYS[4], string.format('%.0f', token), 'PX', fence_ms)
  return token
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
