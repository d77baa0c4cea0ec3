"""Who polls a shard: a Redis lease per (kind, shard), held for the length of one round, fenced.

Beat sends each shard's tick to whichever worker is free, on any host; the worker that takes the shard's
lease runs that round, any worker may run the next one. Ownership per round rather than sticky per host:
beat's queue already spreads the ticks over the live workers, so the lease only has to make a round
exclusive and let go of a dead worker quickly.

- The lease lives LEASE_TTL_S and is renewed by a thread of the round every RENEW_EVERY_S: a round as long
  as you like keeps it, a worker that dies (host gone, SIGKILL) frees its shard LEASE_TTL_S after its last
  renewal, before the shard's next slot (intervals are 1 s or more), and the next tick on another worker
  takes it over.
- Fencing: each acquisition gets a number from a counter (the fence) and the lease holds "fence holder".
  Every node is claimed right before it is polled by one Redis script that checks the lease still holds
  our fence and that the node is due, and stamps its poll start (poll-started:<kind>) in the same step.
  A paused owner (GC, SIGSTOP, a stalled VM) that lost its lease meanwhile cannot claim a node, so it polls
  nothing more; a node is stamped once per slot, so it is never polled twice in one interval, and a node
  that nobody claimed stays due for the next owner, so none is skipped.
- poll-owner:<kind> records, per shard, the fence, holder and start of its latest round (for people and the
  benchmark; nothing decides on it).
"""

import os
import socket
import threading

import redis
from redis.commands.core import Script

LEASE_TTL_S = 1.0
RENEW_EVERY_S = LEASE_TTL_S / 4

_ACQUIRE = """
if redis.call('exists', KEYS[1]) == 1 then return false end
local value = redis.call('incr', KEYS[2]) .. ' ' .. ARGV[1]
redis.call('set', KEYS[1], value, 'PX', ARGV[2])
redis.call('hset', KEYS[3], ARGV[3], value .. ' ' .. ARGV[4])
return value
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
# 1: claimed (stamped with ARGV[3]); 0: not due (stamped at or after ARGV[4]); -1: the lease is not ours.
_CLAIM = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return -1 end
local started = redis.call('hget', KEYS[2], ARGV[2])
if started and tonumber(started) >= tonumber(ARGV[4]) then return 0 end
redis.call('hset', KEYS[2], ARGV[2], ARGV[3])
return 1
"""


def default_holder() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


class ShardLease:
    """lease = ShardLease(redis, kind, shard); if lease.acquire(now): ... lease.claim(pk, now, threshold) ...
    finally lease.release(). acquire() and claim() raise redis.RedisError when Redis is unreachable."""

    def __init__(self, r: redis.Redis, kind: str, shard: int, holder: str | None = None):
        self.r, self.kind, self.shard = r, kind, shard
        self.holder = holder or default_holder()
        self.key = f"poll-lease:{kind}:{shard}"
        self.value: str | None = None  # "fence holder" while the lease is ours
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._scripts: dict[str, Script] = {
            name: r.register_script(body)
            for name, body in (("acquire", _ACQUIRE), ("renew", _RENEW), ("release", _RELEASE), ("claim", _CLAIM))
        }

    @property
    def fence(self) -> int | None:
        return int(self.value.split(" ", 1)[0]) if self.value else None

    def acquire(self, now: float) -> bool:
        value = self._scripts["acquire"](
            keys=[self.key, f"poll-fence:{self.kind}:{self.shard}", f"poll-owner:{self.kind}"],
            args=[self.holder, int(LEASE_TTL_S * 1000), self.shard, repr(now)],
        )
        if not value:
            return False
        self.value = value.decode() if isinstance(value, bytes) else value
        self._renewer = threading.Thread(target=self._renew, args=(self.value,), daemon=True, name=f"lease {self.key}")
        self._renewer.start()
        return True

    def _renew(self, value: str) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            try:
                if not self._scripts["renew"](keys=[self.key], args=[value, int(LEASE_TTL_S * 1000)]):
                    self.lost.set()
                    return
            except Exception:  # Redis unreachable: the lease runs out on its own, claims will fail
                pass

    def claim(self, pk: int, now: float, stamped_before: float) -> bool:
        """True when the lease is still ours and the node was not stamped at or after `stamped_before`: its
        poll start is then stamped `now`. False otherwise (self.lost is set when the lease was lost)."""
        if self.value is None:  # never acquired: nothing to claim under (Redis would refuse a None argument)
            return False
        result = self._scripts["claim"](
            keys=[self.key, f"poll-started:{self.kind}"], args=[self.value, pk, repr(now), repr(stamped_before)]
        )
        if result == -1:
            self.lost.set()
        return result == 1

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=RENEW_EVERY_S * 2)
        if self.value is not None:
            self._scripts["release"](
                keys=[self.key], args=[self.value]
            )  # compare-and-delete: never a successor's lease
