"""The Lua scripts the nodes run: one call reads or writes a whole batch of rows on a node, so
a batch costs one round trip per shard and no Python loop over ids.

A row is a hash `<prefix>:r:<id>` whose fields are the versions that wrote it and whose
values are the row's float32 bytes (every table's columns, the tables in name order); an empty
value is a deleted row. Version v of a row is its field with the largest version <= v and
>= v's base (the version hash's `base`), so a delta writes only the rows it changed, a base
only the live rows (older fields are not read), and a reader pinned to v never sees a newer
write.
Ids travel as little-endian int64 bytes (struct.unpack '<i8').
"""

# KEYS[1]: the version's hash; ARGV: version, ids, row bytes, prefix.
# The version's `complete` mark is checked first: a node that lost its data (restarted empty)
# answers an error, never zeros.
FETCH = """
if redis.call('HEXISTS', KEYS[1], 'complete') == 0 then
  return redis.error_reply('NOVERSION this node does not hold the version')
end
local v = tonumber(ARGV[1])
local base = tonumber(redis.call('HGET', KEYS[1], 'base') or '0')
local width = tonumber(ARGV[3])
local zero = string.rep('\\0', width)
local out = {}
for i = 0, #ARGV[2] / 8 - 1 do
  local id = struct.unpack('<i8', ARGV[2], i * 8 + 1)
  local h = redis.call('HGETALL', string.format('%s%d', ARGV[4], id))
  local best, val = -1, zero
  for j = 1, #h, 2 do
    local f = tonumber(h[j])
    if f <= v and f >= base and f > best then best = f; val = h[j + 1] end
  end
  if #val == 0 then val = zero end
  out[#out + 1] = val
end
return table.concat(out)
"""

# ARGV: version, ids, values (width bytes each; width 0: deletions), width, prefix.
WRITE = """
local w = tonumber(ARGV[4])
for i = 0, #ARGV[2] / 8 - 1 do
  local id = struct.unpack('<i8', ARGV[2], i * 8 + 1)
  redis.call('HSET', string.format('%s%d', ARGV[5], id), ARGV[1],
             string.sub(ARGV[3], i * w + 1, (i + 1) * w))
end
return #ARGV[2] / 8
"""

# KEYS: rows. ARGV[1]: the floor (the oldest version still read), ARGV[2]: its base (no
# reader looks below it). Each row keeps its newest field in [base, floor] and every newer
# one (a hash left without fields is gone); a row whose only field left is a deletion goes.
TRIM = """
local floor = tonumber(ARGV[1])
local base = tonumber(ARGV[2] or '0')
local removed = 0
for _, key in ipairs(KEYS) do
  local fields = redis.call('HKEYS', key)
  local keep = -1
  for _, f in ipairs(fields) do
    local n = tonumber(f)
    if n <= floor and n >= base and n > keep then keep = n end
  end
  for _, f in ipairs(fields) do
    local n = tonumber(f)
    if n < keep or n < base then redis.call('HDEL', key, f); removed = removed + 1 end
  end
  if keep >= 0 and redis.call('HLEN', key) == 1 and
      redis.call('HSTRLEN', key, tostring(keep)) == 0 then
    redis.call('DEL', key)
  end
end
return removed
"""
