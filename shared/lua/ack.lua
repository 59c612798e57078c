--[[
  Finish a written batch: set each pending order's expiry key to fire at its deadline, index the
  deadline for the listener's nudger, forget the queued entries and drop the processing list.

  KEYS[1] processing list of this writer
  KEYS[2] queued hash
  KEYS[3] deadlines zset (expiry key -> deadline ms)
  KEYS[4..] expiry keys of the orders still pending
  ARGV[1] now (ms)
  ARGV[2..#KEYS-2] deadline (ms) of each expiry key, in KEYS order
  ARGV[#KEYS-1..] order ids of the whole batch

  Returns the number of expiry keys set. Keys whose deadline has already passed are not set
  (SET with a past PXAT emits `del`, not `expired`); the caller closes those orders itself.
]]
local rcall = redis.call
local processingKey, queuedKey, deadlinesKey = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local set = 0
for i = 4, #KEYS do
  local deadline = tonumber(ARGV[i - 2])
  if deadline > now then
    rcall('SET', KEYS[i], '1', 'PXAT', deadline)
    rcall('ZADD', deadlinesKey, deadline, KEYS[i])
    set = set + 1
  end
end
for i = #KEYS - 1, #ARGV, 500 do
  rcall('HDEL', queuedKey, unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
rcall('DEL', processingKey)
return set
