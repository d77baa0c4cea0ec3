"""History chunks (apps/monitoring/chunks.py): a ProxySQL node's and a backend's rows that the rollups have
read become one row per owner and span; every reader gets the same answers from chunks as from rows, and
migration 0006 converts existing rows (and back)."""

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.monitoring import charts, chunks, pool, rollups, selectors
from apps.monitoring.models import (
    HOUR,
    MINUTE,
    RAW,
    BackendChunk,
    BackendSample,
    HistoryChunk,
    PoolSnapshot,
    ProxySQLSample,
    RollupMark,
)

T0 = datetime(2025, 1, 15, 10, 0, tzinfo=timezone.utc)


def figures(reachable=True, **values):
    return (reachable, *(values.get(f) for f in chunks.NODE_FIELDS_V1))


def test_a_chunk_gives_back_every_record_as_it_went_in():
    servers = pool.pack([(12, "SHUNNED", {"conn_used": 3, "queries_ps": 10.25, "latency_us": 2**40})])
    records = [
        (T0 + timedelta(microseconds=123457), figures(questions_ps=1234.5, conn_used=7, mysql_threads=4), servers),
        (T0 + timedelta(seconds=5, microseconds=1), figures(reachable=False), None),
        (T0 + timedelta(seconds=10), None, servers),
        (T0 + timedelta(seconds=15), figures(questions_ps_min=-2.5, questions_ps_max=2**40), None),
    ]
    got = chunks.decode(T0, chunks.encode(T0, records))
    assert [r[0] for r in got] == [r[0] for r in records]  # to the microsecond
    assert got[0][1] == records[0][1] and got[1][1] == records[1][1] and got[3][1] == records[3][1]
    assert got[2][1] is None and got[1][2] is None
    assert pool.unpack(got[0][2]) == pool.unpack(servers) and pool.unpack(got[2][2]) == pool.unpack(servers)


def test_a_chunk_holds_every_figure_of_the_model():
    """A new sample column needs a new chunk version: the V1 field lists are frozen."""
    for model, owner, fields in (
        (ProxySQLSample, "node_id", chunks.NODE_FIELDS_V1),
        (BackendSample, "server_id", chunks.BACKEND_FIELDS_V1),
    ):
        columns = {f.attname for f in model._meta.concrete_fields} - {"id", owner, "ts", "resolution", "reachable"}
        assert set(fields) == columns, model


def test_an_hour_of_polls_in_a_chunk_costs_a_fraction_of_its_rows():
    """720 polls of a busy node with 9 servers: under 60 bytes a poll (two rows cost 200-500 with indexes)."""
    busy = {"conn_used": 4, "conn_free": 12, "conn_err_ps": 0.0, "bytes_sent_ps": 146232.0, "latency_us": 412}
    records = []
    for k in range(720):
        servers = pool.pack(
            [(5000 + i, "ONLINE", {**busy, "queries_ps": 800 + (k * 7 + i) % 50} if i < 4 else {}) for i in range(9)]
        )
        records.append(
            (
                T0 + timedelta(seconds=5 * k),
                figures(
                    questions_ps=3200.0 + k % 13,
                    conn_used=16,
                    conn_free=48,
                    client_connections_connected=200,
                    mysql_threads=4,
                ),
                servers,
            )
        )
    assert len(chunks.encode(T0, records)) / 720 < 60


@pytest.fixture
def node(db):
    cluster = Cluster.objects.create(name="c", writer_hostgroup=100, reader_hostgroup=101)
    return ProxySQLNode.objects.create(
        cluster=cluster, name="p", admin_host="127.0.0.1", admin_port=6032, admin_user="a"
    )


def write_history(node, start, count, step, resolution, spike_at=None):
    """`count` records `step` seconds apart: node figures and a pool snapshot of two servers."""
    rows, snaps = [], []
    for k in range(count):
        ts = start + timedelta(seconds=step * k)
        used = 40 if k == spike_at else 4 + k % 3
        extremes = {} if resolution == RAW else {"questions_ps_min": 1.0 * k, "questions_ps_max": 100.0 + k}
        rows.append(
            ProxySQLSample(
                node=node,
                ts=ts,
                resolution=resolution,
                reachable=k % 50 != 7,
                questions_ps=10.0 + k,
                conn_used=used,
                mysql_threads=4,
                **extremes,
            )
        )
        snaps.append(
            pool.snapshot(
                node.pk,
                ts,
                [
                    {
                        "hostgroup": 100,
                        "srv_host": "db1",
                        "srv_port": 3306,
                        "status": "ONLINE",
                        "conn_used": used,
                        "queries_ps": 1.5 * k,
                        "latency_us": 300 + k,
                    },
                    {
                        "hostgroup": 101,
                        "srv_host": "db2",
                        "srv_port": 3306,
                        "status": "SHUNNED" if k == spike_at else "ONLINE",
                        "conn_used": 0,
                        "conn_free": 2,
                    },
                ],
                resolution,
            )
        )
    ProxySQLSample.objects.bulk_create(rows)
    PoolSnapshot.objects.bulk_create(snaps)


