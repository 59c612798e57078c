-- keys: 1
--[[
  Take or keep a lease: one holder at a time, for ARGV[2] ms from now. A holder that stops renewing
  (a crash, a pause) loses it when it runs out, and the next to ask takes it.

  KEYS[1] the lease (string: the holder's id)
  ARGV[1] the caller's id  ARGV[2] how long (ms)

  Returns 1 the caller holds it now, 0 another does.
]]
local rcall = redis.call
local holder = rcall('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
rcall('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
