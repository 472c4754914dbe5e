-- Renew many permits in one round trip (the watchdog's tick).
-- KEYS[2i-1] holders (owner id -> deadline in server ms), KEYS[2i] their permit count;
-- ARGV[2i-1] owner id, ARGV[2i] lease in ms
-- Returns one entry per permit: 1 renewed (deadline = server time + lease), 0 no longer ours
-- (given back, past its deadline, or the key holds another type). Both keys expire at the
-- latest deadline of the set, so the key's PTTL always covers every live permit.
-- Cost: TIME, then per permit ZSCORE, ZADD, ZRANGE, and PEXPIREAT on both keys when its new
-- deadline is the latest (otherwise the keys already outlive it).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #ARGV / 2 do
  local holders, count = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, lease = ARGV[2 * i - 1], ARGV[2 * i]
  -- pcall: one key overwritten with another type must not fail the whole batch.
  local deadline = redis.pcall('ZSCORE', holders, owner)
  -- A deadline already passed is not renewed: from then on the permit was free to take.
  if type(deadline) == 'string' and tonumber(deadline) > now then
    local renewed = now + tonumber(lease)
    redis.call('ZADD', holders, renewed, owner)
    local last = tonumber(redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')[2])
    if last <= renewed then
      redis.call('PEXPIREAT', holders, renewed)
      redis.call('PEXPIREAT', count, renewed)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
