--[[
  Give an expired order's stock and the buyer's quota back, exactly once per order: the restored
  set is the guard, so a duplicate event, a second listener, the replay or a resent command
  after a reconnect all find the order already restored.

  KEYS[1] available
  KEYS[2] restored set (order ids)
  KEYS[3] restored qty counter
  KEYS[4] buyer's count (no TTL for a sale without end, else the one purchase.lua set)
  ARGV[1] orderId  ARGV[2] qty  ARGV[3] sale id (announced on the stock channel)  ARGV[4] channel

  Returns 1 restored now, 0 restored before.
]]
local rcall = redis.call
local availableKey, restoredKey, restoredQtyKey, buysKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local orderId, qty = ARGV[1], tonumber(ARGV[2])
if rcall('SADD', restoredKey, orderId) == 0 then return 0 end
rcall('INCRBY', availableKey, qty)
rcall('INCRBY', restoredQtyKey, qty)
local bought = tonumber(rcall('GET', buysKey) or '0')
-- DECRBY keeps the key's TTL (or its lack of one): giving quota back never changes how long the
-- limit holds. A count that reaches zero is deleted; the next purchase sets it afresh.
if bought > qty then
  rcall('DECRBY', buysKey, qty)
elseif bought > 0 then
  rcall('DEL', buysKey)
end
rcall('PUBLISH', ARGV[4], ARGV[3])
return 1
