-- keys: 4
--[[
  A buyer joins a sale's waiting room, once. Before the room opens (admit.lua opens it at the start)
  a joiner gets a place in [0, 1) from the sale's seed and their id: the pre-queue, in an order
  nobody picks by arriving early. Once it is open, a joiner goes to the tail (1 + arrival number),
  behind everyone who joined before. Places never change after the opening: admit.lua counts how
  many of the first places it has admitted, so nobody is admitted twice and nobody skipped.

  KEYS[1] meta       sale rules (startsAt, endsAt, challenge, admission, seed)
  KEYS[2] room       the room's state (phase: pre until admit.lua opens it, then open; tail: arrivals after)
  KEYS[3] queue      zset buyer -> place
  KEYS[4] tokenUsed  the checked purchase token's mark once it joined (a 'pow' sale); unused without a token

  ARGV[1] buyer
  ARGV[2] 1 when the API checked this buyer's purchase token for this sale
  ARGV[3] the token's expiry (ms)
  ARGV[4] how long its mark outlives the expiry (ms)

  The end and the token's expiry are judged by this master's TIME, as purchase.lua judges them.

  Returns {code, joined}:
    { 1, 1}   joined now          { 1, 0}   had joined before: nothing changes
    {-1, 0}   sale not found      {-3, 0}   ended
    {-8, 0}   a purchase token is required ('pow' sale)
    {-9, 0}   this purchase token was used already
    {-13, 0}  the sale has no waiting room
    {-14, 0}  this purchase token has expired
]]
local rcall = redis.call
local metaKey, roomKey, queueKey, tokenUsedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local buyer = ARGV[1]
local tokenChecked = ARGV[2] == '1'
local tokenUntil = tonumber(ARGV[3])
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local meta = rcall('HMGET', metaKey, 'endsAt', 'challenge', 'admission', 'seed')
if not meta[1] then return {-1, 0} end
if meta[3] ~= 'queue' then return {-13, 0} end
-- Idempotent: a repeat join, from any device, keeps the place it has, token or not.
if rcall('ZSCORE', queueKey, buyer) then return {1, 0} end
local endsAt = tonumber(meta[1])
if endsAt ~= 0 and now >= endsAt then return {-3, 0} end
if meta[2] == 'pow' then
  if not tokenChecked then return {-8, 0} end
  if tokenUntil <= now then return {-14, 0} end
  if rcall('EXISTS', tokenUsedKey) == 1 then return {-9, 0} end
end

local place
if rcall('HGET', roomKey, 'phase') == 'open' then
  place = 1 + rcall('HINCRBY', roomKey, 'tail', 1)
else
  -- The first 52 bits of sha1(seed:buyer), as a fraction: a shuffle anyone holding the seed can redo.
  place = tonumber(string.sub(redis.sha1hex(meta[4] .. ':' .. buyer), 1, 13), 16) / 4503599627370496
end
rcall('ZADD', queueKey, place, buyer)
if tokenChecked then rcall('SET', tokenUsedKey, 'queue', 'PXAT', tokenUntil + tonumber(ARGV[4])) end
return {1, 1}
