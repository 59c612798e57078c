-- keys: n
--[[
  Finish a written batch: set each pending order's expiry key to fire at its deadline, move its id
  from the purchased set to the deadlines index (the listener's nudger reads it; a resent purchase
  finds the id in either), forget the batch's queued entries and drop the processing list.

  KEYS[1] processing list of this writer
  KEYS[2] queued hash
  KEYS[3] deadlines zset (orderId -> deadline ms)
  KEYS[4] purchased set
  KEYS[4+i] the expiry key of pending order i (P = #KEYS - 4 pending orders)
  ARGV[i] pending order i's id
  ARGV[P+i] its deadline (ms)
  ARGV[2P+1..] the batch's other ids (orders an earlier attempt left paid or closed)

  The queued entries of every id given go. Every expiry key is declared, new as it is: while a
  reshard moves the slot, Redis answers the whole call with ASK or TRYAGAIN before anything is
  written, and on the new master they are set where they belong. (A variable key count: the
  callers' connections must not auto-pipeline it.)

  Returns {set, overdue ids...}: the number of expiry keys set, then the ids of the orders whose
  deadline has already passed by this master's TIME, whose keys are not set (SET with a past PXAT
  emits `del`, not `expired`); the caller closes those orders itself, and their ids stay in the
  purchased set. Past is judged by the clock the keys expire by, never the writer's: a writer whose
  clock runs ahead still sets every key that can still fire.
]]
local rcall = redis.call
local processingKey, queuedKey, deadlinesKey, purchasedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pending = #KEYS - 4
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Up to CHUNK ids a command: one ZADD or SREM per order cost Redis more than the SETs themselves.
local CHUNK = 500

local scored, moved, overdue = {}, {}, {0}
for i = 1, pending do
  local orderId, deadline = ARGV[i], ARGV[pending + i]
  if tonumber(deadline) > now then
    rcall('SET', KEYS[4 + i], '1', 'PXAT', deadline)
    scored[#scored + 1] = deadline
    scored[#scored + 1] = orderId
    moved[#moved + 1] = orderId
  else
    overdue[#overdue + 1] = orderId
  end
end
-- In the same script as the SETs, so an id is never in both places nor in neither.
for i = 1, #moved, CHUNK do
  local last = math.min(i + CHUNK - 1, #moved)
  rcall('ZADD', deadlinesKey, unpack(scored, 2 * i - 1, 2 * last))
  rcall('SREM', purchasedKey, unpack(moved, i, last))
end
for i = 1, pending, CHUNK do
  rcall('HDEL', queuedKey, unpack(ARGV, i, math.min(i + CHUNK - 1, pending)))
end
for i = 2 * pending + 1, #ARGV, CHUNK do
  rcall('HDEL', queuedKey, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
end
rcall('DEL', processingKey)
overdue[1] = #moved
return overdue
