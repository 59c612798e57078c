--[[
  Reserve stock for one buyer: every check and every write in one atomic step.

  KEYS[1] meta       sale rules (hash: startsAt, endsAt, perUser, maxPerOrder)
  KEYS[2] available  stock left
  KEYS[3] buys       this buyer's count (SETEX'd)
  KEYS[4] winners    list the order writer drains
  KEYS[5] queued     hash orderId -> entry, for status lookups until the order is in Postgres
  KEYS[6] seq        purchase counter
  KEYS[7] purchased  set of order ids reserved so far

  ARGV[1] now (ms, from the caller's clock)
  ARGV[2] qty
  ARGV[3] orderId
  ARGV[4] userId
  ARGV[5] buy-count TTL floor (s)

  Returns {code, n}:
    { 1, available after}   reserved (or reserved before under this order id: nothing changes)
    {-1, 0}                 sale not found
    {-2, 0}                 not started
    {-3, 0}                 ended
    {-4, maxPerOrder}       qty above max per order
    {-5, bought}            per-user limit reached
    {-6, 0}                 sold out
    {-7, available}         fewer left than asked
]]
local rcall = redis.call
local metaKey, availableKey, buysKey, winnersKey, queuedKey, seqKey, purchasedKey =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local now = tonumber(ARGV[1])
local qty = tonumber(ARGV[2])
local orderId, userId = ARGV[3], ARGV[4]
local ttlFloor = tonumber(ARGV[5])

-- A client resends a script whose reply a dropped connection lost (ioredis does after a Redis
-- restart); run twice, it would take the stock twice for one order.
if rcall('SISMEMBER', purchasedKey, orderId) == 1 then
  return {1, tonumber(rcall('GET', availableKey) or '0')}
end

local meta = rcall('HMGET', metaKey, 'startsAt', 'endsAt', 'perUser', 'maxPerOrder')
if not meta[1] then return {-1, 0} end
local startsAt, endsAt = tonumber(meta[1]), tonumber(meta[2])
local perUser, maxPerOrder = tonumber(meta[3]), tonumber(meta[4])

if now < startsAt then return {-2, 0} end
if endsAt > 0 and now >= endsAt then return {-3, 0} end
if qty > maxPerOrder then return {-4, maxPerOrder} end

-- The buyer's limit is checked before stock is touched: a repeat click never burns stock.
local bought = tonumber(rcall('GET', buysKey) or '0')
if bought + qty > perUser then return {-5, bought} end

local available = tonumber(rcall('GET', availableKey) or '0')
if available <= 0 then return {-6, 0} end
if available < qty then return {-7, available} end

available = rcall('DECRBY', availableKey, qty)
rcall('SADD', purchasedKey, orderId)
local seq = rcall('INCR', seqKey)
local ttl = ttlFloor
if endsAt > 0 then ttl = ttl + math.ceil((endsAt - now) / 1000) end
rcall('SETEX', buysKey, ttl, bought + qty)
local entry = orderId .. '|' .. seq .. '|' .. qty .. '|' .. now .. '|' .. userId
rcall('LPUSH', winnersKey, entry)
rcall('HSET', queuedKey, orderId, entry)
return {1, available}
