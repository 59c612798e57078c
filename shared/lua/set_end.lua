-- keys: 1
--[[
  Move a live sale's end, earlier or later, by this master's TIME (purchase.lua judges the end by
  it): refused when the sale has ended by that clock, or when the new end is not after it. The
  caller has checked the same against Postgres's now() in the transaction that records it, so
  both clocks agree the sale is live and the new end is to come.

  KEYS[1] meta  sale rules (hash: startsAt, endsAt (0 = no end), ...)
  ARGV[1] the new endsAt (ms)

  Returns {code, Redis's now}:
     1  moved (or at that end already)
    -1  the sale is not loaded: nothing is written
    -3  the sale has ended
    -2  the new end is not after now, or not after the sale's start
]]
local rcall = redis.call
local metaKey = KEYS[1]
local endsAt = tonumber(ARGV[1])
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local meta = rcall('HMGET', metaKey, 'startsAt', 'endsAt')
if not meta[1] then return {-1, now} end
local startsAt, current = tonumber(meta[1]), tonumber(meta[2])
-- Only exactly 0 means "no end", as in purchase.lua.
if current ~= 0 and now >= current then return {-3, now} end
if endsAt <= now or endsAt <= startsAt then return {-2, now} end
rcall('HSET', metaKey, 'endsAt', endsAt)
return {1, now}
