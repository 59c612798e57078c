-- keys: 14
--[[
  Reserve stock for one buyer: every check and every write in one atomic step.

  KEYS[1] meta          sale rules (hash: startsAt, endsAt (0 = no end), perUser, maxPerOrder, paymentWindow,
                        challenge (absent = none), admission (absent = first-come), buyCounts, gate: the
                        one gate a purchase must pass, set by the admission mode at load (see "Gate"),
                        paused: present while an operator pauses the sale (pause_sale.lua))
  KEYS[2] available     stock left
  KEYS[3] buys:<buyer>  this buyer's count in the older format, a key of its own (see "Buyer counts");
                        expires ARGV[4] s after end + payment window, never for a sale without end
  KEYS[4] buys          the sale's counts, hash buyer -> count (see "Buyer counts"); one TTL for the
                        sale: ARGV[4] s after end + payment window, never shortened; none without end
  KEYS[5] winners       list the order writer drains
  KEYS[6] queued        hash orderId -> entry, for status lookups until the order is in Postgres
  KEYS[7] seq           purchase counter
  KEYS[8] purchased     set of order ids reserved and not pending with a deadline
  KEYS[9] deadlines     zset of pending order ids (ack.lua moves an id here from purchased)
  KEYS[10] rl:<buyer>   this buyer's purchases of this sale in the current window (PURCHASE_RATE_PER_BUYER:
                        a fixed window, expiring ARGV[8] ms after its first purchase)
  KEYS[11] gate         with a purchase token: token-used:<its id>, the token's mark once it bought
                        (value: the order id); with 'member': the mode's list (set of buyers);
                        otherwise passes, the sale's passes (zset buyer -> the pass's expiry ms, 0 once
                        used), read only with a pass
  KEYS[12] unpaid       the sale's buyers' orders expired unpaid, hash buyer -> count (restore.lua)
  KEYS[13] variants left  a sale of more than one variant: hash sku -> units left (see "Variants")
  KEYS[14] variant buys   with perVariant: hash `<sku>:<buyer>` -> count, the TTL of KEYS[4]

  Every key is declared, the per-buyer and per-token ones too, and always fourteen of them: a Cluster
  routes and checks a script by its declared keys only, so while a reshard moves the slot Redis
  answers the whole call with ASK or TRYAGAIN instead of running it where a buyer's count reads 0.

  ARGV[1] qty
  ARGV[2] orderId
  ARGV[3] userId
  ARGV[4] buy-count margin (s): added past end + payment window (BUY_COUNT_TTL_SECONDS), covering a
          writer or restore that runs late; for either format of the count
  ARGV[5] what the API checked: 'token' this buyer's purchase token for this sale (a 'pow' sale
          needs one; '1' from older APIs means the same), 'pass' this buyer's admission pass (a
          'queue' sale needs one), 'draw' the caller is the draw giving a winner its unit (a 'draw'
          sale sells to nobody else), 'member' look the buyer up in KEYS[11], '' nothing
  ARGV[6] with a token or a pass, its expiry (ms) as it says (a pass's must be the one in passes)
  ARGV[7] purchases per buyer per window (0: no limit)
  ARGV[8] the window (ms)
  ARGV[9] with a token, how long its mark outlives its expiry (ms): a failover to a master whose
          clock runs behind must still find it
  ARGV[10] orders a buyer may let expire unpaid in this sale (MAX_UNPAID_PER_SALE; 0: no bound)
  ARGV[11] the variant's sku the buyer named ('': none)

  Time is this master's TIME, never the caller's clock: the window, the rate window, a token's or
  a pass's expiry are judged by one clock however many API hosts disagree (docs/how-it-works.md).

  Returns {code, n}:
    { 1, available after}   reserved (or reserved before under this order id: nothing changes)
    {-1, 0}                 sale not found
    {-2, 0}                 not started
    {-3, 0}                 ended
    {-4, maxPerOrder}       qty above max per order
    {-5, bought}            per-user limit reached
    {-6, 0}                 sold out: every variant
    {-6, 1, skus...}        this variant is sold out; the skus still available follow, in no order
    {-7, available}         fewer left than asked (of this variant)
    {-8, 0}                 a purchase token is required
    {-9, 0}                 this purchase token has bought already
    {-10, 0}                a draw sale: orders come from the draw only
    {-11, 0}                a queue sale: an admission pass is required
    {-12, 0}                this pass has bought already, has expired, or is not this buyer's latest
    {-13, ms}               this buyer sent more than ARGV[7] purchases in the window; it ends in ms
    {-15, unpaid}           this buyer let ARGV[10] orders of this sale expire unpaid
    {-14, 0}                this purchase token has expired
    {-16, 0}                the sale's gate is one of no code above ('member', or a mode this script
                            does not know), and this purchase did not pass it: not on the mode's list
    {-17, variants, skus...} a sale of several variants, and the buyer named none; its skus follow
    {-18, 0, skus...}       the sale has no variant of that sku; its skus follow
    {-19, bought}           perVariant reached: this buyer holds `bought` of this variant
    {-20, 0}                paused by an operator (the draw's own award, 'draw', goes on)

  Variants. A sale of one variant (meta `sku`, absent for a sale loaded before variants: `default`) is
  sold from `available` alone, as before variants: naming its sku or none is the same purchase. A
  sale of more than one (meta `variants`: how many) keeps each one's units left in KEYS[13], and
  `available` stays their sum, so "every variant sold out" is still the one GET below. Its winner
  entry carries the sku (see shared/runtime/ids.ts); a one-variant sale's keeps the older form.
  perVariant bounds a buyer's units of one variant: from KEYS[14] on a sale of several, and from the
  buyer's count (the variant's, there being one) on a sale of one.

  Gate. The sale's admission mode names at load the one gate its purchases must pass (meta `gate`;
  shared/admission/mode.ts), a 'pow' sale without a mode 'token', any other 'none': this script checks that one,
  whatever the mode, and answers its refusal (-8 token, -11 pass, -10 draw, else -16). A sale that
  an older release loaded has no `gate`: its admission says it ('queue' pass, 'draw' draw), else
  its challenge; an admission not known here sells to nobody.

  Buyer counts. The previous release kept each buyer's count in a key of its own (buys:<buyer>), each
  with its own TTL on a sale with an end; this one keeps a sale's counts in one hash (buys) with
  one TTL. A buyer's count is the sum of both, wherever it is read or given back (restore.lua). The
  hash is written only for a sale whose meta says `buyCounts` = hash (load_sale.lua, unless
  LEGACY_BUY_COUNTS): an API of the previous release reads only buys:<buyer>, so while one still runs,
  new sales keep the older keys. The release after this one may drop buys:<buyer> once no sale made
  before the upgrade can still sell or give quota back.
]]
local rcall = redis.call
local qty = tonumber(ARGV[1])
local orderId, userId = ARGV[2], ARGV[3]
local ttlMargin = tonumber(ARGV[4])
local gate = ARGV[5]
local tokenChecked = gate == 'token' or gate == '1'
local passChecked = gate == 'pass'
local gateUntil = tonumber(ARGV[6])
local rateMax, rateWindow = tonumber(ARGV[7]), tonumber(ARGV[8])
local markMargin = tonumber(ARGV[9])
local maxUnpaid = tonumber(ARGV[10])
local sku = ARGV[11]
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local metaKey, availableKey, buysKey, buyCountsKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local winnersKey, queuedKey, seqKey, purchasedKey, deadlinesKey = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local rateKey, gateKey, unpaidKey = KEYS[10], KEYS[11], KEYS[12]
local leftKey, variantBuysKey = KEYS[13], KEYS[14]

