"""The packed pool history (apps/monitoring/pool.py): the encoding, the rollup of snapshots, and migration
0004 turning PoolSample rows into snapshots."""

from datetime import datetime, timezone

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.fleet.models import Cluster, ProxySQLNode
from apps.monitoring import chunks, pool
from apps.monitoring.models import HOUR, MINUTE, RAW, PoolSnapshot

TS = datetime(2027, 1, 15, 10, 0, tzinfo=timezone.utc)


def test_values_come_back_as_they_went_in_floats_to_seven_digits():
    values = {
        "conn_used": 4,
        "conn_free": 0,
        "conn_err_ps": None,
        "queries_ps": 1234.5678,
        "bytes_sent_ps": 9.87654321e9,
        "bytes_recv_ps": -1.5,
        "latency_us": 2**40,
    }
    ((sid, status, got),) = pool.unpack(pool.pack([(70000, "SHUNNED", values)]))
    assert (sid, status) == (70000, "SHUNNED")
    assert got["conn_used"] == 4 and got["conn_free"] == 0 and got["conn_err_ps"] is None
    assert got["latency_us"] == 2**40 and isinstance(got["latency_us"], int)
    assert got["queries_ps"] == pytest.approx(1234.5678, rel=1e-7)
    assert got["bytes_sent_ps"] == pytest.approx(9.87654321e9, rel=1e-7) and got["bytes_recv_ps"] == -1.5
    assert got["conn_used_max"] == got["conn_used_min"] == 4  # a raw poll is its own extreme


def test_a_status_proxysql_27_does_not_have_is_kept_as_the_worst():
    ((_, status, _),) = pool.unpack(pool.pack([(1, "SOMETHING_NEW", {})]))
    assert status == pool.UNKNOWN and pool.severity(status) > pool.severity("OFFLINE_HARD")


def test_a_poll_of_nine_servers_costs_a_fifth_of_the_rows_it_replaces():
    busy = {
        "conn_used": 4,
        "conn_free": 12,
        "conn_err_ps": 0.0,
        "queries_ps": 812.4,
        "bytes_sent_ps": 146232.0,
        "bytes_recv_ps": 731160.7,
        "latency_us": 412,
    }
    idle = {
        "conn_used": 0,
        "conn_free": 0,
        "conn_err_ps": 0.0,
        "queries_ps": 0.0,
        "bytes_sent_ps": 0.0,
        "bytes_recv_ps": 0.0,
        "latency_us": 0,
    }
    packed = pool.pack([(5000 + i, "ONLINE", busy if i < 4 else idle) for i in range(9)])
    assert len(packed) < 9 * 142 / 5  # 142 B: one PoolSample row on SQLite, indexes included


def test_a_rollup_keeps_average_extremes_and_the_worst_status_of_each_server():
    def snap(node, status, used, latency):
        return node, pool.pack(
            [
                (1, status, {"conn_used": used, "latency_us": latency}),
                (2, "ONLINE", {"conn_used": 1, "latency_us": None}),
            ]
        )

    finer = [
        snap(7, "ONLINE", 4, 300),
        snap(7, "SHUNNED", 40, 320),
        snap(7, "ONLINE", 4, 280),
        (7, pool.pack([(2, "OFFLINE_SOFT", {"conn_used": 1})])),
    ]
    (row,) = pool.rollup(finer, TS, MINUTE)
    assert (row.node_id, row.ts, row.resolution) == (7, TS, MINUTE)
    servers = {sid: (status, values) for sid, status, values in pool.unpack(row.servers)}
    status, one = servers[1]
    assert status == "SHUNNED"
    assert one["conn_used"] == 16 and one["conn_used_min"] == 4 and one["conn_used_max"] == 40
    assert one["latency_us"] == 300 and one["latency_us_min"] == 280 and one["latency_us_max"] == 320
    assert servers[2][0] == "OFFLINE_SOFT" and servers[2][1]["latency_us"] is None
    # An hour of such minutes: the extremes of the extremes, the worst of the worst.
    (hour,) = pool.rollup([(7, row.servers), (7, pool.pack([(1, "ONLINE", {"conn_used": 2})], rollup=True))], TS, HOUR)
    status, one = {sid: (s, v) for sid, s, v in pool.unpack(hour.servers)}[1]
    assert status == "SHUNNED" and one["conn_used_min"] == 2 and one["conn_used_max"] == 40 and one["conn_used"] == 9


@pytest.mark.django_db(transaction=True)
def test_migration_0004_packs_every_pool_row_into_its_nodes_snapshot():
    executor = MigrationExecutor(connection)
    before = [("monitoring", "0003_rollup_extremes")]  # the lead may renumber it at merge time
    executor.migrate(before)
    try:
        PoolSample = executor.loader.project_state(before).apps.get_model("monitoring", "PoolSample")
        cluster = Cluster.objects.create(name="m", writer_hostgroup=100, reader_hostgroup=101)
        node = ProxySQLNode.objects.create(
            cluster=cluster, name="p", admin_host="127.0.0.1", admin_port=6032, admin_user="a"
        )
        later = TS.replace(minute=1)
        PoolSample.objects.bulk_create(
            [
                PoolSample(
                    node_id=node.pk,
                    ts=TS,
                    hostgroup=100,
                    srv_host="db1",
                    srv_port=3306,
                    status="ONLINE",
                    conn_used=4,
                    conn_free=1,
                    queries_ps=10.5,
                    latency_us=300,
                ),
                PoolSample(
                    node_id=node.pk,
                    ts=TS,
                    hostgroup=101,
                    srv_host="db2",
                    srv_port=3306,
                    status="SHUNNED",
                    conn_used=0,
                    conn_free=0,
                    latency_us=None,
                ),
                PoolSample(
                    node_id=node.pk,
                    ts=later,
                    hostgroup=100,
                    srv_host="db1",
                    srv_port=3306,
                    status="ONLINE",
                    conn_used=5,
                    conn_free=0,
                ),
                PoolSample(
                    node_id=node.pk,
                    ts=TS,
                    resolution=MINUTE,
                    hostgroup=100,
                    srv_host="db1",
                    srv_port=3306,
                    status="ONLINE",
                    conn_used=4.5,
                    conn_free=0.5,
                ),  # a rollup made before extremes were kept
            ]
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())

    assert PoolSnapshot.objects.filter(node_id=node.pk).count() == 3
    rows = {
        (ts, resolution, key): values
        for _, ts, resolution, key, values in chunks.read_pool(
            {"node_id": node.pk}, ["status", "conn_used", "queries_ps", "latency_us", "conn_used_max"]
        )
    }
    assert rows == {
        (TS, RAW, (100, "db1", 3306)): ["ONLINE", 4, 10.5, 300, 4],
        (TS, RAW, (101, "db2", 3306)): ["SHUNNED", 0, None, None, 0],
        (later, RAW, (100, "db1", 3306)): ["ONLINE", 5, None, None, 5],
        (TS, MINUTE, (100, "db1", 3306)): ["ONLINE", 4.5, None, None, 4.5],
    }
