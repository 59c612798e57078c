-- keys: n
--[[
  Touch the expiry keys whose deadline has come. Redis deletes an expired key (and emits
  `expired`) when it is accessed, so this turns its lazy, sampled expiry into an on-time one.
  Keys still present (due.lua judged them due at their very millisecond, which Redis does not
  count as past yet) stay indexed and are touched next time.
  An order whose key is gone (expired now, paid, or closed) leaves the deadlines index and its id
  goes back to the purchased set, in this one step, so a resent purchase still finds it.

  KEYS[1] deadlines zset (orderId -> deadline ms; older writers stored the expiry key name, which
          starts with `{`)
  KEYS[2] purchased set
  KEYS[2+i] the expiry key of due member i
  ARGV[2i-1], ARGV[2i] due member i of the deadlines zset, as the caller read it, and its order id

  The caller reads the due members first so that every key is declared: while a reshard moves the
  slot, Redis then answers the whole call with ASK or TRYAGAIN (the client follows or retries it)
  instead of running it on the new master, where a key not moved yet reads as gone and its order
  would leave the index with its key still set. A member that left the index meanwhile (paid or
  closed) is skipped. (A variable key count: the callers' connections must not auto-pipeline it.)

  Returns the number of keys found gone.
]]
local rcall = redis.call
local deadlinesKey, purchasedKey = KEYS[1], KEYS[2]
local gone = 0
for i = 1, #ARGV / 2 do
  local member, orderId = ARGV[2 * i - 1], ARGV[2 * i]
  if rcall('ZSCORE', deadlinesKey, member) and rcall('EXISTS', KEYS[2 + i]) == 0 then
    rcall('ZREM', deadlinesKey, member)
    rcall('SADD', purchasedKey, orderId)
    gone = gone + 1
  end
end
return gone
