-- keys: n
--[[
  One instant of a sale's Redis side, for reconciliation: stock left, the purchase counter, every
  winner not yet acknowledged (the shared list and each writer's processing list) and the stock
  restored so far. Processing lists are found through the writers zset; they share the sale's slot.

  KEYS[1] available  KEYS[2] seq  KEYS[3] winners  KEYS[4] writers  KEYS[5] restored qty
  KEYS[6] variants left  KEYS[7] restored by variant (hashes by sku; absent for a sale of one variant)
  KEYS[7+i] the processing list of writer i of the writers zset, as the caller read it
  ARGV[i] writer i's id

  The caller reads the writers first so that every key is declared: while a reshard moves the
  slot, Redis then answers the whole call with ASK or TRYAGAIN (the client follows or retries it)
  instead of running it on the new master, where a batch not moved yet reads as empty. (A
  variable key count: the callers' connections must not auto-pipeline it.)

  Returns {available, seq, restoredQty, {sku, left, ...}, {sku, restored, ...}, entries...}, or false when the writers zset names a writer
  not in ARGV (one joined since the caller read it): the caller reads the writers again.
]]
local rcall = redis.call
-- writer id -> i, its processing list being KEYS[7 + i]
local listAt = {}
for i = 1, #ARGV do listAt[ARGV[i]] = i end
local writers = rcall('ZRANGE', KEYS[4], 0, -1)
for _, w in ipairs(writers) do
  if not listAt[w] then return false end
end
local out = {
  tonumber(rcall('GET', KEYS[1]) or '0'),
  tonumber(rcall('GET', KEYS[2]) or '0'),
  tonumber(rcall('GET', KEYS[5]) or '0'),
  rcall('HGETALL', KEYS[6]),
  rcall('HGETALL', KEYS[7]),
}
for _, e in ipairs(rcall('LRANGE', KEYS[3], 0, -1)) do out[#out + 1] = e end
for _, w in ipairs(writers) do
  for _, e in ipairs(rcall('LRANGE', KEYS[7 + listAt[w]], 0, -1)) do out[#out + 1] = e end
end
return out
