-- keys: 2
--[[
  The buyer cancels an order still queued (reserved, not yet written to Postgres): check that the
  order is still queued as the caller found it, theirs, and note that a cancel was asked. Postgres then decides (the API
  inserts the order as cancelled; the writer's insert of the same id does nothing), and the stock
  comes back through restore.lua like any closed order's.

  The note is a write on purpose: the WAIT the caller sends next (REDIS_MIN_REPLICAS_ACK) then
  covers the reservation too, so Postgres never records an order whose reservation a failover could
  still lose (its restore would give back a unit that was never taken). It also tells a status
  lookup that Postgres may already hold this queued order.

  KEYS[1] queued hash (orderId -> winner entry)
  KEYS[2] cancels hash (orderId -> ms the cancel was asked)
  ARGV[1] orderId  ARGV[2] its winner entry as the caller read it and found this buyer's
  The note's time is this master's TIME. The entry is compared whole, never parsed: its format is
  read in one place (shared/runtime/ids.ts).

  Returns 1 noted, or 0 when the order is no longer queued with that entry (written meanwhile).
]]
local rcall = redis.call
local queuedKey, cancelsKey = KEYS[1], KEYS[2]
local orderId, entry = ARGV[1], ARGV[2]
if rcall('HGET', queuedKey, orderId) ~= entry then return 0 end
local time = rcall('TIME')
rcall('HSET', cancelsKey, orderId, tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
return 1
