"""The drift watcher (apps/configuration/drift.py watch(), beat every 30 s, its task stopped at 25 s) over a fleet of
ProxySQL doubles, some of them silent (not collected by pytest: no test_ prefix; run by path, prints its figures):

    LAB_KEEP=1 CLUSTERS=100 SILENT=10 .venv/bin/pytest lab/bench_drift_watch.py -q -s

CLUSTERS clusters of two doubles each (one DoubleServer thread serves them all; each cluster its own backends, on
closed ports: drift compares configuration, it never reaches a backend), adopted through the product (version 1).
SILENT of the clusters have their second node in hang mode (it accepts the connection and never answers, as a
stopped process does), read with the product's default timeouts (PROXYSQL_CONNECT_TIMEOUT 0.5 s, READ 0.8 s).
Printed: the wall time of three watch() rounds, the clusters checked and left within the budget (20 s), the machine.
"""

import os
import platform
import time

import pytest

from apps.configuration import drift
from conftest import adopt_double
from lab import demo

CLUSTERS = int(os.environ.get("CLUSTERS", "100"))
SILENT = int(os.environ.get("SILENT", "10"))


@pytest.mark.django_db(transaction=True)
def test_bench_drift_watch(proxysql_double_factory, live_redis):
    doubles = proxysql_double_factory(2 * CLUSTERS)
    started = time.monotonic()
    for i in range(CLUSTERS):
        backends = tuple(40000 + 3 * i + k for k in range(3))  # closed ports: each cluster its own backends
        pair = doubles[2 * i : 2 * i + 2]
        for n, double in enumerate(pair, 1):
            demo.admin_sql(
                double.port, *demo.seed_statements(backend_ports=backends), user=double.user, password=double.password
            )
            adopt_double(
                double,
                f"fleet-{i:03d}",
                f"proxysql-{i:03d}-{n}",
                kind="galera",
                roles={"writer": 100, "reader": 101, "backup_writer": 102},
            )
    print(
        f"\n{CLUSTERS} clusters of 2 doubles adopted in {time.monotonic() - started:.1f} s; "
        f"{SILENT} with a silent second node; machine {platform.node()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    for i in range(SILENT):
        doubles[2 * i + 1].set_mode("hang")
    try:
        for round_ in range(1, 4):
            began = time.monotonic()
            events = drift.watch()
            wall = time.monotonic() - began
            key = getattr(drift, "WATCH_LAST_ROUND", None)  # (absent before the budget: the "before" run)
            last = live_redis.get(key) if key else None
            print(f"round {round_}: {wall:.2f} s, {events} audit events, last round: {last.decode() if last else None}")
    finally:
        for i in range(SILENT):
            doubles[2 * i + 1].set_mode("normal")
