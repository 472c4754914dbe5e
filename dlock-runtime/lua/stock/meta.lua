-- Claim the metadata of a segmented stock: the total and the segment count it was set up with.
-- KEYS[1] metadata hash
-- ARGV[1] total units, ARGV[2] segment count, ARGV[3] '1' to overwrite (reinit), '0' otherwise
-- Returns {1, total, segments} when written, {0, total, segments} of the existing set-up otherwise.
-- Without it a second init, or an init with another segment count (other keys), would silently
-- create a second stock beside the first.
local old = redis.call('HMGET', KEYS[1], 'total', 'segments')
if old[1] and ARGV[3] ~= '1' then
  return {0, tonumber(old[1]), tonumber(old[2])}
end
redis.call('HSET', KEYS[1], 'total', ARGV[1], 'segments', ARGV[2])
return {1, tonumber(ARGV[1]), tonumber(ARGV[2])}
