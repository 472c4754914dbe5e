-- One step of a take: try one segment for one order, atomically, and leave a record.
-- KEYS[1] segment hash (left, initial), KEYS[2] order records of the segment (order id -> record)
-- ARGV[1] order id, ARGV[2] units wanted here, ARGV[3] mode, ARGV[4] the order's whole quantity
-- Modes: 'w' whole (take all units here, or record a pass), 'p' part of a split order (take what
-- is here, up to ARGV[2]).
-- Records: w0 passed | w<q> holds q | p<n>/<q> holds n of a split order of q | r<n> gave n back |
-- x<n> split rolled back, n returned. A take writes a record once from nothing (or w0 -> p in
-- part mode); a give-back closes it (-> r/x), or writes `r0` where the order has none yet, since
-- a take of a cancelled order may still land here later. A closed record is final: no mode
-- deducts past it or rewrites it, it is only reported (code 2). So every attempt of one order
-- id, retries and concurrent duplicates alike, reads the same history here and makes the same
-- decision, and a cancelled order holds nothing whichever of its take and give-back came first.
-- Returns {code, units, left, record}: 1 took `units`; 0 took nothing; 2 the order already has
-- `record` here (nothing changed); -1 the segment is not initialised.
local left = redis.call('HGET', KEYS[1], 'left')
if not left then
  return {-1, 0, 0, ''}
end
left = tonumber(left)
local order, want, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rec = redis.call('HGET', KEYS[2], order)
if mode == 'p' then
  -- Only a pass may become a part: a part is already taken, a closed record is final.
  if rec and rec ~= 'w0' then
    return {2, 0, left, rec}
  end
  local n = math.min(left, want)
  if n > 0 then
    redis.call('HINCRBY', KEYS[1], 'left', -n)
  end
  -- string.format, not `..`: Lua 5.1 prints numbers above 1e14 in exponent form.
  redis.call('HSET', KEYS[2], order, string.format('p%d/%s', n, ARGV[4]))
  return {1, n, left - n, ''}
end
-- Any record, closed ones included, decides this order here: the caller reads it.
if rec then
  return {2, 0, left, rec}
end
if left >= want then
  redis.call('HINCRBY', KEYS[1], 'left', -want)
  redis.call('HSET', KEYS[2], order, 'w' .. ARGV[2])
  return {1, want, left - want, ''}
end
-- The pass: a later attempt of this order must not take here once it took further along.
redis.call('HSET', KEYS[2], order, 'w0')
return {0, 0, left, ''}
