-- Undo a re-entry of a Redisson-layout lock whose caller was cancelled before it saw the reply.
-- KEYS[1] the lock hash, KEYS[2] the re-entry marker lock_acquire.lua set, KEYS[3] the
-- lock's channel
-- ARGV[1] the owner's field, ARGV[2] 'PUBLISH' or 'SPUBLISH'
-- Without the marker the re-entry never ran and there is nothing to undo; if it was the last
-- hold (the enclosing release already ran), this frees the lock like a release.
local held = redis.pcall('HEXISTS', KEYS[1], ARGV[1])
if type(held) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
if redis.call('DEL', KEYS[2]) == 1 and held == 1 then
  if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
    redis.call('DEL', KEYS[1])
    redis.pcall(ARGV[2], KEYS[3], '0')
  end
  return 1
end
return 0
