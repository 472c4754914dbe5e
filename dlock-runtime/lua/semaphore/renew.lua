-- Renew many permits in one round trip (the watchdog's tick).
-- KEYS[2i-1] holders (owner id -> deadline in server ms), KEYS[2i] their permit count;
-- ARGV[2i-1] owner id, ARGV[2i] lease in ms
-- Returns one entry per permit: 1 renewed (deadline = server time + lease), 0 no longer ours
-- (given back, past its deadline, or the key holds another type). Both keys expire at the
-- latest deadline of the set, so the key's PTTL always covers every live permit.
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
    redis.call('ZADD', holders, string.format('%.0f', now + tonumber(lease)), owner)
    local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', holders, last[2])
    redis.call('PEXPIREAT', count, last[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
