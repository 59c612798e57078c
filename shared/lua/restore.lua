--[[
  Give closed orders' stock and their buyers' quota back, exactly once per order: the restored
  set is the guard, so a duplicate event, a second listener, the replay or a resent command
  after a reconnect all find the order already restored. One call takes a batch of one sale's
  orders (a burst of deadlines is restored in a few calls, not one per order).

  KEYS[1] available
  KEYS[2] restored set (order ids)
  KEYS[3] restored qty counter
  KEYS[4] meta (sale rules; field `settled` once the sale is settled)
  ARGV[1] sale id (announced on the stock channel)  ARGV[2] channel
  ARGV[3] buyer count prefix (buyer U's count is prefix .. U: the sale's hash tag, so the same
          slot; no TTL for a sale without end, else the one purchase.lua set)
  ARGV[1+3i], ARGV[2+3i], ARGV[3+3i] order i's id, qty and buyer

  A fixed key count: on a cluster, ioredis's auto-pipelining routes a script by its first key.
  The buyers' counts are not declared, so every one is read before anything is written: while a
  reshard moves the slot, reading one that has left fails the script here, having changed nothing
  (a script is not rolled back: failing after a write would lose that order's unit for good).

  Returns one entry per order, in order: 1 restored now, 0 restored before.
]]
local rcall = redis.call
local availableKey, restoredKey, restoredQtyKey, metaKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local saleId, channel, buysPrefix = ARGV[1], ARGV[2], ARGV[3]
local n = (#ARGV - 3) / 3
-- A settled sale's restored set is gone (settle_sale.lua), so the guard below would find every
-- order new. Nothing may restore there: a sale settles only once every order is final with its
-- stock back (restored_at set, in the same statement that settles it) and nothing is in flight, and
-- an ended sale takes no new order. What can still arrive is late: a duplicate expired event (its
-- close changes no row, so it restores nothing), or a sweep that read an order as unrestored just
-- before another one restored it and the sale settled. All of them were restored before.
if rcall('HEXISTS', metaKey, 'settled') == 1 then
  local before = {}
  for i = 1, n do before[i] = 0 end
  return before
end
local bought = {}
for i = 1, n do
  local buysKey = buysPrefix .. ARGV[3 + 3 * i]
  if bought[buysKey] == nil then bought[buysKey] = tonumber(rcall('GET', buysKey) or '0') end
end
local results, units = {}, 0
for i = 1, n do
  local orderId, qty, buysKey = ARGV[1 + 3 * i], tonumber(ARGV[2 + 3 * i]), buysPrefix .. ARGV[3 + 3 * i]
  results[i] = rcall('SADD', restoredKey, orderId)
  if results[i] == 1 then
    units = units + qty
    -- DECRBY keeps the key's TTL (or its lack of one): giving quota back never changes how long
    -- the limit holds. A count that reaches zero is deleted; the next purchase sets it afresh.
    -- (A buyer with two orders in the batch: the count as the first left it.)
    local left = bought[buysKey]
    if left > qty then
      rcall('DECRBY', buysKey, qty)
      bought[buysKey] = left - qty
    elseif left > 0 then
      rcall('DEL', buysKey)
      bought[buysKey] = 0
    end
  end
end
if units > 0 then
  rcall('INCRBY', availableKey, units)
  rcall('INCRBY', restoredQtyKey, units)
  rcall('PUBLISH', channel, saleId)
end
return results
