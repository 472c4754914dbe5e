-- Reconcile one segment from its order records, atomically (O(records): an audit, not a hot path).
-- KEYS[1] segment hash (left, initial), KEYS[2] order records of the segment
-- Returns {initial, left, held, returned, holders, records}, or {-1} when not initialised.
-- held = units the records say orders hold; the segment is consistent when left + held == initial.
local seg = redis.call('HMGET', KEYS[1], 'initial', 'left')
if not seg[1] then
  return {-1}
end
local held, returned, holders, count = 0, 0, 0, 0
local all = redis.call('HGETALL', KEYS[2])
for i = 2, #all, 2 do
  local rec = all[i]
  local kind = string.sub(rec, 1, 1)
  local n = tonumber(string.match(rec, '^%a(%d+)'))
  if not n then
    return redis.error_reply('WRONGTYPE not a dlock stock record: ' .. rec)
  end
  count = count + 1
  if kind == 'w' or kind == 'p' then
    held = held + n
    if n > 0 then
      holders = holders + 1
    end
  else
    returned = returned + n
  end
end
return {tonumber(seg[1]), tonumber(seg[2]), held, returned, holders, count}
