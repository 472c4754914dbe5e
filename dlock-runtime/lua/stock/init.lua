-- Set one segment of a segmented stock to a starting level, forgetting every order record.
-- KEYS[1] segment hash (left, initial), KEYS[2] order records of the segment
-- ARGV[1] units
-- Only called after the item's metadata was claimed (stock_meta.lua), so overwriting is intended.
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'left', ARGV[1], 'initial', ARGV[1])
return 1
