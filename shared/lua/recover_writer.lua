-- keys: 3
--[[
  Re-drive the batch of a writer whose lease ran out (it crashed or hung): its entries go back to
  the consuming end of the winners list. Inserts are idempotent on the order id, so a batch that
  was in fact written is harmless to write again.

  KEYS[1] winners
  KEYS[2] processing list of the dead writer
  KEYS[3] writers zset
  ARGV[1] writerId
  Whether the lease ran out is judged by this master's TIME, as claim.lua set it.

  Returns the number of entries re-driven; 0 when the writer renewed its lease meanwhile.
]]
local rcall = redis.call
local winnersKey, processingKey, writersKey = KEYS[1], KEYS[2], KEYS[3]
local writerId = ARGV[1]
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(rcall('ZSCORE', writersKey, writerId) or '0')
if lease > now then return 0 end
local held = rcall('LRANGE', processingKey, 0, -1)
-- The list holds the batch newest-first; RPUSH in that order puts the oldest at the consuming end.
for i = 1, #held, 500 do
  rcall('RPUSH', winnersKey, unpack(held, i, math.min(i + 499, #held)))
end
rcall('DEL', processingKey)
rcall('ZREM', writersKey, writerId)
return #held
