-- keys: 1
--[[
  Spend a purchase token without a purchase (a `pow` draw's entry), judged by this master's clock,
  never the API's, as purchase.lua judges a token it spends.

  KEYS[1] token-used  the token's mark once spent, by its id (value: what spent it)
  ARGV[1] the token's expiry (ms), as its signed body says (shared/purchase/challenge.ts)
  ARGV[2] how long the mark outlives that expiry (ms): a failover to a master whose clock runs
          behind must still find it
  ARGV[3] what spends it (the mark's value: 'entry')

  Returns:
     1   spent now
    -9   spent already
    -14  expired by this master's TIME
]]
local rcall = redis.call
local usedKey = KEYS[1]
local expiresAt, markMargin, spentBy = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

if now >= expiresAt then return -14 end
if not rcall('SET', usedKey, spentBy, 'PXAT', expiresAt + markMargin, 'NX') then return -9 end
return 1
