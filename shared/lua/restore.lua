--[[
  Give closed orders' stock and their buyers' quota back, exactly once per order: the restored
  set is the guard, so a duplicate event, a second listener, the replay or a resent command
  after a reconnect all find the order already restored. One call takes a batch of one sale's
  orders (a burst of deadlines is restored in a few calls, not one per order).

  KEYS[1] available
  KEYS[2] restored set (order ids)
  KEYS[3] restored qty counter
  KEYS[4..] each buyer's count, once per buyer (no TTL for a sale without end, else the one
          purchase.lua set)
  ARGV[1] sale id (announced on the stock channel)  ARGV[2] channel
  ARGV[3i], ARGV[3i+1], ARGV[3i+2] order i's id, qty and the index in KEYS of its buyer's count

  Every key is declared, the buyers' counts too: while a reshard moves the slot, Redis then
  answers the whole call with ASK or TRYAGAIN (the client follows or retries it) instead of
  running it on the new master, where a count not moved yet reads as 0 and would never be given
  back. (A variable key count: the callers' connections must not auto-pipeline it.)

  Returns one entry per order, in order: 1 restored now, 0 restored before.
]]
local rcall = redis.call
local availableKey, restoredKey, restoredQtyKey = KEYS[1], KEYS[2], KEYS[3]
local saleId, channel = ARGV[1], ARGV[2]
local results, units = {}, 0
for i = 1, (#ARGV - 2) / 3 do
  local orderId, qty, buysKey = ARGV[3 * i], tonumber(ARGV[3 * i + 1]), KEYS[tonumber(ARGV[3 * i + 2])]
  results[i] = rcall('SADD', restoredKey, orderId)
  if results[i] == 1 then
    units = units + qty
    -- DECRBY keeps the key's TTL (or its lack of one): giving quota back never changes how long
    -- the limit holds. A count that reaches zero is deleted; the next purchase sets it afresh.
    local left = tonumber(rcall('GET', buysKey) or '0')
    if left > qty then
      rcall('DECRBY', buysKey, qty)
    elseif left > 0 then
      rcall('DEL', buysKey)
    end
  end
end
if units > 0 then
  rcall('INCRBY', availableKey, units)
  rcall('INCRBY', restoredQtyKey, units)
  rcall('PUBLISH', channel, saleId)
end
return results
