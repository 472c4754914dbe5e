-- Renew many locks in one round trip (the watchdog's tick).
-- KEYS[i] lock hash; ARGV[2i-1] owner id, ARGV[2i] lease in ms
-- Returns one entry per key: 1 renewed, 0 no longer ours (gone, taken, or not a hash).
local out = {}
for i = 1, #KEYS do
  local owner, lease = ARGV[2 * i - 1], ARGV[2 * i]
  -- pcall: one key overwritten with another type must not fail the whole batch.
  local held = redis.pcall('HEXISTS', KEYS[i], owner)
  if held == 1 then
    redis.call('PEXPIRE', KEYS[i], lease)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
