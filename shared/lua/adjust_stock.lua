-- keys: 4
--[[
  An operator's restock (units added) or removal (unsold units taken out) of one variant of a
  loaded sale, judged and written in one step: a removal takes only units still available, so a
  unit a buyer holds (queued, pending, paid) or is being sold in this instant is never taken.
  The caller changes the stock in Postgres in the transaction that holds the sale's row, so
  available + queued + pending + paid + restoring = stock holds for the variant and the sale.

  KEYS[1] meta           sale rules (hash: endsAt (0 = no end), stock, sku or variants, ...)
  KEYS[2] available      the sale's units left: the sum of its variants'
  KEYS[3] variants left  a sale of more than one variant: hash sku -> units left (absent for one)
  KEYS[4] stock changes  hash change id -> the change (JSON), until its Postgres commit is known
  ARGV[1] the variant's sku
  ARGV[2] units: > 0 added, < 0 removed
  ARGV[3] sale id (announced on the stock channel)  ARGV[4] the stock channel
  ARGV[5] the change's id  ARGV[6] the change as JSON ({sku, units, by})

  The change is recorded under its id with the units: if the caller's Postgres commit then fails,
  the replay finds it here without its audit row and records it in Postgres (stock-repair.ts).

  A restock announces the sale on the stock channel, as restore.lua does: API processes forget
  that they saw it (or a variant) sold out.

  Returns {code, n}:
    { 1, left}    done: the variant's units left after it
    {-1, 0}       the sale is not loaded: nothing is written (a reload takes the stock from Postgres)
    {-3, 0}       the sale has ended by this master's TIME
    {-7, left}    a removal of more than the variant's units left: nothing is written
    {-18, 0}      the sale has no variant of that sku
]]
local rcall = redis.call
local metaKey, availableKey, leftKey, changesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local sku, units = ARGV[1], tonumber(ARGV[2])
local saleId, channel = ARGV[3], ARGV[4]
local changeId, change = ARGV[5], ARGV[6]

local meta = rcall('HMGET', metaKey, 'stock', 'endsAt', 'variants', 'sku')
if not meta[1] then return {-1, 0} end
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local endsAt = tonumber(meta[2] or '0')
-- Only exactly 0 means "no end", as in purchase.lua.
if endsAt ~= 0 and now >= endsAt then return {-3, 0} end

local many = meta[3] ~= false
local left
if many then
  left = rcall('HGET', leftKey, sku)
  if not left then return {-18, 0} end
  left = tonumber(left)
else
  -- A sale of one variant: `available` is its units left (a sale loaded before variants: `default`).
  if sku ~= (meta[4] or 'default') then return {-18, 0} end
  left = tonumber(rcall('GET', availableKey) or '0')
end
if left + units < 0 then return {-7, left} end

rcall('INCRBY', availableKey, units)
if many then rcall('HINCRBY', leftKey, sku, units) end
rcall('HINCRBY', metaKey, 'stock', units)
rcall('HSET', changesKey, changeId, change)
if units > 0 then rcall('PUBLISH', channel, saleId) end
return {1, left + units}
