"""Server time of the fleet overview at fleet scale, on synthetic documents (not collected by pytest: no test_
prefix; not a timed test). The fleet benchmark with real pollers is lab/bench_monitoring.py; this one
isolates the page: no pollers, only Redis and the database.

    VAR_DIR=/tmp/bench DB=sqlite .venv/bin/pytest lab/bench_overview.py -q -s
    PROFILE=1 ...   adds a cProfile of five refreshes

Shapes: 500 clusters x 2 ProxySQL nodes x 6 backends, and 1,000 clusters x 1 node x 6 backends; every
50th node unreachable and every 50th backend desynced with a long recv queue (attention items). The
documents are rewritten before each request so that none is stale.
"""

import cProfile
import os
import pstats
import time

import pytest
from django.urls import reverse

from apps.monitoring import overview
from apps.monitoring.tests import synthetic


@pytest.mark.parametrize("shape", [(500, 2, 6), (1000, 1, 6)], ids=["1000px-3000be", "1000px-6000be"])
def test_overview_server_time(db, live_redis, viewer_client, shape, django_assert_max_num_queries):
    _, nodes, servers = synthetic.fleet(*shape)
    url = reverse("monitoring:overview_live")
    synthetic.publish(nodes, servers, trouble_every=50)
    viewer_client.get(url)
    wall, cpu, selector = [], [], []
    for _ in range(20):
        synthetic.publish(nodes, servers, trouble_every=50)
        t, c = time.perf_counter(), time.process_time()
        response = viewer_client.get(url)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        c = time.process_time()
        overview.fleet_overview()
        selector.append(time.process_time() - c)
    print(f"\n{len(nodes)} ProxySQL nodes, {len(servers)} backends; load average {os.getloadavg()[0]:.1f}")
    for name, xs in (("request, wall", wall), ("request, CPU", cpu), ("selector alone, CPU", selector)):
        xs.sort()
        print(f"{name}: p50 {xs[10] * 1000:.0f} ms, p95 {xs[18] * 1000:.0f} ms")
    print(f"response {len(response.content)} bytes")
    # Whatever the fleet's size: the session and user, the overview's own reads (apps/monitoring/overview.py),
    # the firing-alerts banner and the pending-rollbacks banner (one query each; the latter came after the first
    # budget of 8).
    with django_assert_max_num_queries(9) as captured:
        viewer_client.get(url)
    print(f"{len(captured.captured_queries)} queries")
    if os.environ.get("PROFILE"):
        profile = cProfile.Profile()
        for _ in range(5):
            synthetic.publish(nodes, servers, trouble_every=50)
            profile.enable()
            viewer_client.get(url)
            profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
