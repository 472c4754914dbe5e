-- Renew read holds of locks in Redisson's RReadWriteLock layout (what renewal/ReadLockTask
-- does, Redisson 3.24+ and 4.x): while the owner's field exists, every one of its hold
-- timeouts and the hash get the lease again.
-- KEYS[2i-1] the lock hash, KEYS[2i] its key prefix '{<name>}'; ARGV[2i-1] the owner's field,
-- ARGV[2i] lease ms
-- Returns one entry per hold: 1 renewed, 0 no longer ours (gone, taken, another type).
local out = {}
for i = 1, #KEYS / 2 do
  local hash, prefix = KEYS[2 * i - 1], KEYS[2 * i]
  local field, lease = ARGV[2 * i - 1], ARGV[2 * i]
  -- pcall: one key overwritten with another type must not fail the whole batch.
  local holds = redis.pcall('HGET', hash, field)
  if type(holds) == 'string' then
    for c = tonumber(holds), 1, -1 do
      redis.call('PEXPIRE', prefix .. ':' .. field .. ':rwlock_timeout:' .. c, lease)
    end
    redis.call('PEXPIRE', hash, lease)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
