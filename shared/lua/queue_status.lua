-- keys: 4
--[[
  One buyer's place in a waiting room, read in one step (the API's GET .../queue/me and streams).

  KEYS[1] room  KEYS[2] queue  KEYS[3] passes  KEYS[4] available
  ARGV[1] buyer

  Returns {rank, open, admitted, total, pass, available, expired, now}
    rank: the buyer's 0-based place in the queue, -1 not joined; open: 1 once admit.lua opened the
    room; admitted: how many of the first places have had a pass; total: everyone who joined;
    pass: -1 none, 0 used, else its expiry (ms); expired: passes that ran out unused; now: this
    master's TIME (ms), which the buyer's view judges the pass's expiry and the sale's end by, as
    admit.lua and purchase.lua judge them.
]]
local rcall = redis.call
local roomKey, queueKey, passesKey, availableKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local buyer = ARGV[1]
local rank = rcall('ZRANK', queueKey, buyer) or -1
local room = rcall('HMGET', roomKey, 'phase', 'admitted', 'expired')
local pass = rcall('ZSCORE', passesKey, buyer)
local time = rcall('TIME')
return {
  rank, room[1] == 'open' and 1 or 0, tonumber(room[2] or '0'), rcall('ZCARD', queueKey),
  pass and tonumber(pass) or -1, tonumber(rcall('GET', availableKey) or '0'), tonumber(room[3] or '0'),
  tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000),
}
