-- Take a lock for a new owner (a top-level acquire; re-entries of a held lock go to
-- reenter.lua, which carries the marker and the hard-lease flag this path never needs).
-- KEYS[1] lock hash (owner -> hold count), KEYS[2] the fencing counter of the lock's cluster
-- slot (shared by every lock in that slot: a token must rise per lock name, and a counter
-- rising for all of them does), KEYS[3] the owner's "done" latch (release.lua writes it with
-- the owner's last release)
-- ARGV[1] lease in ms, ARGV[2] owner id, ARGV[3] fencing counter lifetime in ms, sent only
-- when it is not the usual day (a lease over 12 h)
-- Returns {1, fencing token} when held by ARGV[2] afterwards, {0, pttl} otherwise.
-- Every check comes before the first write (Redis does not roll a failed script back), except
-- the fencing counter's, which SET .. GET makes as it writes (see below).
-- Cost: every redis.call, every key and argument and every number <-> text conversion is
-- server time, so the usual path (a free key) makes five calls (EXISTS, TIME, SET .. GET,
-- HSET, PEXPIRE) and converts no number: the clock and the counter stay text, and Redis's
-- integer replies are the only numbers. (A Lua number sent to Redis is printed with
-- "%.17g", and tonumber() is strtod: measured with callgrind, the two cost more than the
-- TIME call itself.)

-- One call answers "free, and this owner is not done" for both keys (they share a hash slot).
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  -- A free -> held transition: the token is max(last + 1, server time in µs). The clock term
  -- keeps tokens rising when the counter went back (Redis restored an older RDB or AOF, a
  -- replica that missed the last writes was promoted, the counter expired); the counter term
  -- keeps them rising within one µs or if the clock steps back a little.
  local now = redis.call('TIME')
  -- The clock in µs as text: the seconds, then the µs in six digits.
  local us = now[2]
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  local clock = now[1] .. us
  local life = ARGV[3] or '86400000'
  -- The clock term wins unless the clock went back, so it is written first and the last
  -- token read in the same call; a counter that was ahead is then written again, once.
  -- SET .. GET refuses a non-string value without writing it (WRONGTYPE).
  local last = redis.pcall('SET', KEYS[2], clock, 'PX', life, 'GET')
  if type(last) == 'table' then
    if string.find(last.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-string value')
    end
    -- Refused for another reason (OOM on a full Redis before 7.0): nothing was written.
    return redis.error_reply(last.err)
  end
  local token = clock
  if last then
    local ahead
    if string.find(last, '^[1-9]%d*$') then
      -- Digits as dlock writes them, without sign or leading zero: the longer is larger, and
      -- of equal length the text order is the number order.
      ahead = #last > #clock or (#last == #clock and last >= clock)
    else
      -- Anything else (a value set by hand: leading zeros, a sign) is read as a number;
      -- compared as text, "00042" would pass for a counter ahead of the clock.
      local n = tonumber(last)
      if not n then
        -- Not a counter: put the string back (its expiry, if it had one, is not restored).
        redis.call('SET', KEYS[2], last)
        return redis.error_reply('WRONGTYPE fencing counter `' .. KEYS[2] .. '` holds a non-number')
      end
      ahead = n >= tonumber(clock)
    end
    if ahead then
      -- A Lua number is exact below 2^53 (a µs clock is near 2^51) and goes to Redis as its
      -- integer digits.
      token = tonumber(last) + 1
      redis.call('SET', KEYS[2], token, 'PX', life)
    end
  end
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, token}
end
local held = redis.pcall('HEXISTS', KEYS[1], ARGV[2])
if type(held) == 'table' then
  return redis.error_reply('WRONGTYPE lock hash `' .. KEYS[1] .. '` holds a non-hash value')
end
if held == 1 then
  -- A top-level acquire finds its own (fresh) owner id already there: this is the same
  -- request run twice (a client re-sent it after a dropped connection). Answer as a grant,
  -- changing nothing. The counter holds the token that run handed out or, if another lock of
  -- the slot was granted since, a later one: either is above every earlier holder's token of
  -- this lock and below every later one's, which is all a token promises.
  return {1, redis.call('GET', KEYS[2]) or 0}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  -- The lock is free, so it was the done latch that EXISTS counted: this owner gave its last
  -- hold back, or its undo found it holding nothing, and this is a request of it that reached
  -- Redis late (it waited in a frozen connection while the client gave up and undid it over
  -- another). Granting it would leave the lock held by nobody until its lease ends.
  return {0, 1}
end
return {0, pttl}
