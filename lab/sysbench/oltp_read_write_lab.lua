-- sysbench's oltp_read_write with two additions, each on when its environment variable is set:
-- TIMED_DIR: every transaction's start (epoch seconds) and latency (ms) kept per thread and written at the end to
--   $TIMED_DIR/$TIMED_NAME-<thread>.tsv, so that the worst transaction can be placed in time (sysbench's own report
--   gives only the maximum);
-- STRIPE=i/n: this process's threads are stripes i*threads .. i*threads+threads-1 of n, and every id a thread picks is
--   one of its own stripe (id = low + stripe + n*k): no two clients ever touch one row, so the load has no lock
--   conflict of its own, and a 1213 seen is the system's (two writers on Galera), not the load's. (The deadlocks first
--   seen, 1213 in 1 run of 5 under load, had another cause: ids prepared by AUTO_INCREMENT with Galera's increment of
--   3, see the --auto_inc=off in bench_real_pair's Sysbench; the stripes rule out the rest.)
-- Used by bin/bench-real-pair and the tests that switch over under writes.
package.path = "/usr/share/sysbench/?.lua;" .. package.path
dofile("/usr/share/sysbench/oltp_read_write.lua")

local stripe_env = os.getenv("STRIPE") or ""
local stripe_of, stripes = stripe_env:match("^(%d+)/(%d+)$")
if stripe_of then
   stripe_of, stripes = tonumber(stripe_of), tonumber(stripes)
   local plain_default = sysbench.rand.default
   -- oltp_common's get_id() calls sysbench.rand.default(1, table_size) for every id (rows and k values)
   sysbench.rand.default = function(low, high)
      local stripe = stripe_of * sysbench.opt.threads + sysbench.tid
      assert(stripe < stripes, "STRIPE: more threads than stripes")
      local last = math.floor((high - low - stripe) / stripes)
      return low + stripe + stripes * plain_default(0, last)
   end
end

local timed_dir = os.getenv("TIMED_DIR") or ""
if timed_dir ~= "" then
   local ffi = require("ffi")
   pcall(ffi.cdef, "typedef struct { long sec; long nsec; } timed_ts; int clock_gettime(int, timed_ts *);")
   local ts = ffi.new("timed_ts")
   local function now()
      ffi.C.clock_gettime(0, ts)  -- CLOCK_REALTIME, to set against the switchover's step times
      return tonumber(ts.sec) + tonumber(ts.nsec) / 1e9
   end

   local plain_event, plain_done = event, thread_done
   local kept = {}

   function event()
      local t0 = now()
      plain_event()
      kept[#kept + 1] = string.format("%.6f\t%.3f", t0, (now() - t0) * 1000)
   end

   function thread_done()
      local f = io.open(string.format("%s/%s-%d.tsv", timed_dir, os.getenv("TIMED_NAME") or "sysbench", sysbench.tid), "w")
      f:write(table.concat(kept, "\n"), "\n")
      f:close()
      plain_done()
   end
end
