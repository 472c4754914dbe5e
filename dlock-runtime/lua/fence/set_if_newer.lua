-- Write a value unless a higher fencing token was already written at its key (fence.rs).
-- KEYS[1] fenced value: a hash {value = <bytes>, fence = <highest token seen, decimal>}
-- ARGV[1] the writer's token (decimal, no leading zeros, 1 .. 2^64 - 1), ARGV[2] the value
-- Returns {1, ARGV[1]} written (an equal token re-writes: the same hold writing again);
-- {0, highest} refused, nothing changed. Tokens travel as strings both ways.
-- Every check comes before the first write: Redis does not roll a failed script back.

-- Decimal strings without leading zeros: the shorter is the lower, equal lengths compare
-- digit by digit. Lua numbers are doubles, exact only up to 2^53, and a token is any u64.
local function lower(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' then
  if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE fenced value `' .. KEYS[1] .. '` holds a ' .. kind .. ', not a hash')
  end
  -- A hash without a well-formed fence was not written here: overwriting two of its fields
  -- would corrupt whatever owns it, and an unknown highest token cannot be compared.
  local seen = redis.call('HGET', KEYS[1], 'fence')
  if not seen or #seen > 20 or not string.match(seen, '^[1-9]%d*$') then
    return redis.error_reply('WRONGTYPE fenced value `' .. KEYS[1] .. '` is a hash without a valid `fence` field')
  end
  if lower(ARGV[1], seen) then
    return {0, seen}
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', ARGV[1])
return {1, ARGV[1]}
