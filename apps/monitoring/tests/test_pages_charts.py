"""Chart JSON: resolution by range, gaps (missing polls, unreachable polls, empty rollup buckets), the
rollups' unfinished tail, bucketing of long windows. Samples are bulk-created: no network."""

import time
from datetime import datetime, timezone

import pytest
from django.urls import reverse

from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.monitoring import charts
from apps.monitoring.models import HOUR, MINUTE, RAW, BackendSample, PoolSnapshot, ProxySQLSample
from apps.monitoring.pool import snapshot as pool_snapshot
from apps.monitoring.templatetags.monitoring import sparkline

pytestmark = pytest.mark.django_db
NOW = 1_800_000_000.0  # a fixed "now", on a whole hour


def dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


@pytest.fixture
def node(db):
    cluster = Cluster.objects.create(
        name="c", writer_hostgroup=100, reader_hostgroup=101, poll_interval_s=2.0, max_replication_lag=50
    )
    Server.objects.create(cluster=cluster, hostname="db1", port=3306)
    return ProxySQLNode.objects.create(
        cluster=cluster, name="p", admin_host="127.0.0.1", admin_port=6032, admin_user="admin"
    )


def values(data, label):
    return next(s["values"] for s in data["series"] if s["label"] == label)


def test_resolution_follows_the_range():
    assert [charts.resolution_for(charts.RANGES[r]) for r in ("1h", "6h", "24h", "7d", "30d")] == [
        RAW,
        RAW,
        MINUTE,
        MINUTE,
        HOUR,
    ]
    assert charts.Window("1h", 2.0, NOW).bucket is None  # 1,800 raw polls: drawn as they are
    assert charts.Window("6h", 2.0, NOW).bucket == 12  # 10,800 polls -> 12 s buckets, at most 2,000 points
    assert charts.Window("24h", 2.0, NOW).bucket == 60
    assert charts.Window("7d", 2.0, NOW).bucket == 360
    assert charts.Window("nonsense", 2.0, NOW).range == "1h"


def test_a_missing_stretch_and_an_unreachable_poll_are_gaps_never_drawn_through(node):
    start = NOW - 600
    stamps = [start + 2 * i for i in range(60)] + [start + 180 + 2 * i for i in range(30)]  # 60 s hole
    rows = [ProxySQLSample(node=node, ts=dt(t), questions_ps=100.0 + i, conn_used=4) for i, t in enumerate(stamps)]
    rows[10].reachable, rows[10].questions_ps, rows[10].conn_used = False, None, None  # a failed poll
    ProxySQLSample.objects.bulk_create(rows)
    data = charts.chart("proxysql", "queries", node, "1h", now=NOW)
    assert data["resolution"] == 0 and data["bucket"] == 0
    assert data["start"] == (NOW - 3600) * 1000 and data["end"] == NOW * 1000
    t, q = data["t"], values(data, "Questions/s (all)")
    assert len(t) == len(stamps) + 1 and len(q) == len(t)  # one null point inserted in the hole
    nulls = [i for i, v in enumerate(q) if v is None]
    assert nulls == [10, 60]
    assert t[10] == stamps[10] * 1000  # the unreachable poll, at its own time
    assert stamps[59] * 1000 < t[60] < stamps[60] * 1000  # the hole
    assert t == sorted(t)
    assert q[0] == 100.0 and q[-1] == 189.0


def test_a_pool_server_missing_from_some_polls_is_a_gap_in_its_own_hostgroup_only(node):
    stamps = [NOW - 100 + 2 * i for i in range(10)]
    ProxySQLSample.objects.bulk_create([ProxySQLSample(node=node, ts=dt(t)) for t in stamps])
    pool = []
    for i, t in enumerate(stamps):
        servers = [
            {
                "hostgroup": 100,
                "srv_host": "db1",
                "srv_port": 3306,
                "status": "ONLINE",
                "conn_used": 4,
                "conn_free": 1,
                "latency_us": 300,
            }
        ]
        if i not in (4, 5):
            servers.append(
                {
                    "hostgroup": 101,
                    "srv_host": "db2",
                    "srv_port": 3306,
                    "status": "ONLINE",
                    "conn_used": 2,
                    "conn_free": 3,
                    "latency_us": 200,
                }
            )
        pool.append(pool_snapshot(node.pk, dt(t), servers))
    PoolSnapshot.objects.bulk_create(pool)
    data = charts.chart("proxysql", "connections", node, "1h", now=NOW)
    assert values(data, "used · hg 100 (writer)") == [4] * 10
    assert values(data, "used · hg 101 (reader)") == [2, 2, 2, 2, None, None, 2, 2, 2, 2]
    latency = charts.chart("proxysql", "latency", node, "1h", now=NOW)
    assert values(latency, "hg 100 · db1:3306") == [0.3] * 10 and latency["unit"] == "ms"


