-- keys: n
--[[
  Give closed orders' stock and their buyers' quota back, exactly once per order: the restored
  set is the guard, so a duplicate event, a second listener, the replay or a resent command
  after a reconnect all find the order already restored. One call takes a batch of one sale's
  orders (a burst of deadlines is restored in a few calls, not one per order).

  KEYS[1] available
  KEYS[2] restored set (order ids)
  KEYS[3] restored qty counter
  KEYS[4] meta (sale rules; field `settled` once the sale is settled)
  KEYS[5] buy counts, the sale's hash buyer -> count
  KEYS[6] unpaid, the sale's hash buyer -> orders expired unpaid (purchase.lua bounds it)
  KEYS[7..] each buyer's count in the older format, a key of its own, once per buyer
  ARGV[1] sale id (announced on the stock channel)  ARGV[2] channel
  ARGV[5i-2], ARGV[5i-1], ARGV[5i], ARGV[5i+1], ARGV[5i+2] order i's id, qty, buyer, the index in
          KEYS of the buyer's own key, and 1 if it expired unpaid (0: cancelled)

  A buyer's count is the sum of their own key (written by the previous release, or for a sale
  loaded with LEGACY_BUY_COUNTS) and their field in the hash (see purchase.lua, "Buyer counts").
  Quota goes back to the own key first while it holds any, the rest to the field; a key or field
  that reaches zero is deleted, and neither TTL changes (no TTL for a sale without end, else the
  one purchase.lua set). The previous release's restore.lua gives back to the own key only: on a
  sale with the hash it would leave the buyer's quota taken, one more reason new sales write the
  hash only once no process of that release runs (LEGACY_BUY_COUNTS until then).

  Every key is declared, the buyers' counts too: while a reshard moves the slot, Redis then
  answers the whole call with ASK or TRYAGAIN (the client follows or retries it) instead of
  running it on the new master, where a count not moved yet reads as 0 and would never be given
  back. (A variable key count: the callers' connections must not auto-pipeline it.)

  Returns one entry per order, in order: 1 restored now, 0 restored before.
]]
local rcall = redis.call
local availableKey, restoredKey, restoredQtyKey, metaKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local saleId, channel = ARGV[1], ARGV[2]
local buyCountsKey, unpaidKey = KEYS[5], KEYS[6]
local n = (#ARGV - 2) / 5
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
-- DECRBY and HINCRBY keep the key's TTL (or its lack of one): giving quota back never changes how
-- long the limit holds. A count that reaches zero is deleted; the next purchase sets it afresh.
-- Returns what the own key (KEYS[at]) did not hold.
local function fromOwnKey(at, qty)
  local buysKey = KEYS[at]
  local left = tonumber(rcall('GET', buysKey) or '0')
  if left > qty then
    rcall('DECRBY', buysKey, qty)
  elseif left > 0 then
    rcall('DEL', buysKey)
  end
  return math.max(qty - left, 0)
end
local function fromHash(buyer, qty)
  local left = tonumber(rcall('HGET', buyCountsKey, buyer) or '0')
  if left > qty then
    rcall('HINCRBY', buyCountsKey, buyer, -qty)
  elseif left > 0 then
    rcall('HDEL', buyCountsKey, buyer)
  end
end
local results, units = {}, 0
for i = 1, n do
  local orderId, qty, buyer, at = ARGV[5 * i - 2], tonumber(ARGV[5 * i - 1]), ARGV[5 * i], tonumber(ARGV[5 * i + 1])
  results[i] = rcall('SADD', restoredKey, orderId)
  if results[i] == 1 then
    units = units + qty
    local rest = fromOwnKey(at, qty)
    if rest > 0 then fromHash(buyer, rest) end
    -- Counted once per order, with its restore: the quota comes back, the expiry stays on record.
    if ARGV[5 * i + 2] == '1' then rcall('HINCRBY', unpaidKey, buyer, 1) end
  end
end
if units > 0 then
  rcall('INCRBY', availableKey, units)
  rcall('INCRBY', restoredQtyKey, units)
  rcall('PUBLISH', channel, saleId)
end
return results
