"""Which nodes a shard polls on this beat tick, and the guard that keeps rounds from piling up.

Beat fires one task per shard every second. A shard's round holds a Redis lock for its duration: if
the previous round of that shard is still running (a slow round), the new tick is skipped and counted,
never queued behind it, and two workers never poll the same node at once. Each node is polled when its
cluster's interval for its kind (ProxySQL nodes, backends) has passed since its last poll started.
"""
import logging
import time
import uuid

import redis
from django.conf import settings

from . import live, pollers

log = logging.getLogger(__name__)
TICK_TOLERANCE_S = 0.25  # beat ticks jitter; a node due in 0.2 s is polled now rather than a tick late
LOCK_TTL_S = 30  # a crashed worker's lock expires; rounds are far shorter (timeouts are sub-second)

KINDS = {
    live.PROXYSQL: (pollers.proxysql_nodes_for_shard, pollers.proxysql_round),
    live.BACKEND: (pollers.servers_for_shard, pollers.backend_round),
}


def interval_of(kind, target):
    cluster = target.cluster
    interval = cluster.backend_poll_interval_s if kind == live.BACKEND else cluster.poll_interval_s
    return interval or settings.MONITOR_DEFAULT_INTERVAL_S


def run_shard(kind, shard, shards=None, now=None):
    """One beat tick for one shard of one kind. Returns a summary dict (also logged); after a round it
    also holds "docs": {pk: (previous, new latest-state document)} of the nodes polled, for the alert
    evaluation (not logged)."""
    shards = shards or settings.MONITOR_SHARDS
    targets_for, round_fn = KINDS[kind]
    r = live.client()
    lock_key, token = f"poll-lock:{kind}:{shard}", uuid.uuid4().hex
    try:
        if not r.set(lock_key, token, nx=True, ex=LOCK_TTL_S):
            skipped = r.hincrby(f"poll-skipped:{kind}", shard, 1)
            log.warning("%s shard %s: previous round still running; tick skipped (%s so far)", kind, shard, skipped)
            return {"skipped": True, "skipped_total": skipped}
    except redis.RedisError as exc:
        log.warning("%s shard %s: Redis unavailable, round skipped: %s", kind, shard, exc)
        return {"skipped": True, "error": str(exc)}
    try:
        now = now or time.time()
        targets = targets_for(shard, shards)
        last = r.hmget(f"poll-started:{kind}", [t.pk for t in targets]) if targets else []
        due = [t for t, started in zip(targets, last)
               if started is None or now - float(started) >= interval_of(kind, t) - TICK_TOLERANCE_S]
        if not due:
            return {"polled": 0}
        r.hset(f"poll-started:{kind}", mapping={t.pk: now for t in due})
        summary = round_fn(due, now=now)
        log.info("%s shard %s: %s", kind, shard, {k: v for k, v in summary.items() if k != "docs"})
        return summary
    finally:
        try:
            # Release only our own lock (compare-and-delete), never a successor's after a long stall.
            r.eval("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
                   1, lock_key, token)
        except redis.RedisError:
            pass