def test_the_connections_chart_draws_a_few_series_per_hostgroup_not_two_per_server(node):
    """Issue 23: six servers in two hostgroups drew twelve series of raw polls, unreadable. Now: used and free per
    hostgroup (its role named), summed over its servers; the peak of its busiest server where points are buckets;
    each server's status is still in `status`."""

    def polls(start, n, step):
        stamps = [start + step * i for i in range(n)]
        ProxySQLSample.objects.bulk_create([ProxySQLSample(node=node, ts=dt(t)) for t in stamps])
        PoolSnapshot.objects.bulk_create(
            [
                pool_snapshot(
                    node.pk,
                    dt(t),
                    [
                        {
                            "hostgroup": hg,
                            "srv_host": f"db{k}",
                            "srv_port": 3306,
                            "status": "ONLINE",
                            "conn_used": k + i % 2,
                            "conn_free": 10 - k,
                            "latency_us": 300,
                        }
                        for hg in (100, 101)
                        for k in range(1, 4)
                    ],
                )
                for i, t in enumerate(stamps)
            ]
        )

    polls(NOW - 100, 10, 2)
    data = charts.chart("proxysql", "connections", node, "1h", now=NOW)
    assert [s["label"] for s in data["series"]] == [
        "used · hg 100 (writer)",
        "free · hg 100 (writer)",
        "used · hg 101 (reader)",
        "free · hg 101 (reader)",
    ]
    assert values(data, "used · hg 101 (reader)") == [6, 9] * 5  # 1 + 2 + 3, then each one more
    assert values(data, "free · hg 100 (writer)") == [24] * 10  # 9 + 8 + 7
    assert len(data["status"]) == 6 and data["status"]["hg 101 · db3:3306"] == ["ONLINE"] * 10

    polls(NOW - 6 * 3600 + 1, 240, 60)  # one poll a minute over 6 h: bucketed by 12 s steps, a bucket per poll
    data = charts.chart("proxysql", "connections", node, "6h", now=NOW)
    assert data["bucket"] == 12 and len(data["series"]) == 6
    peak = values(data, "most used by one server in a bucket · hg 100 (writer)")
    assert set(v for v in peak if v is not None) == {3, 4}  # db3's, never the sum


def test_rollups_and_the_tail_they_have_not_reached_yet(node):
    # 1-minute rollups until 10 minutes ago, then only raw polls (the rollup task has not run since)
    rolled_until = NOW - 600
    minutes = [rolled_until - 60 * i for i in range(1, 120)]
    rollups = [ProxySQLSample(node=node, ts=dt(t), resolution=MINUTE, questions_ps=50.0) for t in minutes]
    rollups[5].questions_ps = None  # a minute in which every poll failed: a gap
    rollups[6].reachable = False  # a minute with one failed poll among good ones: still drawn
    ProxySQLSample.objects.bulk_create(rollups)
    raw = [ProxySQLSample(node=node, ts=dt(rolled_until + 2 * i), questions_ps=80.0 + (i % 2) * 20) for i in range(300)]
    ProxySQLSample.objects.bulk_create(raw)
    data = charts.chart("proxysql", "queries", node, "24h", now=NOW)
    assert data["resolution"] == MINUTE and data["bucket"] == 60
    q = values(data, "Questions/s (all)")
    t = data["t"]
    assert len(t) == 119 + 10 and t == sorted(t)
    assert q.count(None) == 1 and q[t.index(minutes[5] * 1000)] is None
    assert q[t.index(minutes[6] * 1000)] == 50.0
    assert q[-10:] == [90.0] * 10  # raw tail bucketed by minute: averages of 80 and 100
    assert all(b - a == 60_000 for a, b in zip(t, t[1:]))  # no hole between rollups and tail


def test_a_long_raw_window_is_bucketed_with_queue_maxima(node):
    start = NOW - 6 * 3600
    rows = [
        ProxySQLSample(
            node=node,
            ts=dt(start + 2 * i),
            mirror_queue_length=(500 if i % 6 == 3 else 10),
            mirror_max_queue_length=50,
            mysql_threads=4,
        )
        for i in range(6 * 1800)
    ]
    ProxySQLSample.objects.bulk_create(rows, batch_size=2000)
    data = charts.chart("proxysql", "mirror_queue", node, "6h", now=NOW)
    assert data["resolution"] == RAW and data["bucket"] == 12 and len(data["t"]) == 1800
    queue = values(data, "Mirror_queue_length (total over mysql-threads)")
    assert set(queue) == {500}  # the worst moment of each bucket, never averaged away
    assert set(values(data, "limit: mirror_max_queue_length × mysql-threads")) == {200}  # 50 per thread x 4
    assert set(values(data, "80% of the limit")) == {160}


