-- Return what one order holds in one segment, once.
-- KEYS[1] segment hash (left, initial), KEYS[2] order records of the segment
-- ARGV[1] order id, ARGV[2] closing mark: 'r' given back, 'x' a failed split rolled back
-- Returns {code, units, kind}: 1 returned `units` now; 0 the order holds nothing here (a pass);
-- 2 already closed earlier (`units` were returned then); -2 no record (the order never came
-- here); -1 the segment is not initialised. `kind` is the record's first letter.
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  return {-2, 0, ''}
end
local kind = string.sub(rec, 1, 1)
local n = tonumber(string.match(rec, '^%a(%d+)'))
if not n then
  return redis.error_reply('WRONGTYPE not a dlock stock record: ' .. rec)
end
if kind == 'r' or kind == 'x' then
  return {2, n, kind}
end
if n == 0 then
  return {0, 0, kind}
end
if not redis.call('HGET', KEYS[1], 'left') then
  return {-1, 0, kind}
end
redis.call('HINCRBY', KEYS[1], 'left', n)
redis.call('HSET', KEYS[2], ARGV[1], string.format('%s%d', ARGV[2], n))
return {1, n, kind}