-- A client resends a script whose reply a dropped connection lost (ioredis does after a Redis
-- restart); run twice, it would take the stock twice for one order. The id is in exactly one of
-- the two: purchased, or deadlines once the writer has given the order its deadline. Before the
-- token's mark: the resent script finds its own token spent.
if rcall('SISMEMBER', purchasedKey, orderId) == 1 or rcall('ZSCORE', deadlinesKey, orderId) then
  return {1, tonumber(rcall('GET', availableKey) or '0')}
end

-- Every attempt counts, refused or not, as the limit's own round trip used to; a resent script
-- whose first run reserved returned above and is not counted twice.
if rateMax > 0 then
  local sent = rcall('INCR', rateKey)
  if sent == 1 then rcall('PEXPIRE', rateKey, rateWindow) end
  if sent > rateMax then
    local left = rcall('PTTL', rateKey)
    if left < 0 then
      rcall('PEXPIRE', rateKey, rateWindow)
      left = rateWindow
    end
    return {-13, left}
  end
end

local meta = rcall('HMGET', metaKey, 'startsAt', 'endsAt', 'perUser', 'maxPerOrder', 'paymentWindow', 'challenge', 'admission', 'buyCounts', 'gate', 'variants', 'sku', 'perVariant', 'paused')
if not meta[1] then return {-1, 0} end
local startsAt, endsAt = tonumber(meta[1]), tonumber(meta[2])
local perUser, maxPerOrder = tonumber(meta[3]), tonumber(meta[4])
local paymentWindow = tonumber(meta[5])

