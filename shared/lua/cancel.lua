-- keys: 2
--[[
  The buyer cancels an order still queued (reserved, not yet written to Postgres): check that the
  order is queued and theirs, and note that a cancel was asked. Postgres then decides (the API
  inserts the order as cancelled; the writer's insert of the same id does nothing), and the stock
  comes back through restore.lua like any closed order's.

  The note is a write on purpose: the WAIT the caller sends next (REDIS_MIN_REPLICAS_ACK) then
  covers the reservation too, so Postgres never records an order whose reservation a failover could
  still lose (its restore would give back a unit that was never taken). It also tells a status
  lookup that Postgres may already hold this queued order.

  KEYS[1] queued hash (orderId -> winner entry)
  KEYS[2] cancels hash (orderId -> ms the cancel was asked)
  ARGV[1] orderId  ARGV[2] userId
  The note's time is this master's TIME.

  Returns the winner entry (`orderId|seq|qty|time|user`), or false when the order is not queued
  for this buyer (written already, another buyer's, or no such order).
]]
local rcall = redis.call
local queuedKey, cancelsKey = KEYS[1], KEYS[2]
local orderId, userId = ARGV[1], ARGV[2]
local entry = rcall('HGET', queuedKey, orderId)
if not entry then return false end
-- The user is the entry's last field and may itself hold '|': everything after the fourth one.
if string.match(entry, '^[^|]*|[^|]*|[^|]*|[^|]*|(.*)$') ~= userId then return false end
local time = rcall('TIME')
rcall('HSET', cancelsKey, orderId, tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
return entry
