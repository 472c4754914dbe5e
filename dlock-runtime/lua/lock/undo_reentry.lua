-- Undo a re-entrant acquire whose caller was cancelled before it saw the reply.
-- KEYS[1] lock hash, KEYS[2] re-entry marker set by acquire.lua, KEYS[3] release channel
-- ARGV[1] owner id
-- Sent on the connection the acquire used, so it runs after that acquire if the acquire was sent
-- at all; without the marker the acquire never ran and there is nothing to undo. The enclosing
-- hold's own release may already have run (the undo is spawned), so this one can be the last
-- hold: then it frees the lock like a release does. Checks come before the first write.
local held = redis.pcall('HEXISTS', KEYS[1], ARGV[1])
if type(held) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
if redis.call('DEL', KEYS[2]) == 1 and held == 1 then
  if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
    redis.call('DEL', KEYS[1])
    redis.pcall('PUBLISH', KEYS[3], 'released')
  end
  return 1
end
return 0