def everything(node, now):
    """What the readers see: node figures, pool rows and every ProxySQL chart at every range."""
    where = {"node_id": node.pk, "ts__gte": now - timedelta(days=40), "ts__lt": now}
    fields = ["reachable", "questions_ps", "questions_ps_min", "questions_ps_max", "conn_used", "mysql_threads"]
    out = {
        "samples": chunks.samples(where, fields),
        "pool": list(chunks.read_pool(where, ["status", "conn_used", "conn_used_max", "queries_ps", "latency_us"])),
    }
    node = ProxySQLNode.objects.select_related("cluster").get(pk=node.pk)
    for name in ("queries", "connections", "latency", "errors", "mirror_queue"):
        for range_key in charts.RANGES:
            out[(name, range_key)] = charts.chart("proxysql", name, node, range_key, now=now.timestamp())
    return out


def test_compacted_history_reads_exactly_as_its_rows_did(node, settings):
    settings.MONITOR_RETENTION_HOUR_D = 400
    now = T0 + timedelta(days=3)
    # Three hours of raw polls, two days of minute buckets, ten days of hour buckets (a spike in each).
    write_history(node, now - timedelta(hours=3), 3 * 720, 5, RAW, spike_at=100)
    write_history(node, now - timedelta(days=2), 2 * 1440, 60, MINUTE, spike_at=1500)
    write_history(node, now - timedelta(days=10), 10 * 24, 3600, HOUR, spike_at=30)
    for name, until in (
        ("proxysqlsample:60", now - timedelta(minutes=50)),
        ("poolsnapshot:60", now - timedelta(minutes=55)),
        ("proxysqlsample:3600", now),
        ("poolsnapshot:3600", now),
    ):
        RollupMark.objects.create(name=name, rolled_until=until)
    before = everything(node, now)

    compacted = chunks.compact(now, max_spans=10**6)

    # Raw: the two whole hours the minute rollup has read; hour buckets: the days before today's.
    assert compacted == 2 * 720 + 2 * 1440 + (240 - 10)
    assert (
        ProxySQLSample.objects.filter(resolution=RAW).count()
        == PoolSnapshot.objects.filter(resolution=RAW).count()
        == 720
    )
    assert (
        ProxySQLSample.objects.filter(resolution=HOUR).count() == 10
        and PoolSnapshot.objects.filter(resolution=HOUR).count() == 10
    )
    assert not ProxySQLSample.objects.filter(resolution=MINUTE).exists()
    assert HistoryChunk.objects.count() == 2 + 96 + 10  # minute buckets: a chunk per half hour
    after = everything(node, now)
    for key in before:
        assert after[key] == before[key], key
    assert chunks.compact(now) == 0  # nothing left that the rollups have read


def test_a_late_row_joins_its_chunk_and_retention_drops_whole_chunks(node, settings):
    now = T0 + timedelta(days=2)
    hour = now - timedelta(hours=3)
    write_history(node, hour, 720, 5, RAW)
    for name in ("proxysqlsample:60", "poolsnapshot:60"):
        RollupMark.objects.create(name=name, rolled_until=hour + timedelta(hours=1))
    assert chunks.compact(now) == 720
    write_history(node, hour + timedelta(seconds=2), 1, 5, RAW)  # a round that wrote after the compaction
    assert chunks.compact(now) == 721
    assert HistoryChunk.objects.count() == 1 and not ProxySQLSample.objects.exists()
    assert len(chunks.samples({"node_id": node.pk}, ["questions_ps"])) == 721
    ts, last = chunks.last_reachable_raw(node.pk)  # the page's stand-in when Redis is down
    assert ts == hour + timedelta(seconds=5 * 719) and last["questions_ps"] == 10.0 + 719

    assert rollups.prune(now=hour + timedelta(hours=24, minutes=59))["historychunk:0"] == 0  # part still kept
    assert rollups.prune(now=hour + timedelta(hours=25, seconds=1))["historychunk:0"] == 1


def test_a_bounded_run_stops_and_the_next_goes_on(node):
    others = [
        ProxySQLNode.objects.create(
            cluster=node.cluster, name=f"p{i}", admin_host="127.0.0.1", admin_port=7000 + i, admin_user="a"
        )
        for i in range(4)
    ]
    for n in [node, *others]:
        write_history(n, T0, 12, 5, RAW)
    for name in ("proxysqlsample:60", "poolsnapshot:60"):
        RollupMark.objects.create(name=name, rolled_until=T0 + timedelta(hours=1))
    assert chunks.compact(T0 + timedelta(hours=2), max_owners=2, batch=2) == 2 * 12
    assert chunks.compact(T0 + timedelta(hours=2), max_owners=2, batch=2) == 2 * 12
    assert chunks.compact(T0 + timedelta(hours=2), max_owners=2, batch=2) == 12
    assert HistoryChunk.objects.count() == 5 and not ProxySQLSample.objects.exists()