def test_backend_charts_and_their_gaps(node):
    server = Server.objects.get()
    stamps = [NOW - 60 + 2 * i for i in range(20)]
    rows = [
        BackendSample(
            server=server, ts=dt(t), local_state=4 if i < 10 else 2, recv_queue=i * 10, flow_control_paused=0.1
        )
        for i, t in enumerate(stamps)
    ]
    rows[15].reachable, rows[15].local_state, rows[15].recv_queue = False, None, None
    BackendSample.objects.bulk_create(rows)
    state = charts.chart("backend", "wsrep_state", server, "1h", now=NOW)
    assert values(state, "wsrep_local_state (worst in each bucket)") == [4] * 10 + [2] * 5 + [None] + [2] * 4
    queue = charts.chart("backend", "recv_queue", server, "1h", now=NOW)
    assert values(queue, "cluster's max_replication_lag")[0] == 50
    assert values(queue, "wsrep_local_recv_queue (max in each bucket)")[15] is None


def test_chart_views(node, viewer_client):
    ProxySQLSample.objects.create(node=node, ts=dt(time.time() - 5), questions_ps=7.0)
    response = viewer_client.get(reverse("monitoring:proxysql_chart", args=[node.pk, "queries"]) + "?range=6h")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json()["range"] == "6h" and values(response.json(), "Questions/s (all)") == [7.0]
    assert viewer_client.get(reverse("monitoring:proxysql_chart", args=[node.pk, "nope"])).status_code == 404
    server = Server.objects.get()
    assert viewer_client.get(reverse("monitoring:server_chart", args=[server.pk, "queries"])).status_code == 404
    assert viewer_client.get(reverse("monitoring:server_chart", args=[server.pk, "recv_queue"])).status_code == 200


def test_sparklines_break_at_gaps():
    svg = sparkline([1, 2, None, 3, 4, None, None, 5])
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 1  # a lone point is a dot, not a line
    assert "no data" in sparkline([None, None])


def test_mirror_loss_history_rolls_up_is_pruned_and_charted_per_rule(node, settings):
    """One MirrorRuleSample per digest poll (30 s) and rule: minute and hour rollups average the rates and keep
    the worst window's loss; the chart draws each rule's loss from its copies (raw, then rollups)."""
    from apps.monitoring import rollups
    from apps.monitoring.models import MirrorRuleSample

    settings.MONITOR_DIGEST_INTERVAL_S = 30.0
    rows = []
    for i in range(240):  # two hours
        t = NOW - 2 * 3600 + i * 30
        worse = i % 2 == 1  # windows alternate between 40 % and 50 % lost: 45 % over each minute
        rows.append(
            MirrorRuleSample(
                node=node,
                rule_id=10,
                ts=dt(t),
                mirror_hostgroup=101,
                interval_s=30,
                hits_ps=100.0,
                prepared_share=0.0,
                expected_ps=100.0,
                mirrored_ps=50.0 if worse else 60.0,
                loss=0.5 if worse else 0.4,
                ambiguous=False,
            )
        )
        rows.append(
            MirrorRuleSample(
                node=node,
                rule_id=20,
                ts=dt(t),
                mirror_hostgroup=102,
                interval_s=30,
                hits_ps=10.0,
                prepared_share=0.0,
                expected_ps=10.0,
                mirrored_ps=10.0,
                loss=0.0,
                ambiguous=False,
            )
        )
    MirrorRuleSample.objects.bulk_create(rows)

    raw = charts.chart("proxysql", "mirror_loss", node, "1h", now=NOW)
    assert [s["label"] for s in raw["series"]] == ["rule 10", "rule 20"]
    assert set(v for v in values(raw, "rule 10") if v is not None) == {40.0, 50.0}
    assert None not in values(raw, "rule 10")[1:-1]  # a window every 30 s is no gap

    rollups.run_all(now=dt(NOW))
    minute = MirrorRuleSample.objects.get(node=node, rule_id=10, resolution=MINUTE, ts=dt(NOW - 3600))
    assert (minute.expected_ps, minute.mirrored_ps, minute.loss) == (100.0, 55.0, 0.5)  # rates averaged, worst loss
    assert MirrorRuleSample.objects.filter(resolution=HOUR, rule_id=20).count() == 2
    MirrorRuleSample.objects.create(node=node, rule_id=10, ts=dt(NOW - 3 * 86400), interval_s=30, loss=0.0)
    assert rollups.prune(now=dt(NOW))["mirrorrulesample:0"] == 1  # past the raw retention (24 h)
    day = charts.chart("proxysql", "mirror_loss", node, "24h", now=NOW)
    assert day["resolution"] == MINUTE
    assert set(v for v in values(day, "rule 10") if v is not None) == {45.0}
    assert set(v for v in values(day, "rule 20") if v is not None) == {0.0}
