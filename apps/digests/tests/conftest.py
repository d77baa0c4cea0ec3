"""Digest fixtures, chained on the lab's:

digest_redis  settings.REDIS_URL pointed at the session's real redis-server, emptied for each test
digest_lab    the two lab ProxySQL doubles (seeds' layout, lab_pair) adopted into cluster "galera-lab"
              through the product's adopt service; each double has run a little OLTP traffic, then
              its sessions stop so its digest counters move only when a test says so
              (`add_queries(double, n)`). Yields (cluster, [node1, node2], [double1, double2]).
Every test starts with empty per-process caches (ids of stored digests and sources, connections).
"""

import time

import MySQLdb
import pytest

from apps.clients.proxysql import ProxySQLAdmin
from apps.digests import services
from apps.configuration import adoption as adopt
from apps.fleet.models import Cluster, ProxySQLNode
from apps.monitoring import live


@pytest.fixture(autouse=True)
def fresh_digest_caches():
    services.forget_caches()
    yield
    services.forget_caches()


@pytest.fixture
def digest_redis(redis_server, settings):
    settings.REDIS_URL = redis_server
    live.client().flushdb()
    yield live.client()


def adopt_double(double, cluster_name, node_name):
    with ProxySQLAdmin("127.0.0.1", double.port, double.user, double.password) as admin:
        snapshot = adopt.read_snapshot(admin)
        monitor = adopt.read_monitor_credentials(admin)
    plan = adopt.plan_adoption(
        snapshot, cluster_name=cluster_name, node_name=node_name, admin_host="127.0.0.1", admin_port=double.port
    )
    assert plan.ok, plan.errors
    return adopt.apply_adoption(plan, admin_user=double.user, admin_password=double.password, monitor=monitor)


def run_traffic(double, seconds=0.15):
    double.traffic.set_sessions(hostgroup=100, count=2, kind="write", pinned_reason="auto_increment")
    double.traffic.set_sessions(hostgroup=101, count=2, kind="read")
    time.sleep(seconds)
    double.traffic.set_sessions(hostgroup=100, count=0)
    double.traffic.set_sessions(hostgroup=101, count=0)


def add_queries(double, n):
    """Move the double's digest counters by n queries per active hostgroup (no background traffic)."""
    double.traffic.set_digests(queries=n)


def read_digest_table(double, table="stats_mysql_query_digest", figures="count_star, sum_time"):
    """The double's digest table read directly, as another tool would: {key: (count, sum_time)} (or `figures`)."""
    deadline = time.monotonic() + 3
    while True:
        try:
            conn = MySQLdb.connect(**double.connect_kwargs())
            break
        except MySQLdb.OperationalError:  # a double back from "refuse" mode listens again within moments
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT hostgroup, schemaname, username, client_address, digest, {figures} FROM {table}")
        return {(int(r[0]), r[1], r[2], r[3], r[4]): tuple(int(v) for v in r[5:]) for r in cur.fetchall()}
    finally:
        conn.close()


@pytest.fixture
def digest_lab(db, lab_pair, digest_redis):
    first, second = lab_pair
    adopt_double(first, "galera-lab", "proxysql-1")
    adopt_double(second, "galera-lab", "proxysql-2")
    for double in lab_pair:
        run_traffic(double)
    cluster = Cluster.objects.get(name="galera-lab")
    nodes = [ProxySQLNode.objects.get(admin_port=d.port) for d in lab_pair]
    return cluster, nodes, list(lab_pair)