def test_the_rollup_task_compacts_what_it_has_rolled_up(node):
    now = T0 + timedelta(hours=3)
    write_history(node, T0, 720, 5, RAW, spike_at=300)
    result = rollups.run_all(now=now)
    assert result["written"]["proxysqlsample:60"] == 60 and result["compacted"] == 720 + 60
    # Raw polls and minute buckets are chunks now; the hour bucket stays a row until its day is complete.
    assert HistoryChunk.objects.count() == 1 + 2 and ProxySQLSample.objects.get().resolution == HOUR
    (hour,) = [
        v for *_, key, v in chunks.read_pool({"node_id": node.pk, "resolution": HOUR}, ["status"]) if key[1] == "db2"
    ]
    assert hour == ["SHUNNED"]
    minutes = [
        v for *_, key, v in chunks.read_pool({"node_id": node.pk, "resolution": MINUTE}, ["status"]) if key[1] == "db2"
    ]
    assert minutes.count(["SHUNNED"]) == 1 and len(minutes) == 60


def test_backend_history_compacts_and_reads_as_its_rows_did(node):
    server = Server.objects.create(cluster=node.cluster, hostname="db1", port=3306)
    now = T0 + timedelta(hours=2)
    rows = [
        BackendSample(
            server=server,
            ts=T0 + timedelta(seconds=k),
            reachable=k != 17,
            local_state=2 if k == 900 else 4,
            primary=True,
            ready=k != 900,
            cluster_size=3,
            recv_queue=k % 7,
            flow_control_paused=0.125,
            desync=k == 900,
            reject_queries=False,
            read_only=None,
            lag_seconds=None,
        )
        for k in range(3600)
    ]
    BackendSample.objects.bulk_create(rows)
    RollupMark.objects.create(name="backendsample:60", rolled_until=T0 + timedelta(hours=1))
    fields = ["reachable", *chunks.BACKEND_FIELDS_V1]
    where = {"server__cluster": node.cluster, "resolution": RAW, "ts__gte": T0 + timedelta(seconds=600)}
    before = (
        chunks.samples(where, fields, BackendSample),
        selectors.sparklines(node.cluster, now=T0.timestamp() + 3600),
        charts.chart("backend", "wsrep_state", server, "1h", now=T0.timestamp() + 3600),
        chunks.last_reachable_raw(server.pk, BackendSample),
    )

    assert chunks.compact(now) == 3600
    assert BackendChunk.objects.count() == 1 and not BackendSample.objects.exists()
    after = (
        chunks.samples(where, fields, BackendSample),
        selectors.sparklines(node.cluster, now=T0.timestamp() + 3600),
        charts.chart("backend", "wsrep_state", server, "1h", now=T0.timestamp() + 3600),
        chunks.last_reachable_raw(server.pk, BackendSample),
    )
    assert after == before
    desynced = after[0][300]  # the second 900: booleans come back as booleans, None as None
    assert desynced[3:7] == (True, 2, True, False) and desynced[10] is True and desynced[12] is None
    assert 2 in after[1][0][0]["states"]  # the desynced second is in its minute's mark


@pytest.mark.django_db(transaction=True)
def test_migration_0006_leaves_rows_to_the_task_and_turns_chunks_back_into_rows():
    executor = MigrationExecutor(connection)
    before = [("monitoring", "0005_float32_figures")]  # the lead may renumber it at merge time
    after = [("monitoring", "0006_history_chunks")]
    executor.migrate(before)
    try:
        cluster = Cluster.objects.create(name="m", writer_hostgroup=100, reader_hostgroup=101)
        node = ProxySQLNode.objects.create(
            cluster=cluster, name="p", admin_host="127.0.0.1", admin_port=6032, admin_user="a"
        )
        state = executor.loader.project_state(before).apps
        Sample, Mark = state.get_model("monitoring", "ProxySQLSample"), state.get_model("monitoring", "RollupMark")
        Sample.objects.bulk_create(
            [
                Sample(
                    node_id=node.pk,
                    ts=T0 + timedelta(minutes=k),
                    resolution=MINUTE,
                    questions_ps=k,
                    questions_ps_max=2.5 * k,
                )
                for k in range(120)
            ]
        )
        Mark.objects.create(name="proxysqlsample:3600", rolled_until=T0 + timedelta(hours=1))
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        assert HistoryChunk.objects.count() == 0 and ProxySQLSample.objects.count() == 120  # left to the task
        chunks.compact()
        assert HistoryChunk.objects.count() == 2 and ProxySQLSample.objects.count() == 60  # the hour not rolled up
        got = chunks.samples({"node_id": node.pk}, ["questions_ps", "questions_ps_max"])
        assert [r[3:] for r in got] == [(k, 2.5 * k) for k in range(120)]
        executor = MigrationExecutor(connection)
        executor.migrate(before)
        assert Sample.objects.count() == 120
        assert sorted(Sample.objects.values_list("questions_ps_max", flat=True)) == [2.5 * k for k in range(120)]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