-- Only exactly 0 means "no end" (load_sale stores it so). Any other value, even one at or before
-- 1970, is a real end: a bad date must close a sale, never open it for ever. Input validation
-- keeps real ends in the years 2000-9999, far from 0.
local hasEnd = endsAt ~= 0

if now < startsAt then return {-2, 0} end
if hasEnd and now >= endsAt then return {-3, 0} end
-- Pause: a flag of meta. A draw's award is no buyer's purchase: a winner keeps their unit.
if gate ~= 'draw' and meta[13] then return {-20, 0} end
-- Who may buy: those who pass the sale's one gate (see "Gate"): a queue's pass holders (the pass
-- replaced the token at joining), the draw's winners, a list's members, or, first come, anyone
-- (with a token on a 'pow' sale).
local admission = meta[7] or 'first-come'
local required = meta[9]
if not required then
  required = ({ queue = 'pass', draw = 'draw', ['first-come'] = meta[6] == 'pow' and 'token' or 'none' })[admission] or 'unknown'
end
local sent = tokenChecked and 'token' or gate
if required ~= 'none' and sent ~= required then return {({ token = -8, pass = -11, draw = -10 })[required] or -16, 0} end
if gate == 'member' and rcall('SISMEMBER', gateKey, userId) == 0 then return {-16, 0} end
if tokenChecked and gateUntil <= now then return {-14, 0} end
if qty > maxPerOrder then return {-4, maxPerOrder} end
-- Which variant: named on a sale of several, and one it has; on a sale of one, its own or none.
local variants = tonumber(meta[10] or '1')
local many = variants > 1
local left
if many then
  if sku == '' then return {-17, variants, unpack(rcall('HKEYS', leftKey))} end
  left = rcall('HGET', leftKey, sku)
  if not left then return {-18, 0, unpack(rcall('HKEYS', leftKey))} end
  left = tonumber(left)
elseif sku ~= '' and sku ~= (meta[11] or 'default') then
  return {-18, 0, meta[11] or 'default'}
end

-- The buyer's limit is checked before stock is touched: a repeat click never burns stock. The
-- count is the sum of both formats (see "Buyer counts" above).
local ownKey = tonumber(rcall('GET', buysKey) or '0')
local bought = ownKey + tonumber(rcall('HGET', buyCountsKey, userId) or '0')
if bought + qty > perUser then return {-5, bought} end
local perVariant = tonumber(meta[12] or '0')
local variantField = userId
local boughtOfVariant = bought
if perVariant > 0 and many then
  variantField = sku .. ':' .. userId
  boughtOfVariant = tonumber(rcall('HGET', variantBuysKey, variantField) or '0')
