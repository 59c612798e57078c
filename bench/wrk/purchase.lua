-- wrk script: every request is a new buyer. POST {"qty":1} with X-User-Id <prefix><n>, n = 1, 2, ...
-- The first request of each connection is held `hold_ms` so every connection is open before the
-- crowd starts (buyers already on the page when the sale opens): Node accepts one connection per
-- event-loop turn, so connections opened while it is busy wait seconds to be accepted, and that
-- would be measured as purchase latency. After `buyers` answers the thread stops and sends wrk
-- SIGINT, so wrk ends at once instead of sleeping out -d; the elapsed time is taken here, from the
-- end of the hold to the last answer.
--   wrk -t1 -c500 -d900s --timeout 30s -s purchase.lua URL -- <buyers> <prefix> <connections> <hold_ms>
-- Optional: <id_width> pads n with zeros so every id has that many characters (0: no padding), and
-- <passes_file> holds one purchase token per line, line n sent by buyer n in the flashsale-purchase-token header.
--   ... -- <buyers> <prefix> <connections> <hold_ms> [<id_width> [<passes_file>]]
-- and <skus>, a comma-separated list: buyer n names the variant skus[n mod k] (round robin, so
-- every variant meets the same demand).
--   ... -- <buyers> <prefix> <connections> <hold_ms> <id_width> <passes_file> [<skus>]
-- One thread only: the answer count and the stop are per thread.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *tp);
int kill(int pid, int sig);
int getpid(void);
]]
local ts = ffi.new("bench_timespec")
local function now_us()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000)
end

local threads = {}
function setup(thread) table.insert(threads, thread) end

local buyers, prefix, sent, connections, hold_ms, id_width
local passes = nil
local bodies = nil
local held = 0
statuses = {}
answered = 0
first_us = 0
last_us = 0

function init(args)
  buyers = tonumber(args[1])
  prefix = args[2] or "buyer-"
  connections = tonumber(args[3] or "0")
  hold_ms = tonumber(args[4] or "0")
  id_width = tonumber(args[5] or "0")
  if args[6] and args[6] ~= "" then
    passes = {}
    for line in io.lines(args[6]) do table.insert(passes, line) end
  end
  if args[7] and args[7] ~= "" then
    bodies = {}
    for sku in args[7]:gmatch("[^,]+") do table.insert(bodies, '{"qty":1,"variant":"' .. sku .. '"}') end
  end
  sent = 0
end

local function buyer(n)
  local digits = tostring(n)
  local pad = id_width - #prefix - #digits
  if pad > 0 then return prefix .. string.rep("0", pad) .. digits end
  return prefix .. digits
end

function delay()
  if held < connections then
    if held == 0 then first_us = now_us() + hold_ms * 1000 end
    held = held + 1
    return hold_ms
  end
  return 0
end

local body = '{"qty":1}'
function request()
  sent = sent + 1
  local headers = { ["Content-Type"] = "application/json", ["X-User-Id"] = buyer(sent) }
  if passes then headers["flashsale-purchase-token"] = passes[sent] end
  return wrk.format("POST", nil, headers, bodies and bodies[sent % #bodies + 1] or body)
end

function response(status)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
  answered = answered + 1
  if answered == buyers then
    last_us = now_us()
    wrk.thread:stop()
    ffi.C.kill(ffi.C.getpid(), 2)
  end
end

-- wrk's own CPU time (user + system ticks), read before it exits: the load generator's cost.
local function cpu_ticks()
  local f = io.open("/proc/self/stat", "r")
  if not f then return -1 end
  local s = f:read("*a")
  f:close()
  local fields = {}
  for v in s:sub(s:find(")", 1, true) + 2):gmatch("%S+") do table.insert(fields, v) end
  return tonumber(fields[12]) + tonumber(fields[13])
end

function done(summary, latency, requests)
  local t = threads[1]
  local parts = {}
  for k, v in pairs(t:get("statuses")) do table.insert(parts, string.format('"%s":%d', k, v)) end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"cpu_ticks":%d,"answered":%d,"first_us":%d,"last_us":%d,"statuses":{%s},"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%.1f}}\n',
    cpu_ticks(), t:get("answered"), t:get("first_us"), t:get("last_us"), table.concat(parts, ","),
    e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean))
end
