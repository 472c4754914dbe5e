-- Close one order's record in one segment, returning what the order holds there, once.
-- KEYS[1] segment hash (left, initial), KEYS[2] order records of the segment
-- ARGV[1] order id, ARGV[2] closing mark: 'r' given back, 'x' a failed split rolled back
-- Returns {code, units, left}: 1 returned `units` now; 0 closed a record that held nothing here
-- (none, a pass, an empty part); 2 already closed earlier (`units` were returned then, nothing
-- changed); -1 the segment is not initialised. `left` is the level after the script.
-- A segment with no record of the order gets a closing record too (`r0`): a take of this order
-- that is late, or still walking, must find the order closed wherever it lands, and a take
-- never deducts where the order has a closing record (lua/stock/take.lua).
-- Every read and check comes before the first write: Redis does not roll back a script that
-- fails halfway.
local left = redis.call('HGET', KEYS[1], 'left')
if not left then
  return {-1, 0, 0}
end
local level = tonumber(left)
if not level then
  return redis.error_reply('WRONGTYPE not a dlock stock level: ' .. left)
end
local rec = redis.call('HGET', KEYS[2], ARGV[1])
local n = 0
if rec then
  n = tonumber(string.match(rec, '^%a(%d+)'))
  if not n then
    return redis.error_reply('WRONGTYPE not a dlock stock record: ' .. rec)
  end
  local kind = string.sub(rec, 1, 1)
  if kind == 'r' or kind == 'x' then
    return {2, n, level}
  end
end
if n > 0 then
  level = redis.call('HINCRBY', KEYS[1], 'left', n)
end
-- string.format, not `..`: Lua 5.1 prints numbers above 1e14 in exponent form.
redis.call('HSET', KEYS[2], ARGV[1], string.format('%s%d', ARGV[2], n))
if n > 0 then
  return {1, n, level}
end
return {0, 0, level}
