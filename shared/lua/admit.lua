-- keys: 5
--[[
  One admission step of a waiting room: hands passes to the next buyers in line, at the sale's
  rate, never leaving more passes outstanding than the units left times the no-show allowance.
  Safe to run from anywhere at any moment: the rate is a token bucket refilled by the time since
  the last step, whoever ran it, so a second loop (or a restarted one) admits no faster, and the
  admitted count only grows, so a crash between steps skips nobody and admits nobody twice.
  Every time here (the opening, the end, the bucket, a pass's expiry) is this master's TIME, as
  purchase.lua judges the passes: a loop whose host clock is off opens nothing early.

  KEYS[1] meta       sale rules (startsAt, endsAt, admission, paused: present while paused)
  KEYS[2] room       hash: phase (pre | open), admitted (how many of the first places have had a
                     pass), expired (passes that ran out unused), tokens, tickAt (ms)
  KEYS[3] queue      zset buyer -> place (join_queue.lua)
  KEYS[4] passes     zset buyer -> pass expiry (ms); 0 once the pass bought (purchase.lua)
  KEYS[5] available  stock left (units held by pending orders are not in it)

  ARGV[1] passes per second
  ARGV[2] overbook: outstanding passes stay at or below floor(units left x overbook)
  ARGV[3] pass lifetime (ms)
  ARGV[4] burst: the most passes one step may hand out after a pause

  Returns {phase, admitted, admittedNow, waiting, outstanding, available, expiredNow, passExpiresAt, now}
    phase: 0 not started, 1 open, 2 sold out (nothing admitted; admission resumes when units come
    back), 3 ended, 4 paused by an operator (nothing admitted, the bucket does not fill), -1 not a loaded queue sale. passExpiresAt: the passes handed out now (0: none).
    now: this master's TIME (ms) the step was judged at, for the caller's view of the room.
]]
local rcall = redis.call
local metaKey, roomKey, queueKey, passesKey, availableKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local rate, overbook = tonumber(ARGV[1]), tonumber(ARGV[2])
local passMs, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
local time = rcall('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local meta = rcall('HMGET', metaKey, 'startsAt', 'endsAt', 'admission')
if not meta[1] or meta[3] ~= 'queue' then return {-1, 0, 0, 0, 0, 0, 0, 0, now} end
local startsAt, endsAt = tonumber(meta[1]), tonumber(meta[2])
local room = rcall('HMGET', roomKey, 'phase', 'admitted', 'tokens', 'tickAt')
local admitted = tonumber(room[2] or '0')
local available = tonumber(rcall('GET', availableKey) or '0')
local total = rcall('ZCARD', queueKey)

if now < startsAt then return {0, admitted, 0, total - admitted, 0, available, 0, 0, now} end
if room[1] ~= 'open' then
  -- The opening: the pre-queue's places are final from here (join_queue.lua puts later joiners at
  -- the tail), and the bucket fills from the start, not from this step.
  rcall('HSET', roomKey, 'phase', 'open', 'admitted', 0, 'tokens', 0, 'tickAt', startsAt)
  room[3], room[4] = '0', tostring(startsAt)
end

-- Passes past their expiry go back to the budget; used ones (0) stay, as the record of who bought.
local expiredNow = rcall('ZREMRANGEBYSCORE', passesKey, '(0', now)
if expiredNow > 0 then rcall('HINCRBY', roomKey, 'expired', expiredNow) end
local outstanding = rcall('ZCOUNT', passesKey, '(' .. now, '+inf')
local waiting = total - admitted

if endsAt ~= 0 and now >= endsAt then return {3, admitted, 0, waiting, outstanding, available, expiredNow, 0, now} end
-- Paused (pause_sale.lua): the line holds; the bucket restarts from the resume, never a burst of the pause.
if rcall('HEXISTS', metaKey, 'paused') == 1 then
  rcall('HSET', roomKey, 'tickAt', now)
  return {4, admitted, 0, waiting, outstanding, available, expiredNow, 0, now}
end
local tokens = math.min(burst, tonumber(room[3]) + (now - tonumber(room[4])) * rate / 1000)
if available <= 0 then
  rcall('HSET', roomKey, 'tokens', tostring(tokens), 'tickAt', now)
  return {2, admitted, 0, waiting, outstanding, available, expiredNow, 0, now}
end

-- The epsilon keeps 100 x 1.15 from flooring to 114.
local budget = math.floor(available * overbook + 1e-9) - outstanding
local n = math.min(math.floor(tokens), budget, waiting)
local passUntil = 0
if n > 0 then
  passUntil = now + passMs
  for _, buyer in ipairs(rcall('ZRANGE', queueKey, admitted, admitted + n - 1)) do
    rcall('ZADD', passesKey, passUntil, buyer)
  end
  admitted = admitted + n
  tokens = tokens - n
else
  n = 0
end
rcall('HSET', roomKey, 'admitted', admitted, 'tokens', tostring(tokens), 'tickAt', now)
return {1, admitted, n, waiting - n, outstanding + n, available, expiredNow, passUntil, now}
