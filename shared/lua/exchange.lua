-- keys: 2
--[[
  Spend a solved challenge for a purchase token, judged by this master's clock, never the API's:
  the sale's window (a first-come sale refuses before its start; a waiting room and a draw take
  their joiners and entrants before it), the challenge's own expiry, and one solution, one token.

  KEYS[1] meta            sale rules (hash: startsAt, endsAt (0 = no end), admission)
  KEYS[2] challenge-used  the solution's mark once spent, by the challenge's signature
  ARGV[1] the challenge's expiry (ms), as its signed data says (shared/purchase/challenge.ts)
  ARGV[2] how long the mark outlives that expiry (ms): a failover to a master whose clock runs
          behind must still find it

  Returns {code, now}, now being this master's TIME (ms), where the token's life starts:
    { 1, now}   spent now
    {-1, now}   the sale is not loaded
    {-2, now}   not started (a first-come sale)
    {-3, now}   ended
    {-9, now}   this solution was spent already
    {-14, now}  the challenge has expired
]]
local rcall = redis.call
local metaKey, usedKey = KEYS[1], KEYS[2]
local expiresAt, markMargin = tonumber(ARGV[1]), tonumber(ARGV[2])
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local meta = rcall('HMGET', metaKey, 'startsAt', 'endsAt', 'admission')
if not meta[1] then return {-1, now} end
local startsAt, endsAt = tonumber(meta[1]), tonumber(meta[2])
if (meta[3] or 'first-come') == 'first-come' and now < startsAt then return {-2, now} end
-- Only exactly 0 means "no end", as in purchase.lua.
if endsAt ~= 0 and now >= endsAt then return {-3, now} end
if now >= expiresAt then return {-14, now} end
if not rcall('SET', usedKey, '1', 'PXAT', expiresAt + markMargin, 'NX') then return {-9, now} end
return {1, now}
