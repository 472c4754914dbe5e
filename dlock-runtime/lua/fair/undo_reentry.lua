-- Undo a fair lock's re-entry whose caller was cancelled before it saw the reply (after
-- common.lua); like lua/lock/undo_reentry.lua, but a freed lock goes to the queue's head.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] queue keep-alive, KEYS[4] fencing counter,
-- KEYS[5] release channel, KEYS[6] re-entry marker
-- ARGV[1] owner id, ARGV[2] grant lifetime ms, ARGV[3] fencing counter lifetime ms
local bad = checks()
if bad then
  return bad
end
local held = redis.call('HEXISTS', KEYS[1], ARGV[1])
if redis.call('DEL', KEYS[6]) == 1 and held == 1 then
  if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
    redis.call('DEL', KEYS[1])
    if not grant_next(tonumber(ARGV[2]), ARGV[3]) then
      redis.pcall('PUBLISH', KEYS[5], 'released')
    end
  end
  return 1
end
return 0
