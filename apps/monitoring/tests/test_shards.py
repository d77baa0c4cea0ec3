"""Polling shards shared by workers on several hosts: a lease per shard and round (fenced), staggered rounds.

Real parts: ProxySQL admin doubles over the wire, a real redis-server, real Celery workers (named as on
three hosts, `celery -n w1@hostA`) and beat as subprocesses.
"""

import os
import re
import signal
import statistics
import time

import pytest

from apps.fleet.models import Cluster, ProxySQLNode
from apps.monitoring import leases, live, pollers, rounds, stagger
from apps.monitoring.models import ProxySQLSample

INTERVAL = 2.0
SHARDS = 4
WORKERS = ("w1@hostA", "w2@hostB", "w3@hostC")


@pytest.fixture
def fleet(proxysql_double_factory):
    """8 ProxySQL nodes (lab doubles) of one cluster polled every 2 s: two per shard of four."""
    doubles = proxysql_double_factory(8)
    cluster = Cluster.objects.create(
        name="shards",
        writer_hostgroup=100,
        reader_hostgroup=101,
        monitor_user="monitor",
        monitor_password="monitor",
        poll_interval_s=INTERVAL,
    )
    nodes = [
        ProxySQLNode.objects.create(
            cluster=cluster,
            name=f"proxysql-{i}",
            admin_host="127.0.0.1",
            admin_port=d.port,
            admin_user="admin",
            admin_password="admin",
        )
        for i, d in enumerate(doubles)
    ]
    return nodes, doubles


@pytest.mark.django_db
def test_a_paused_owner_that_lost_its_lease_polls_nothing_more(fleet, live_redis):
    nodes, _ = fleet
    targets = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    now = time.time()
    paused = leases.ShardLease(live_redis, live.PROXYSQL, 0, holder="paused worker")
    assert paused.acquire(now)
    before = {t.pk: rounds.due_unless_started_after(t.cluster.poll_interval_s, 0, 1, now) for t in targets}
    assert paused.claim(targets[0].pk, now, before[targets[0].pk])  # it starts one poll, then stalls
    live_redis.pexpire(paused.key, 1)  # ...past its lease: its renewals stopped with it
    time.sleep(0.01)

    summary = rounds.run_shard(live.PROXYSQL, 0, 1, now=now + 0.05, holder="next worker")
    assert summary["fence"] == paused.fence + 1
    assert summary["polled"] == 7  # the node it had claimed is not polled twice

    # It wakes up: the lease is not its own any more, it claims (so polls) nothing.
    assert not paused.claim(targets[1].pk, now, before[targets[1].pk])
    assert paused.lost.is_set()
    successor = leases.ShardLease(live_redis, live.PROXYSQL, 0, holder="third worker")
    assert successor.acquire(now + 0.1)
    paused.release()  # compare-and-delete: the successor's lease stays
    assert live_redis.get(successor.key).decode() == successor.value
    successor.release()
    assert ProxySQLSample.objects.filter(resolution=0).count() == 7


def test_phased_beat_schedule_is_due_once_per_instant_at_its_offset():
    from datetime import datetime, timezone

    schedule = stagger.PhasedSchedule(1.0, 0.25)
    now = time.time()
    latest = schedule._latest(now)
    assert (latest - 0.25) % 1.0 == pytest.approx(0, abs=1e-6) and latest <= now + schedule.EARLY_S
    ran_before = datetime.fromtimestamp(latest - 0.5, tz=timezone.utc)
    ran_after = datetime.fromtimestamp(latest + 0.001, tz=timezone.utc)
    assert schedule.is_due(ran_before).is_due and not schedule.is_due(ran_after).is_due
    assert schedule.is_due(ran_after).next == pytest.approx(latest + 1.0 - time.time(), abs=0.05)
    assert [stagger.tick_offset(i, 4, 2.0) for i in range(4)] == [0.0, 0.5, 0.0, 0.5]
    assert [stagger.phase_of(i, 4, 2.0) for i in range(4)] == [0.0, 0.5, 1.0, 1.5]


# -- real workers -------------------------------------------------------------------------------------
def start_workers(celery_factory, redis_server, **env):
    workers = {
        name: celery_factory("worker", redis_server, name=name, MONITOR_SHARDS=SHARDS, **env) for name in WORKERS
    }
    celery_factory("beat", redis_server, MONITOR_SHARDS=SHARDS)
    return workers


