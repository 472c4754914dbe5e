-- Re-enter a lock an enclosing call of the same owner holds (top-level acquires go to
-- acquire.lua).
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] the fencing counter of the lock's cluster
-- slot, KEYS[3] re-entry marker (lets a cancelled re-entry be undone exactly once:
-- undo_reentry.lua), KEYS[4] the owner's "done" latch (release.lua writes it with the owner's
-- last release)
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] marker lifetime in ms, ARGV[4] fencing
-- counter lifetime ms, ARGV[5] '1' to leave the expiry alone (a hard lease ends where it was
-- set)
-- Returns {hold count, 0} when held by ARGV[2] afterwards (the holder knows its token), or
-- {1, token} when the enclosing hold had been lost and the lock was free: then this is a new
-- free -> held transition, with a token of its own. {0, pttl} when another owner holds it.
-- Every check comes before the first write (Redis does not roll a failed script back), except
-- the fencing counter's, which SET .. GET makes as it writes (see acquire.lua).

if redis.call('EXISTS', KEYS[1], KEYS[4]) == 0 then
  -- The token as acquire.lua draws it (see there): max(last + 1, server time in µs), the
  -- clock kept as text.
  local now = redis.call('TIME')
  local us = now[2]
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  local clock = now[1] .. us
  local last = redis.pcall('SET', KEYS[2], clock, 'PX', ARGV[4], 'GET')
  if type(last) == 'table' then
    if string.find(last.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-string value')
    end
    return redis.error_reply(last.err)
  end
  local token = clock
  if last then
    -- As acquire.lua: dlock's own digits compared as text, anything else as a number.
    local ahead
    if string.find(last, '^[1-9]%d*$') then
      ahead = #last > #clock or (#last == #clock and last >= clock)
    else
      local n = tonumber(last)
      if not n then
        redis.call('SET', KEYS[2], last)
        return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-number')
      end
      ahead = n >= tonumber(clock)
    end
    if ahead then
      token = tonumber(last) + 1
      redis.call('SET', KEYS[2], token, 'PX', ARGV[4])
    end
  end
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, token}
end
local held = redis.pcall('HEXISTS', KEYS[1], ARGV[2])
if type(held) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
if held == 1 then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
  local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  if ARGV[5] ~= '1' then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
  return {count, 0}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  -- The lock is free, so it was the done latch that EXISTS counted: this owner is done (see
  -- acquire.lua), and this request reached Redis late.
  return {0, 1}
end
return {0, pttl}
