-- keys: 1
--[[
  Pause or resume a loaded sale: the `paused` flag of its meta, which purchase.lua refuses every
  buyer's purchase by and admit.lua holds the waiting room by. Setting it as it is changes
  nothing, so a retried pause is one pause. Postgres's sales.paused_at is the record; a reload
  takes the flag from it (load_sale.lua).

  KEYS[1] meta  sale rules (hash)
  ARGV[1] 1 pause, 0 resume

  Returns:
     1  the flag changed
     0  it was so already
    -1  the sale is not loaded: nothing is written (a partial hash would stop load_sale loading it)
]]
local rcall = redis.call
local metaKey = KEYS[1]
local pause = ARGV[1] == '1'

if rcall('EXISTS', metaKey) == 0 then return -1 end
if pause then return rcall('HSETNX', metaKey, 'paused', 1) end
return rcall('HDEL', metaKey, 'paused')
