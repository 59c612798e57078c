-- keys: 1
--[[
  End a sale early: bring its end forward to ARGV[1], never push it back. purchase.lua reads
  endsAt from this hash on every call, so the next purchase at or after that instant is refused
  `ended`. A sale ended before it started gets its start moved to the same instant, so it reads
  as ended rather than not started.

  KEYS[1] meta  sale rules (hash: startsAt, endsAt (0 = no end), ...)
  ARGV[1] endsAt (ms, from the caller's clock)

  Returns:
     1  the end was brought forward
     0  the sale already ended at or before ARGV[1]: nothing changes
    -1  the sale is not loaded: nothing is written (a partial hash would stop load_sale loading it)
]]
local rcall = redis.call
local metaKey = KEYS[1]
local endsAt = tonumber(ARGV[1])

local meta = rcall('HMGET', metaKey, 'startsAt', 'endsAt')
if not meta[1] then return -1 end
local startsAt, current = tonumber(meta[1]), tonumber(meta[2])

-- Only exactly 0 means "no end", as in purchase.lua.
if current ~= 0 and current <= endsAt then return 0 end
if startsAt > endsAt then rcall('HSET', metaKey, 'startsAt', endsAt) end
rcall('HSET', metaKey, 'endsAt', endsAt)
return 1
