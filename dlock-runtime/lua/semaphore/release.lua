-- Give back one permit of a semaphore, at most once per owner.
-- KEYS[1] holders (owner id -> deadline in server ms), KEYS[2] permit count,
-- KEYS[3] release channel, KEYS[4] the owner's "done" latch: the answer of its release, so
-- that a retry gets the same answer and acquire.lua refuses a late request of that owner
-- (each permit is its own owner id, given back once: one latch per owner is enough)
-- ARGV[1] owner id, ARGV[2] latch lifetime ms
-- Returns -1 when ARGV[1] holds no permit (never granted, given back, or past its deadline:
-- then it may already be someone else's), 0 when it gave one back.
-- Publishes once, and only when a permit was freed.
-- Every check comes before the first write: Redis does not roll a failed script back.
-- Cost: every redis.call is most of a script's server time. Giving back the last permit
-- held makes six: GET, ZRANGE, TIME, DEL, SET, PUBLISH; one among live others the same with
-- ZREM for DEL (and a ZSCORE when this permit is not among the two earliest deadlines).
-- An undo that finds nothing (no holders): GET, ZRANGE, TIME, SET.
local owner = ARGV[1]
local done = redis.pcall('GET', KEYS[4])
if type(done) == 'table' then
  return redis.error_reply('WRONGTYPE release latch `' .. KEYS[4] .. '` holds a non-string value')
end
if done then
  -- A retry of a release that already ran (reply lost to a timeout or reconnect): answer the
  -- same thing again instead of releasing twice.
  return tonumber(done)
end
-- The two earliest deadlines: they say whether anyone's has passed (then the earliest has),
-- whether this permit is the only one, and usually which is this owner's.
local first = redis.pcall('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
if first.err then
  return redis.error_reply('WRONGTYPE semaphore holders `' .. KEYS[1] .. '` holds a non-sorted-set value')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline
if first[1] == owner then
  deadline = first[2]
elseif first[3] == owner then
  deadline = first[4]
elseif #first == 4 then
  deadline = redis.call('ZSCORE', KEYS[1], owner)
end
local result = -1
if deadline and tonumber(deadline) > now then
  result = 0
end
-- Writes that free memory come first: Redis before 7.0 refuses a script on a full server
-- (maxmemory) only at its first write, and only if that write may take memory.
local stale = #first > 0 and tonumber(first[2]) <= now
if #first == 0 then
  -- No holders: nothing to give back. A count without holders is left alone: it expires on
  -- its own, or it is not the semaphore's (another value at its key is nobody's to delete).
elseif #first == 2 and (result == 0 or stale) then
  -- The only entry goes (this permit, or one past its deadline): so does the count.
  redis.call('DEL', KEYS[1], KEYS[2])
else
  if result == 0 then
    redis.call('ZREM', KEYS[1], owner)
  end
  if stale then
    -- Expired holders leave; if nobody is left, the count goes with them. Without a stale
    -- entry, a live one other than this owner's stays (there were two or more, all live).
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    if redis.call('EXISTS', KEYS[1]) == 0 then
      redis.call('DEL', KEYS[2])
    end
  end
end
redis.call('SET', KEYS[4], result, 'PX', ARGV[2])
if result == 0 then
  redis.pcall('PUBLISH', KEYS[3], 'released')
end
return result
