--[[
  Finish a written batch: set each pending order's expiry key to fire at its deadline, move its id
  from the purchased set to the deadlines index (the listener's nudger reads it; a resent purchase
  finds the id in either), forget the queued entries and drop the processing list.

  KEYS[1] processing list of this writer
  KEYS[2] queued hash
  KEYS[3] deadlines zset (orderId -> deadline ms)
  KEYS[4] purchased set
  ARGV[1] now (ms)
  ARGV[2] expiry key prefix (order O's key is prefix .. O: the sale's hash tag, so the same slot)
  ARGV[3] P, the number of pending orders
  ARGV[4..2P+3] order id and deadline (ms) of each pending order, in pairs
  ARGV[2P+4..] ids whose queued entries go: the batch (which holds the pending orders too)

  The expiry keys are new, so they are not declared (half the arguments): while a reshard moves
  the slot, the old master refuses the first SET before anything is written (`Script attempted to
  access a non local key`, retried), and on the new master they are set where they belong.

  Returns the number of expiry keys set. Keys whose deadline has already passed are not set
  (SET with a past PXAT emits `del`, not `expired`); the caller closes those orders itself, and
  their ids stay in the purchased set.
]]
local rcall = redis.call
local processingKey, queuedKey, deadlinesKey, purchasedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, prefix, pending = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local set = 0
for i = 4, 2 * pending + 3, 2 do
  local orderId, deadline = ARGV[i], tonumber(ARGV[i + 1])
  if deadline > now then
    rcall('SET', prefix .. orderId, '1', 'PXAT', deadline)
    -- One step, so the id is never in both places nor in neither.
    rcall('ZADD', deadlinesKey, deadline, orderId)
    rcall('SREM', purchasedKey, orderId)
    set = set + 1
  end
end
for i = 2 * pending + 4, #ARGV, 500 do
  rcall('HDEL', queuedKey, unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
rcall('DEL', processingKey)
return set
