-- keys: 3
--[[
  Load a sale's rules and stock, once. A sale already loaded keeps its stock: reloading
  must never hand out stock twice.

  KEYS[1] meta
  KEYS[2] available     the sale's units left: the sum of its variants'
  KEYS[3] variants left a sale of more than one variant: hash sku -> units left (absent for one)
  ARGV[1] stock
  ARGV[2] n: the variants given for KEYS[3] (0 for a one-variant sale, which `available` alone counts)
  ARGV[3..2+2n] each variant's sku and stock
  ARGV[3+2n..] the rules for meta as name, value pairs, built by loadSale (shared/sales/scripts.ts) from the
    `redis` names in shared/sales/definition.ts: stock, startsAt (ms), endsAt (ms, 0 = none),
    perUser, perVariant, maxPerOrder, paymentWindow (s), challenge (none | pow), admission
    (first-come or a registered mode's name), a queue's seed (64 hex digits), buyCounts, gate: the
    one gate purchase.lua requires (pass | draw | member | token | none), the variants: `variants`
    (their count, when more than one) or `sku` (the one variant's), and paused (1) for a sale its
    operator paused (sales.paused_at)

  Returns 1 loaded, 0 already there.
]]
local rcall = redis.call
if rcall('EXISTS', KEYS[1]) == 1 then return 0 end
local n = tonumber(ARGV[2])
rcall('HSET', KEYS[1], unpack(ARGV, 3 + 2 * n))
rcall('SET', KEYS[2], ARGV[1])
if n > 0 then rcall('HSET', KEYS[3], unpack(ARGV, 3, 2 + 2 * n)) end
return 1
