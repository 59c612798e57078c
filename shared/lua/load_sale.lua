--[[
  Load a sale's rules and stock, once. A sale already loaded keeps its stock: reloading
  must never hand out stock twice.

  KEYS[1] meta
  KEYS[2] available
  ARGV[1] stock  ARGV[2] startsAt (ms)  ARGV[3] endsAt (ms, 0 = none)
  ARGV[4] perUser  ARGV[5] maxPerOrder  ARGV[6] payment window (s)  ARGV[7] challenge (none | pow)
  ARGV[8] admission (first-come | queue | draw)  ARGV[9] a queue's seed (64 hex digits; empty otherwise)
  ARGV[10] 'hash': record `buyCounts` = hash, so purchases keep the buyers' counts in one hash per
          sale; empty (LEGACY_BUY_COUNTS): no field, each count in a key of its own as the previous
          release wrote them, which its APIs, still running during a rolling upgrade, can read
          (see purchase.lua, "Buyer counts")

  Returns 1 loaded, 0 already there.
]]
local rcall = redis.call
if rcall('EXISTS', KEYS[1]) == 1 then return 0 end
rcall('HSET', KEYS[1], 'stock', ARGV[1], 'startsAt', ARGV[2], 'endsAt', ARGV[3],
  'perUser', ARGV[4], 'maxPerOrder', ARGV[5], 'paymentWindow', ARGV[6], 'challenge', ARGV[7], 'admission', ARGV[8])
if ARGV[9] ~= '' then rcall('HSET', KEYS[1], 'seed', ARGV[9]) end
if ARGV[10] ~= '' then rcall('HSET', KEYS[1], 'buyCounts', ARGV[10]) end
rcall('SET', KEYS[2], ARGV[1])
return 1
