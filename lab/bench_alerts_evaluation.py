"""CPU of the alert evaluation per poll round on a synthetic fleet (not collected by pytest: no test_ prefix; not
a timed test). The fleet benchmark with real pollers and a real worker is lab/bench_alerts.py; this one
isolates the evaluation to profile it: documents from apps/monitoring/tests/synthetic.py, rounds handed
to evaluate.after_poll_round() as the poll tasks hand them, 4 shards.

    VAR_DIR=/tmp/bench DB=sqlite .venv/bin/pytest lab/bench_alerts_evaluation.py -q -s
    PROFILE=1 ...   adds a cProfile of one shard's rounds

Shape: 500 clusters x 2 ProxySQL nodes x 6 backends; `dead`: every backend but the first cluster's refused
(as in the fleet benchmark, thousands of open alerts), `healthy`: every document fine.
"""

import cProfile
import os
import pstats
import time

import pytest

from apps.alerts import context, evaluate
from apps.alerts.models import Alert
from apps.monitoring import live
from apps.monitoring.tests import synthetic

SHARDS = 4


def rounds(node_ids, server_ids, prev, now):
    px, be = synthetic.publish(node_ids, server_ids, now=now)
    return px, be


@pytest.mark.parametrize("dead", [True, False], ids=["dead-backends", "healthy"])
def test_evaluation_cpu_per_round(db, live_redis, settings, monkeypatch, dead):
    settings.ALERTS_SWEEP_S = 10
    # The product's caches, whatever a test changed them to.
    monkeypatch.setattr(context, "INVENTORY_CACHE_S", 60.0)
    monkeypatch.setattr(context, "SITUATION_CACHE_S", 1.0)
    _, nodes, servers = synthetic.fleet(500, 2, 6)
    evaluate.forget_caches()
    now = time.time()
    px, be = synthetic.publish(nodes, servers, now=now)
    if dead:
        be = {pk: synthetic.backend_doc(now, ok=False) for pk in servers}
        live.write_many(live.BACKEND, be)

    def one_interval(t, prev_px, prev_be, profile=None):
        new_px = {pk: {**d, "ts": t} for pk, d in prev_px.items()}
        new_be = {pk: {**d, "ts": t} for pk, d in prev_be.items()}
        live.write_many(live.PROXYSQL, new_px)
        live.write_many(live.BACKEND, new_be)
        live.client().hset("poll-started:proxysql", mapping={pk: t for pk in new_px})  # as the rounds write it
        live.client().hset("poll-started:backend", mapping={pk: t for pk in new_be})
        cpu = {"proxysql": 0.0, "backend": 0.0}
        for shard in range(SHARDS):
            for kind, new, prev in (("proxysql", new_px, prev_px), ("backend", new_be, prev_be)):
                docs = {pk: (prev[pk], new[pk]) for pk in new if pk % SHARDS == shard}
                c = time.process_time()
                if profile:
                    profile.enable()
                evaluate.after_poll_round(kind, docs, shard, SHARDS, now=t)
                if profile:
                    profile.disable()
                cpu[kind] += time.process_time() - c
        return new_px, new_be, cpu

    t = now
    started = time.process_time()
    px, be, _ = one_interval(t + 5, px, be)  # the first interval opens what is wrong
    opened = time.process_time() - started
    print(
        f"\n{len(nodes)} nodes, {len(servers)} backends ({'refused' if dead else 'healthy'}): "
        f"{Alert.objects.count()} alerts opened in {opened:.2f} s of CPU"
    )
    totals = []
    profile = cProfile.Profile() if os.environ.get("PROFILE") else None
    for i in range(6):
        t += 5
        px, be, cpu = one_interval(t + 5, px, be, profile if i == int(os.environ.get("PROFILE_INTERVAL", 2)) else None)
        totals.append(cpu)
        print(
            f"interval {i + 1}: ProxySQL rounds {cpu['proxysql'] * 1000:.0f} ms, backend rounds "
            f"{cpu['backend'] * 1000:.0f} ms of CPU for the whole fleet (one 5-s interval)"
        )
    steady = totals[2:]  # the first intervals still fire what the first one opened (for 2 s, 5 s, 10 s)
    per_interval = sum(c["proxysql"] + c["backend"] for c in steady) / len(steady)
    print(f"steady state: {per_interval * 1000:.0f} ms of CPU per 5-s interval = {per_interval / 5:.3f} cores")
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
