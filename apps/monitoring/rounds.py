"""Which nodes a shard polls on this beat tick, and who may poll them.

Beat fires one task per shard every second, each shard at its own offset (stagger.py: shard i of N starts
its rounds at i/N of the interval). The task goes to whichever worker is free, on any host. The round
takes the shard's lease (leases.py): if the previous round of that shard still holds it (a slow round),
the new tick is skipped and counted, never queued behind it; a worker that dies frees it within
leases.LEASE_TTL_S. Each node is claimed right before its poll, under the lease: a node is polled once in
each slot of its cluster's interval for its kind (ProxySQL nodes, backends), never twice.
"""

import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypedDict

import redis
from django.conf import settings

from apps.fleet.models import ProxySQLNode, Server

from . import leases, live, pollers, stagger, status

log = logging.getLogger(__name__)
TICK_TOLERANCE_S = 0.25  # beat ticks jitter; a node due in 0.2 s is polled now rather than a tick late

Target = ProxySQLNode | Server  # what a round polls: a ProxySQL node or a backend
Planned = tuple[int, float, int | None]  # (pk, the cluster's interval as stored, extra: a ProxySQL's rows, or None)
Due = tuple[int, int | None]  # (pk, extra) of a target due now


class RoundSummary(TypedDict, total=False):
    """What a shard's tick did: skipped (the previous round still runs, or Redis is down), nothing due, or its
    round's summary (pollers._summary) with the lease's part."""

    skipped: bool
    skipped_total: int
    error: str
    polled: int
    failed: int
    seconds: float
    unclaimed: int  # targets due but not claimed (the lease was lost)
    # {pk: (previous, new latest-state document)} of the targets polled, for the alert evaluation (not logged)
    docs: dict[int, tuple[dict[str, Any] | None, dict[str, Any]]]
    started: float
    fence: int | None
    lease_lost: bool
    cluster: int  # the cluster of a poll outside the ticks (poll_cluster_now)


class Round(Protocol):
    def __call__(self, targets: list[Target], *, now: float, claim: Callable[[Target], bool]) -> RoundSummary: ...


class RoundKind(NamedTuple):
    schedule: Callable[[int, int], list[Planned]]  # (shard, shards) -> its targets, from plain rows
    # (due, shard, shards, whether every target of the shard is due) -> the due targets loaded whole
    load: Callable[[list[Due], int, int, bool], list[Target]]
    round: Round


KINDS = {
    live.PROXYSQL: RoundKind(
        pollers.proxysql_schedule,
        lambda due, shard, shards, every: pollers.proxysql_nodes(dict(due)),
        pollers.proxysql_round,
    ),
    # A backend's interval is 1 s: every tick polls all of them, loaded without a list of pks in the query.
    live.BACKEND: RoundKind(
        pollers.backend_schedule,
        lambda due, shard, shards, every: pollers.servers_for_shard(
            shard, shards, None if every else [pk for pk, _ in due]
        ),
        pollers.backend_round,
    ),
}


def due_unless_started_after(cluster_interval: float | None, shard: int, shards: int, now: float) -> float:
    """A node is due when its last poll started before this: before the start of its current slot, and
    more than half an interval ago (a poll made late, or off the grid, is followed by the next slot's, not
    by one a moment later). cluster_interval: the cluster's interval for that kind, as stored."""
    interval = status.interval_of(cluster_interval)
    slot = stagger.slot_start(now, interval, shard, shards, TICK_TOLERANCE_S)
    return min(slot - TICK_TOLERANCE_S, now - interval / 2 + TICK_TOLERANCE_S)


def run_shard(
    kind: str, shard: int, shards: int | None = None, now: float | None = None, holder: str | None = None
) -> RoundSummary:
    """One beat tick for one shard of one kind. Returns a summary dict (also logged); after a round it
    also holds "docs": {pk: (previous, new latest-state document)} of the nodes polled, for the alert
    evaluation (not logged). `holder` names the worker in the lease (default: host and pid)."""
    shards = shards or settings.MONITOR_SHARDS
    schedule, load, round_fn = KINDS[kind]
    r: redis.Redis = live.client()
    now = now or time.time()
    lease = leases.ShardLease(r, kind, shard, holder)
    try:
        if not lease.acquire(now):
            skipped = r.hincrby(f"poll-skipped:{kind}", shard, 1)
            log.warning("%s shard %s: previous round still running; tick skipped (%s so far)", kind, shard, skipped)
            return {"skipped": True, "skipped_total": skipped}
    except redis.RedisError as exc:
        log.warning("%s shard %s: Redis unavailable, round skipped: %s", kind, shard, exc)
        return {"skipped": True, "error": str(exc)}
    try:
        planned = schedule(shard, shards)
        last = r.hmget(f"poll-started:{kind}", [pk for pk, _, _ in planned]) if planned else []
        before = {pk: due_unless_started_after(interval, shard, shards, now) for pk, interval, _ in planned}
        due = [
            (pk, extra)
            for (pk, _, extra), started in zip(planned, last)
            if started is None or float(started) < before[pk]
        ]
        if not due:
            return {"polled": 0}
        # A target deleted meanwhile is left out; one added meanwhile waits for the next tick (it has no `before`).
        targets = [t for t in load(due, shard, shards, len(due) == len(planned)) if t.pk in before]

        def claim(target: Target) -> bool:
            try:
                return lease.claim(target.pk, now, before[target.pk])
            except redis.RedisError:
                return False  # not stamped, not polled: the node stays due for the next round

        summary = round_fn(targets, now=now, claim=claim)
        summary.update({"started": now, "fence": lease.fence})
        if lease.lost.is_set():
            summary["lease_lost"] = True
            log.warning(
                "%s shard %s: lease lost during the round (paused?); %s nodes left to the next owner",
                kind,
                shard,
                summary.get("unclaimed", 0),
            )
        log.info("%s shard %s: %s", kind, shard, {k: v for k, v in summary.items() if k != "docs"})
        return summary
    finally:
        try:
            lease.release()
        except redis.RedisError:
            pass


def poll_cluster_now(cluster_id: int, now: float | None = None) -> RoundSummary:
    """One cluster's backends polled now, outside the beat ticks (the writer watch's trigger: a watched writer's
    connection closed), their latest-state documents and history written by the backend round's own code. Returns
    the round's summary (with "docs", as run_shard's).

    Without a lease or a claim, on purpose: this poll is one more reading beside the schedule, not a slot of it. It
    stamps no poll start, so the shard's next tick polls these backends as usual (none is skipped); a tick polling
    one of them at the same moment reads it on its own connection (another process's), and each writes a whole
    document of its own reading, the later write standing. A lease guards a round's exclusivity per slot, which this
    poll does not take part in. (A worker's pool process runs one task at a time, so its cached connection to a
    backend is never used by a round and this poll at once.)"""
    now = now or time.time()
    servers = pollers.servers_of_cluster(cluster_id)
    if not servers:
        return {"polled": 0}
    summary: RoundSummary = pollers.backend_round(servers, now=now)
    summary["started"], summary["cluster"] = now, cluster_id
    log.info(
        "%s of cluster %s polled now: %s", live.BACKEND, cluster_id, {k: v for k, v in summary.items() if k != "docs"}
    )
    return summary
