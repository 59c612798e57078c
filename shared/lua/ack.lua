--[[
  Finish a written batch: set each pending order's expiry key to fire at its deadline, move its id
  from the purchased set to the deadlines index (the listener's nudger reads it; a resent purchase
  finds the id in either), forget the queued entries and drop the processing list.

  KEYS[1] processing list of this writer
  KEYS[2] queued hash
  KEYS[3] deadlines zset (orderId -> deadline ms)
  KEYS[4] purchased set
  KEYS[5..] expiry keys of the orders still pending (P of them)
  ARGV[1] now (ms)
  ARGV[2..P+1] deadline (ms) of each expiry key, in KEYS order
  ARGV[P+2..2P+1] order id of each expiry key, in KEYS order
  ARGV[2P+2..] order ids of the whole batch

  Returns the number of expiry keys set. Keys whose deadline has already passed are not set
  (SET with a past PXAT emits `del`, not `expired`); the caller closes those orders itself, and
  their ids stay in the purchased set.
]]
local rcall = redis.call
local processingKey, queuedKey, deadlinesKey, purchasedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[1])
local pending = #KEYS - 4
local set = 0
for i = 1, pending do
  local deadline = tonumber(ARGV[1 + i])
  if deadline > now then
    local orderId = ARGV[1 + pending + i]
    rcall('SET', KEYS[4 + i], '1', 'PXAT', deadline)
    -- One step, so the id is never in both places nor in neither.
    rcall('ZADD', deadlinesKey, deadline, orderId)
    rcall('SREM', purchasedKey, orderId)
    set = set + 1
  end
end
for i = 2 * pending + 2, #ARGV, 500 do
  rcall('HDEL', queuedKey, unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
rcall('DEL', processingKey)
return set
