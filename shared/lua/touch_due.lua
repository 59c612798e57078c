--[[
  Touch the expiry keys whose deadline has come. Redis deletes an expired key (and emits
  `expired`) when it is accessed, so this turns its lazy, sampled expiry into an on-time one.
  Keys still present (Redis's clock a hair behind ours) stay indexed and are touched next time.
  An order whose key is gone (expired now, paid, or closed) leaves the deadlines index and its id
  goes back to the purchased set, in this one step, so a resent purchase still finds it.

  KEYS[1] deadlines zset (orderId -> deadline ms; older writers stored the expiry key name, which
          starts with `{`)
  KEYS[2] purchased set
  ARGV[1] now (ms)  ARGV[2] most keys to touch  ARGV[3] expiry key prefix (order O's key is prefix .. O)

  Returns the number of keys found gone.
]]
local rcall = redis.call
local deadlinesKey, purchasedKey = KEYS[1], KEYS[2]
local prefix = ARGV[3]
local due = rcall('ZRANGEBYSCORE', deadlinesKey, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local gone = 0
for _, member in ipairs(due) do
  local key, orderId = prefix .. member, member
  if string.byte(member, 1) == 123 then -- '{': an expiry key name from an older writer
    key, orderId = member, string.sub(member, #prefix + 1)
  end
  if rcall('EXISTS', key) == 0 then
    rcall('ZREM', deadlinesKey, member)
    rcall('SADD', purchasedKey, orderId)
    gone = gone + 1
  end
end
return gone
