-- keys: 1
--[[
  The deadlines due by this master's TIME, for touch_due.lua: the expiry keys fire by this clock,
  so the nudger looks for them by it too, not by its own host's (one running late would touch them
  late, leaving each order to Redis's sampled expiry).

  KEYS[1] deadlines zset (orderId -> deadline ms; older writers stored the expiry key name)
  ARGV[1] how many at most
  ARGV[2] ms ahead of TIME to look (0 but in tests, which touch every deadline)

  Returns the due members, earliest first.
]]
local rcall = redis.call
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + tonumber(ARGV[2])
return rcall('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
