-- keys: 4
--[[
  Hand a batch of winners to one writer: move them from the shared list into the writer's own
  processing list and renew its lease. A writer that still holds an unfinished batch (it restarted
  under the same id) gets that batch back first.

  KEYS[1] winners
  KEYS[2] processing list of this writer
  KEYS[3] writers (zset writerId -> lease deadline ms)
  KEYS[4] available (stock left)
  ARGV[1] batch size  ARGV[2] writerId  ARGV[3] lease length (ms): the lease runs out that long after
  this master's TIME, the clock recover_writer.lua judges it by

  Returns {soldOut, entries}: the entries of the batch (none when there is nothing to write), and
  soldOut 1 when the sale has no unit left and no winner is queued behind this batch (it
  holds the last orders sold: the writer records sale.sold_out with them, docs/events.md), else 0.
]]
local rcall = redis.call
local winnersKey, processingKey, writersKey, availableKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local count, writerId = tonumber(ARGV[1]), ARGV[2]
local time = rcall('TIME')
local leaseUntil = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + tonumber(ARGV[3])

-- Judged after the batch leaves the list; a sale no longer loaded (no stock key) is never sold out.
local function soldOut()
  local left = rcall('GET', availableKey)
  return (left and tonumber(left) <= 0 and rcall('LLEN', winnersKey) == 0) and 1 or 0
end

local held = rcall('LRANGE', processingKey, 0, -1)
if #held > 0 then
  rcall('ZADD', writersKey, leaseUntil, writerId)
  return {soldOut(), held}
end
local batch = rcall('RPOP', winnersKey, count)
if not batch then return {0, {}} end
for i = 1, #batch, 500 do
  rcall('LPUSH', processingKey, unpack(batch, i, math.min(i + 499, #batch)))
end
rcall('ZADD', writersKey, leaseUntil, writerId)
return {soldOut(), batch}
