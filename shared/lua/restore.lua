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
  KEYS[7] variants left, a sale of several variants' hash sku -> units left (purchase.lua, "Variants")
  KEYS[8] restored by variant, hash sku -> units restored (KEYS[3], per variant, for reconciliation)
  KEYS[9] variant buys, hash `<sku>:<buyer>` -> count (a sale with perVariant)
  KEYS[10..] each buyer's count in the older format, a key of its own, once per buyer
  ARGV[1] sale id (announced on the stock channel)  ARGV[2] channel
  ARGV[6i-3], ARGV[6i-2], ARGV[6i-1], ARGV[6i], ARGV[6i+1], ARGV[6i+2] order i's id, qty, buyer, the
          index in KEYS of the buyer's own key, 1 if it expired unpaid (0: cancelled), and its sku

  A unit goes back to its own variant: on a sale of several, to the order's sku field of KEYS[7]
  (a field exists for each of its variants) as well as to `available`, their sum. A sale of one has
  no such hash: `available` is its variant's.

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
local unpaidKey = KEYS[6]
local leftKey, restoredByKey = KEYS[7], KEYS[8]
local n = (#ARGV - 2) / 6
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
-- A count kept as a hash field of KEYS[at]: the buyer's (5), or the buyer's of one variant (9).
local function fromField(at, field, qty)
  local key = KEYS[at]
  local left = tonumber(rcall('HGET', key, field) or '0')
  if left > qty then
    rcall('HINCRBY', key, field, -qty)
  elseif left > 0 then
    rcall('HDEL', key, field)
  end
end
local results, units = {}, 0
for i = 1, n do
  local orderId, qty, buyer, at = ARGV[6 * i - 3], tonumber(ARGV[6 * i - 2]), ARGV[6 * i - 1], tonumber(ARGV[6 * i])
  local sku = ARGV[6 * i + 2]
  results[i] = rcall('SADD', restoredKey, orderId)
  if results[i] == 1 then
    units = units + qty
    local rest = fromOwnKey(at, qty)
    if rest > 0 then fromField(5, buyer, rest) end
    -- Counted once per order, with its restore: the quota comes back, the expiry stays on record.
    if ARGV[6 * i + 1] == '1' then rcall('HINCRBY', unpaidKey, buyer, 1) end
    if sku ~= '' and rcall('HEXISTS', leftKey, sku) == 1 then
      rcall('HINCRBY', leftKey, sku, qty)
      rcall('HINCRBY', restoredByKey, sku, qty)
      fromField(9, sku .. ':' .. buyer, qty)
    end
  end
end
if units > 0 then
  rcall('INCRBY', availableKey, units)
  rcall('INCRBY', restoredQtyKey, units)
  rcall('PUBLISH', channel, saleId)
end
return results
