--[[
  Finish a written batch: set each pending order's expiry key to fire at its deadline, move its id
  from the purchased set to the deadlines index (the listener's nudger reads it; a resent purchase
  finds the id in either), forget the batch's queued entries and drop the processing list.

  KEYS[1] processing list of this writer
  KEYS[2] queued hash
  KEYS[3] deadlines zset (orderId -> deadline ms)
  KEYS[4] purchased set
  ARGV[1] now (ms)
  ARGV[2] expiry key prefix (order O's key is prefix .. O: the sale's hash tag, so the same slot)
  ARGV[3] P, the number of pending orders
  ARGV[4..P+3] the pending orders' ids
  ARGV[P+4..2P+3] their deadlines (ms), in the same order
  ARGV[2P+4..] the batch's other ids (orders an earlier attempt left paid or closed)

  The queued entries of every id given go. The expiry keys are new, so they are not declared (half
  the arguments): while a reshard moves the slot, the old master refuses the first SET before
  anything is written (`Script attempted to access a non local key`, retried), and on the new
  master they are set where they belong.

  Returns the number of expiry keys set. Keys whose deadline has already passed are not set
  (SET with a past PXAT emits `del`, not `expired`); the caller closes those orders itself, and
  their ids stay in the purchased set.
]]
local rcall = redis.call
local processingKey, queuedKey, deadlinesKey, purchasedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, prefix, pending = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
-- Up to CHUNK ids a command: one ZADD or SREM per order cost Redis more than the SETs themselves.
local CHUNK = 500

local scored, moved = {}, {}
for i = 4, pending + 3 do
  local orderId, deadline = ARGV[i], ARGV[i + pending]
  if tonumber(deadline) > now then
    rcall('SET', prefix .. orderId, '1', 'PXAT', deadline)
    scored[#scored + 1] = deadline
    scored[#scored + 1] = orderId
    moved[#moved + 1] = orderId
  end
end
-- In the same script as the SETs, so an id is never in both places nor in neither.
for i = 1, #moved, CHUNK do
  local last = math.min(i + CHUNK - 1, #moved)
  rcall('ZADD', deadlinesKey, unpack(scored, 2 * i - 1, 2 * last))
  rcall('SREM', purchasedKey, unpack(moved, i, last))
end
for i = 4, pending + 3, CHUNK do
  rcall('HDEL', queuedKey, unpack(ARGV, i, math.min(i + CHUNK - 1, pending + 3)))
end
for i = 2 * pending + 4, #ARGV, CHUNK do
  rcall('HDEL', queuedKey, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
end
rcall('DEL', processingKey)
return #moved
