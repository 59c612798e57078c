-- keys: 15
--[[
  Forget what a settled sale kept per order: the sale is over and every order is final, so nothing
  reads these any more. Marks the sale settled in its rules in the same step, and restore.lua
  refuses a settled sale: once the restored set is gone it can no longer tell a restored order
  from one that is not, so nothing may restore again (see restore.lua). The buyers' counts hash
  goes here too (UNLINK frees it in the background); counts in the older format are a key per
  buyer, many, and are deleted apart, in batches (shared/sales/settle.ts). Run again, it changes nothing.

  KEYS[1] meta          rules; kept (purchases still answer `ended`, and load_sale never loads the
                        sale afresh), with `settled` = 1 added
  KEYS[2] restored      set of order ids restored
  KEYS[3] restored qty  counter
  KEYS[4] cancels       hash orderId -> ms a queued order's cancel was asked
  KEYS[5] purchased     set of order ids
  KEYS[6] deadlines     zset of pending order ids (empty once every order is final)
  KEYS[7] writers       zset of writer leases (all run out: the sale was idle)
  KEYS[8] queue         a waiting room's places (absent without one); the sale is over
  KEYS[9] room          the room's state
  KEYS[10] passes       the room's passes
  KEYS[11] entries      a draw's copy of its entrants (absent without one); Postgres keeps the record
  KEYS[12] buy counts   hash buyer -> count (see purchase.lua)
  KEYS[13] unpaid       hash buyer -> orders expired unpaid (see purchase.lua)
  KEYS[14] restored by variant  hash sku -> units restored (restore.lua); the variants' units left stay
  KEYS[15] variant buys hash `<sku>:<buyer>` -> count (see purchase.lua)

  Returns the number of keys deleted.
]]
local rcall = redis.call
rcall('HSET', KEYS[1], 'settled', '1')
return rcall('UNLINK', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15])
