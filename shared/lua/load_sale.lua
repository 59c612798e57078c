-- keys: 2
--[[
  Load a sale's rules and stock, once. A sale already loaded keeps its stock: reloading
  must never hand out stock twice.

  KEYS[1] meta
  KEYS[2] available
  ARGV[1] stock
  ARGV[2..] the rules for meta as name, value pairs, built by loadSale (shared/sales/scripts.ts) from the
    `redis` names in shared/sales/definition.ts: stock, startsAt (ms), endsAt (ms, 0 = none),
    perUser, maxPerOrder, paymentWindow (s), challenge (none | pow), admission
    (first-come or a registered mode's name), a queue's seed (64 hex digits), buyCounts, and gate:
    the one gate purchase.lua requires (pass | draw | member | token | none), and paused (1) for
    a sale its operator paused (sales.paused_at)

  Returns 1 loaded, 0 already there.
]]
local rcall = redis.call
if rcall('EXISTS', KEYS[1]) == 1 then return 0 end
rcall('HSET', KEYS[1], unpack(ARGV, 2))
rcall('SET', KEYS[2], ARGV[1])
return 1
