--[[
  Touch the expiry keys whose deadline has come. Redis deletes an expired key (and emits
  `expired`) when it is accessed, so this turns its lazy, sampled expiry into an on-time one.
  Keys still present (Redis's clock a hair behind ours) stay indexed and are touched next time.

  KEYS[1] deadlines zset (expiry key -> deadline ms)
  ARGV[1] now (ms)  ARGV[2] most keys to touch

  Returns the number of keys found gone (expired now, paid, or closed).
]]
local rcall = redis.call
local due = rcall('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local gone = 0
for _, key in ipairs(due) do
  if rcall('EXISTS', key) == 0 then
    rcall('ZREM', KEYS[1], key)
    gone = gone + 1
  end
end
return gone
