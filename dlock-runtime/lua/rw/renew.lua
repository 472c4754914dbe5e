-- Renew holds of read-write locks (the watchdog's tick).
-- KEYS[2i-1] lock hash, KEYS[2i] its reader leases; ARGV[3i-2] side 'r' | 'w', ARGV[3i-1]
-- owner id, ARGV[3i] lease ms
-- Returns one entry per hold: 1 renewed, 0 no longer ours (gone, taken, expired, another type).
-- Cost: a writer's hold HEXISTS, PEXPIRE; a reader's ZSCORE, ZADD, PEXPIRE too, and one TIME
-- per call that renews readers (before Redis 7.0, each PEXPIRE a PTTL first).
local now
local out = {}

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
for i = 1, #KEYS / 2 do
  local hash, readers = KEYS[2 * i - 1], KEYS[2 * i]
  local side, owner, lease = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  -- pcall: one key overwritten with another type must not fail the whole batch.
  local held = redis.pcall('HEXISTS', hash, side .. ':' .. owner)
  if held == 1 and side == 'r' then
    -- A reader past its own deadline is gone even before a script pruned it. The clock is read
    -- once, and only for readers: a writer's hold has no deadline of its own.
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local deadline = redis.pcall('ZSCORE', readers, owner)
    if type(deadline) ~= 'string' or tonumber(deadline) <= now then
      held = 0
    else
      -- GT: an entry serving a longer hold too keeps that one's deadline.
      redis.call('ZADD', readers, 'GT', now + lease, owner)
      extend(readers, lease)
    end
  end
  if held == 1 then
    extend(hash, lease)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
