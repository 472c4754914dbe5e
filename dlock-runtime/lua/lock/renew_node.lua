#!lua flags=allow-cross-slot-keys,allow-oom
-- Renew many locks of one cluster node in one call (the watchdog's tick on a cluster).
-- KEYS[1] one of the lock hashes: it routes the call, and if its slot moved, the node answers
-- MOVED instead of running anything. The flag lets the script reach the other hashes, which
-- Redis only allows undeclared (declared keys must share one slot) and only on this node.
-- ARGV[3i-2] lock hash, ARGV[3i-1] owner id, ARGV[3i] lease in ms
-- Returns one entry per lock: 1 renewed, 0 no longer ours (gone, taken, another type). Any
-- other error (a lock this node does not serve: slots moved since the caller looked) fails the
-- whole call, so the caller renews per slot rather than reading "not ours" for a lock it may
-- still hold.
local out = {}
for i = 1, #ARGV / 3 do
  local key, owner, lease = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local held = redis.pcall('HEXISTS', key, owner)
  if type(held) == 'table' then
    -- Only a key of another type is "not ours"; anything else (a key this node does not
    -- serve) fails the call so the caller renews per slot.
    if string.sub(held.err, 1, 9) ~= 'WRONGTYPE' then
      return redis.error_reply(held.err)
    end
    out[i] = 0
  elseif held == 1 then
    redis.call('PEXPIRE', key, lease)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