def wait_for(predicate, timeout, step=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def poll_starts(pks, t0, t1):
    """{pk: [poll start epoch, ...]} from the history rows (a row's ts is its round's start)."""
    out = {pk: [] for pk in pks}
    for pk, ts in ProxySQLSample.objects.filter(resolution=0, node_id__in=pks).values_list("node_id", "ts"):
        if t0 <= ts.timestamp() < t1:
            out[pk].append(ts.timestamp())
    return {pk: sorted(v) for pk, v in out.items()}


def shard_of(pk):
    return pollers.proxysql_shards(SHARDS)[pk][0]


def slot_of(ts, pk):
    phase = stagger.phase_of(shard_of(pk), SHARDS, INTERVAL)
    return int((ts + rounds.TICK_TOLERANCE_S - phase) // INTERVAL)


def rounds_per_worker(workers):
    out = {}
    for name, proc in workers.items():
        proc.log.seek(0)
        out[name] = len(re.findall(r"proxysql shard \d: \{'polled': [1-9]", proc.log.read()))
    return out


@pytest.mark.django_db(transaction=True)
def test_three_workers_poll_every_node_once_per_interval_with_staggered_shards(
    fleet, live_redis, redis_server, celery_factory
):
    nodes, _ = fleet
    pks = [n.pk for n in nodes]
    workers = start_workers(celery_factory, redis_server)
    assert wait_for(lambda: all(live.read_many(live.PROXYSQL, pks).values()), 30), "not every node was polled"
    t0 = time.time() + INTERVAL
    time.sleep(INTERVAL + 6 * INTERVAL + 1)
    t1 = time.time() - 1
    starts = poll_starts(pks, t0, t1)

    first_slot, last_slot = int(t0 // INTERVAL) + 1, int(t1 // INTERVAL) - 1  # slots wholly inside the window
    for pk, tss in starts.items():
        slots = [slot_of(ts, pk) for ts in tss]
        assert len(slots) == len(set(slots)), f"node {pk} polled twice in one interval: {tss}"
        missing = set(range(first_slot, last_slot)) - set(slots)
        assert not missing, f"node {pk} not polled in slots {sorted(missing)}: {tss}"

    # Staggered: shard i starts its rounds at i/4 of the 2 s interval (0, 0.5, 1.0, 1.5 s).
    for shard in range(SHARDS):
        phase = stagger.phase_of(shard, SHARDS, INTERVAL)
        late = [
            ((ts - phase + INTERVAL / 2) % INTERVAL) - INTERVAL / 2
            for pk, tss in starts.items()
            if shard_of(pk) == shard
            for ts in tss
        ]
        assert abs(statistics.median(late)) < 0.2, (
            f"shard {shard} starts {statistics.median(late):+.3f} s off its phase"
        )
    shared = rounds_per_worker(workers)
    assert sum(1 for n in shared.values() if n) >= 2, f"rounds per worker: {shared}"


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_hands_its_shard_over_within_one_interval(fleet, live_redis, redis_server, celery_factory):
    nodes, doubles = fleet
    for double in doubles:
        double.set_mode("normal", latency_ms=100)  # rounds last about half a second: a lease to catch held
    pks = [n.pk for n in nodes]
    workers = start_workers(celery_factory, redis_server)
    assert wait_for(lambda: all(live.read_many(live.PROXYSQL, pks).values()), 30), "not every node was polled"

    def held():
        for shard in range(SHARDS):
            value = live_redis.get(f"poll-lease:proxysql:{shard}")
            if value:
                fence, holder = value.decode().split(" ", 1)
                return shard, int(fence), holder.split(" ", 1)[0]

    shard, fence, victim = wait_for(held, 10, step=0.01)
    os.killpg(workers[victim].pid, signal.SIGKILL)  # the host is gone, mid-round
    killed_at = time.time()

    def taken_over():
        got_fence, *holder, started = live_redis.hget("poll-owner:proxysql", shard).decode().split(" ")
        return int(got_fence) > fence and (" ".join(holder), float(started))

    holder, started = wait_for(taken_over, 10, step=0.05)
    assert not holder.startswith(victim)
    takeover = started - killed_at
    print(f"shard {shard} held by {victim}, taken over by {holder} after {takeover:.2f} s")
    assert takeover <= INTERVAL + 0.5, f"shard {shard} taken over {takeover:.2f} s after its worker was killed"
    # Every node of that shard is polled again, within two intervals of the kill.
    time.sleep(2 * INTERVAL)
    starts = poll_starts([pk for pk in pks if shard_of(pk) == shard], killed_at, time.time())
    assert all(tss and tss[0] - killed_at <= 2 * INTERVAL for tss in starts.values()), starts