end
if perVariant > 0 and boughtOfVariant + qty > perVariant then return {-19, boughtOfVariant} end
-- Each expiry gives the unit and the quota back, so without a bound one buyer could hold the last
-- unit for ever by buying and never paying (OWASP OAT-021).
if maxUnpaid > 0 then
  local unpaid = tonumber(rcall('HGET', unpaidKey, userId) or '0')
  if unpaid >= maxUnpaid then return {-15, unpaid} end
end

local available = tonumber(rcall('GET', availableKey) or '0')
if available <= 0 then return {-6, 0} end
if many then
  -- Sold out here, not everywhere: the answer lists where there is still stock (at most 100 variants).
  if left <= 0 then
    local out = {-6, 1}
    local all = rcall('HGETALL', leftKey)
    for i = 1, #all, 2 do
      if tonumber(all[i + 1]) > 0 then out[#out + 1] = all[i] end
    end
    return out
  end
  if left < qty then return {-7, left} end
elseif available < qty then
  return {-7, available}
end
-- A token buys once. Checked last: a purchase refused for anything else leaves the token unspent,
-- and the buyer is told the reason that still holds with a new token (sold out, limit).
if tokenChecked and rcall('EXISTS', gateKey) == 1 then return {-9, 0} end
-- A pass buys once, before its expiry: the one admit.lua gave this buyer (same expiry), not yet used (0).
if passChecked then
  local pass = tonumber(rcall('ZSCORE', gateKey, userId) or '0')
  if pass ~= gateUntil or pass <= now then return {-12, 0} end
end

available = rcall('DECRBY', availableKey, qty)
if many then rcall('HINCRBY', leftKey, sku, -qty) end
rcall('SADD', purchasedKey, orderId)
local seq = rcall('INCR', seqKey)
-- The count is the per-user limit: it must live while the sale sells and while any of its orders
-- can still give quota back. Orders are taken before the end and restored at the latest a payment
-- window after they are written, so the count outlives end + payment window, plus the margin for
-- a late writer or restore. A sale without end never stops selling: its count never expires (SET
-- without EX also drops any TTL the key had). The hash's one TTL serves every buyer, so it is only
-- ever pushed later (TTL is -1 on the hash just made): after a failover, a master whose clock
-- runs ahead computes a shorter one, which must not cut the other buyers' counts short.
local countTtl = math.ceil((endsAt - now) / 1000) + paymentWindow + ttlMargin
if meta[8] == 'hash' then
  rcall('HINCRBY', buyCountsKey, userId, qty)
  if hasEnd and rcall('TTL', buyCountsKey) < countTtl then rcall('EXPIRE', buyCountsKey, countTtl) end
elseif hasEnd then
  rcall('SET', buysKey, ownKey + qty, 'EX', countTtl)
else
  rcall('SET', buysKey, ownKey + qty)
end
if perVariant > 0 and many then
  rcall('HINCRBY', variantBuysKey, variantField, qty)
  if hasEnd and rcall('TTL', variantBuysKey) < countTtl then rcall('EXPIRE', variantBuysKey, countTtl) end
end
-- The winner entry, read by shared/runtime/ids.ts (parseWinner) alone; user last, as it may hold '|'.
-- A sale of several variants gives the sku with the qty (`qty:sku`); a sale of one keeps the older form.
local units = many and (qty .. ':' .. sku) or qty
local entry = orderId .. '|' .. seq .. '|' .. units .. '|' .. now .. '|' .. userId
rcall('LPUSH', winnersKey, entry)
rcall('HSET', queuedKey, orderId, entry)
if tokenChecked then rcall('SET', gateKey, orderId, 'PXAT', gateUntil + markMargin) end
if passChecked then rcall('ZADD', gateKey, 'XX', 0, userId) end
return {1, available}
