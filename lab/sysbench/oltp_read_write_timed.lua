-- sysbench's oltp_read_write, every transaction's start (epoch seconds) and latency (ms) kept per thread and
-- written at the end to $TIMED_DIR/$TIMED_NAME-<thread>.tsv: so that the worst transaction can be placed in time
-- (sysbench's own report gives only the maximum). Used by bin/bench-real-pair; never part of the suite.
package.path = "/usr/share/sysbench/?.lua;" .. package.path
dofile("/usr/share/sysbench/oltp_read_write.lua")

local ffi = require("ffi")
pcall(ffi.cdef, "typedef struct { long sec; long nsec; } timed_ts; int clock_gettime(int, timed_ts *);")
local ts = ffi.new("timed_ts")
local function now()
   ffi.C.clock_gettime(0, ts)  -- CLOCK_REALTIME, to set against the switchover's step times
   return tonumber(ts.sec) + tonumber(ts.nsec) / 1e9
end

local plain_event, plain_init, plain_done = event, thread_init, thread_done
local kept = {}

function thread_init()
   plain_init()
end

function event()
   local t0 = now()
   plain_event()
   kept[#kept + 1] = string.format("%.6f\t%.3f", t0, (now() - t0) * 1000)
end

function thread_done()
   local dir = os.getenv("TIMED_DIR")
   if dir then
      local f = io.open(string.format("%s/%s-%d.tsv", dir, os.getenv("TIMED_NAME") or "sysbench", sysbench.tid), "w")
      f:write(table.concat(kept, "\n"), "\n")
      f:close()
   end
   plain_done()
end
