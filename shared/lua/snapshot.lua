--[[
  One instant of a sale's Redis side, for reconciliation: stock left, the purchase counter, every
  winner not yet acknowledged (the shared list and each writer's processing list) and the stock
  restored so far. Processing lists are found through the writers zset; they share the sale's slot.

  KEYS[1] available  KEYS[2] seq  KEYS[3] winners  KEYS[4] writers  KEYS[5] restored qty
  ARGV[1] processing key prefix (the key of writer W is prefix .. W)

  Returns {available, seq, restoredQty, entries...}.
]]
local rcall = redis.call
local out = {
  tonumber(rcall('GET', KEYS[1]) or '0'),
  tonumber(rcall('GET', KEYS[2]) or '0'),
  tonumber(rcall('GET', KEYS[5]) or '0'),
}
for _, e in ipairs(rcall('LRANGE', KEYS[3], 0, -1)) do out[#out + 1] = e end
for _, w in ipairs(rcall('ZRANGE', KEYS[4], 0, -1)) do
  for _, e in ipairs(rcall('LRANGE', ARGV[1] .. w, 0, -1)) do out[#out + 1] = e end
end
return out
