"""Stale, unreachable, not synced, Redis down, hostile names, and the overview's query count at scale.

Latest-state documents are written to a real Redis in the exact shape pollers.py writes them
(synthetic.py); Redis down is a REDIS_URL on a port where nothing listens."""

import re
import socket
import time
from datetime import datetime, timezone

import pytest
from django.urls import reverse

from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.monitoring import live, overview, status
from apps.monitoring.models import BackendSample, ProxySQLSample
from apps.monitoring.pool import snapshot as pool_snapshot
from apps.monitoring.tests import synthetic

pytestmark = pytest.mark.django_db
HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def small(db):
    """One cluster with one ProxySQL node and two backends, all with hostile comments; no document yet."""
    cluster = Cluster.objects.create(
        name=f"c {HOSTILE}", writer_hostgroup=100, reader_hostgroup=101, poll_interval_s=2.0, max_replication_lag=50
    )
    node = ProxySQLNode.objects.create(
        cluster=cluster, name=f"p {HOSTILE}", admin_host="127.0.0.1", admin_port=1, admin_user="admin", comment=HOSTILE
    )
    servers = [Server.objects.create(cluster=cluster, hostname=f"db{i}.example", port=3306) for i in (1, 2)]
    for s in servers:
        HostgroupMembership.objects.create(server=s, hostgroup_id=101, weight=1000, comment=HOSTILE)
    return cluster, node, servers


def runtime(servers, **changes):
    rows = [
        {
            "hostgroup_id": 101,
            "hostname": s.hostname,
            "port": s.port,
            "gtid_port": 0,
            "status": "ONLINE",
            "weight": 1000,
            "compression": 0,
            "max_connections": 1000,
            "max_replication_lag": 0,
            "use_ssl": 0,
            "max_latency_ms": 0,
            "comment": HOSTILE,
        }
        for s in servers
    ]
    rows[0].update(changes)
    return rows


def page(client, url):
    response = client.get(url)
    assert response.status_code == 200
    body = response.content.decode()
    assert HOSTILE not in body  # escaped everywhere
    return body


def attention_of(body):
    return body[body.index('id="attention"') : body.index("<h2>Clusters")]


def test_stale_and_unreachable_nodes(small, live_redis, viewer_client):
    cluster, node, servers = small
    now = time.time()
    doc = synthetic.proxysql_doc(runtime(servers), now - 20, ok=False)  # older than 3 x 2 s
    doc["error"] = f"connect failed {HOSTILE}"
    live.write_many(live.PROXYSQL, {node.pk: doc})
    live.write_many(
        live.BACKEND, {servers[0].pk: synthetic.backend_doc(now), servers[1].pk: synthetic.backend_doc(now, ok=False)}
    )
    body = page(viewer_client, reverse("pages:overview"))
    attention = attention_of(body)
    assert 'data-kind="stale"' in attention and re.search(
        r"no poll for 2\d s; last poll failed: connect failed &lt;script&gt;", attention
    )
    assert 'data-kind="unreachable"' in attention and "refused: backend db: connect refused" in attention
    assert attention.index('data-kind="unreachable"') < attention.index('data-kind="stale"')  # red first
    node_page = page(viewer_client, node.get_absolute_url())
    assert 'data-state="stale"' in node_page and "are the workers running?" in node_page
    assert "Last poll failed (timeout): connect failed &lt;script&gt;" in node_page
    server_page = page(viewer_client, servers[1].get_absolute_url())
    assert 'data-state="unreachable"' in server_page and "Failing since" in server_page


def test_a_failing_poll_shows_the_age_of_the_figures_it_keeps_not_its_own(small, live_redis, viewer_client):
    """A ProxySQL paused 40 s ago: each poll fails at once and keeps the last good poll's figures; the pages said
    "figures 0.5 s old" beside "last good poll 40 s ago — the figures below are from it"."""
    cluster, node, servers = small
    now = time.time()
    doc = synthetic.proxysql_doc(runtime(servers), now - 0.5, ok=False)
    doc["last_ok"] = now - 40
    backend = synthetic.backend_doc(now - 0.5, ok=False)
    backend["last_ok"] = now - 40
    live.write_many(live.PROXYSQL, {node.pk: doc})
    live.write_many(live.BACKEND, {servers[0].pk: backend, servers[1].pk: synthetic.backend_doc(now)})
    node_page = page(viewer_client, node.get_absolute_url())
    assert 'data-state="unreachable"' in node_page
    assert re.search(r'figures <span class="age">4\d s</span> old', node_page)
    server_page = page(viewer_client, servers[0].get_absolute_url())
    assert re.search(r'figures <span class="age">4\d s</span> old', server_page)
    cluster_live = page(viewer_client, reverse("monitoring:cluster_live", args=[cluster.pk]))
    hostgroup_rows = cluster_live[cluster_live.index('class="live-hg"') : cluster_live.index("Backends, live")]
    ages = re.findall(r'<td class="num age">([^<]*)</td>', hostgroup_rows)
    assert ages and all(re.fullmatch(r"4\d s", a) for a in ages), ages
    # The API's age_s stays the age of the latest poll (its last_ok says when the figures were read).
    assert viewer_client.get(reverse("api:node_state", args=[node.pk])).json()["age_s"] < 5


def test_a_failing_poll_says_what_it_means_and_what_to_do(small, live_redis, viewer_client):
    """At 3 a.m. the node page said "Last poll failed (timeout): ... no handshake within 0.5s" and no more: the on-call
    DBA had to know that a timeout there is a hung ProxySQL and a refusal a stopped one, and what that blocks."""
    cluster, node, servers = small
    now = time.time()
    backend = synthetic.backend_doc(now, ok=False)
    backend["error_kind"] = "unreachable"
    live.write_many(live.PROXYSQL, {node.pk: synthetic.proxysql_doc(runtime(servers), now, ok=False)})
    live.write_many(live.BACKEND, {servers[0].pk: backend, servers[1].pk: synthetic.backend_doc(now)})
    node_page = page(viewer_client, node.get_absolute_url())
    assert "data-advice" in node_page and "the process is hung, stopped or overloaded" in node_page
    assert "A switchover, drain or restore on this cluster is refused until every ProxySQL node answers." in node_page
    server_page = page(viewer_client, servers[0].get_absolute_url())
    assert "the database is stopped or crashed" in server_page and "drain it for maintenance" in server_page
    assert "data-advice" not in page(viewer_client, servers[1].get_absolute_url())  # answering: nothing to advise


def test_a_backend_in_maintenance_that_is_down_is_planned_work_not_a_red_unreachable(small, live_redis, viewer_client):
    """A backend drained for maintenance, then stopped: the fleet page listed it red "unreachable" at the top of
    "Needs attention", like an outage; its alert was held. It is listed, grey, as planned maintenance."""
    cluster, node, servers = small
    Server.objects.filter(pk=servers[1].pk).update(maintenance=True)
    now = time.time()
    live.write_many(live.PROXYSQL, {node.pk: synthetic.proxysql_doc(runtime(servers), now)})
    live.write_many(
        live.BACKEND, {servers[0].pk: synthetic.backend_doc(now), servers[1].pk: synthetic.backend_doc(now, ok=False)}
    )
    attention = attention_of(page(viewer_client, reverse("pages:overview")))
    assert 'data-kind="unreachable"' not in attention and 'class="att-red"' not in attention
    assert 'data-kind="in maintenance"' in attention
    assert "planned maintenance; unreachable: refused: backend db: connect refused" in attention


def test_not_synced_and_recv_queue_over_threshold(small, live_redis, viewer_client):
    cluster, node, servers = small
    now = time.time()
    live.write_many(live.PROXYSQL, {node.pk: synthetic.proxysql_doc(runtime(servers), now)})
    live.write_many(
        live.BACKEND,
        {
            servers[0].pk: synthetic.backend_doc(now, local_state=2, recv_queue=80),
            servers[1].pk: synthetic.backend_doc(now, recv_queue=51),
        },
    )
    attention = attention_of(page(viewer_client, reverse("pages:overview")))
    assert "wsrep_local_state 2 Donor/Desynced" in attention
    assert attention.count('data-kind="recv queue"') == 2
    assert "recv queue 51 over the cluster&#x27;s max_replication_lag 50" in attention
    cluster_page = page(viewer_client, cluster.get_absolute_url())
    assert "Donor/Desynced" in cluster_page and 'class="num bad">80' in cluster_page


def test_never_polled_nodes_are_listed_and_a_clean_fleet_says_so(small, live_redis, viewer_client):
    cluster, node, servers = small
    attention = attention_of(page(viewer_client, reverse("pages:overview")))
    assert attention.count('data-kind="no data"') == 3 and "are the Celery worker and beat running?" in attention
    now = time.time()
    live.write_many(live.PROXYSQL, {node.pk: synthetic.proxysql_doc(runtime(servers), now)})
    live.write_many(live.BACKEND, {s.pk: synthetic.backend_doc(now) for s in servers})
    assert 'data-attention="none"' in page(viewer_client, reverse("pages:overview"))


def test_drift_from_the_documents_is_described_field_by_field(small, live_redis):
    cluster, node, servers = small
    live.write_many(
        live.PROXYSQL, {node.pk: synthetic.proxysql_doc(runtime(servers, status="OFFLINE_SOFT"), time.time())}
    )
    data = overview.fleet_overview()
    (item,) = [a for a in data["attention"] if a["what"] == "drift"]
    assert item["detail"] == "hg 101 db1.example:3306 status: intended ONLINE, runtime OFFLINE_SOFT"
    assert item["url"].endswith("#drift-section")


def test_a_shunned_row_in_the_documents_is_not_drift(small, live_redis):
    """SHUNNED is ProxySQL's own verdict after connection errors on that node, not a configuration change."""
    cluster, node, servers = small
    live.write_many(live.PROXYSQL, {node.pk: synthetic.proxysql_doc(runtime(servers, status="SHUNNED"), time.time())})
    assert [a for a in overview.fleet_overview()["attention"] if a["what"] == "drift"] == []


def test_an_unreadable_document_does_not_break_the_page(small, live_redis, viewer_client):
    cluster, node, servers = small
    live.client().set(live.key(live.PROXYSQL, node.pk), b'{"ts": "yesterday"')
    attention = attention_of(page(viewer_client, reverse("pages:overview")))
    assert "latest state unreadable" in attention


def test_empty_figures_of_a_node_whose_polls_stopped_show_as_missing(small, live_redis, viewer_client):
    """Issue 22: /clusters/N/ answered 500 (float('')) on an empty figure while a node's polls had stopped."""
    cluster, node, servers = small
    now = time.time()
    doc = synthetic.proxysql_doc(runtime(servers), now - 20, ok=False)
    for row in doc["pool"]:
        row.update(conn_used="", conn_free=None, queries_ps="", latency_us="")
    backend = synthetic.backend_doc(now - 20)
    backend["state"].update(cluster_size="", local_recv_queue="", flow_control_paused="n/a")
    live.write_many(live.PROXYSQL, {node.pk: doc})
    live.write_many(live.BACKEND, {s.pk: backend for s in servers})
    body = page(viewer_client, cluster.get_absolute_url())
    assert 'data-state="stale"' in body and '<td class="num">– / –</td>' in body
    assert (
        page(viewer_client, reverse("monitoring:cluster_live", args=[cluster.pk])).count('<td class="num">–</td>') >= 4
    )


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_redis_down_pages_render_history_and_say_live_data_is_unavailable(small, settings, viewer_client):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    cluster, node, servers = small
    ts = datetime.fromtimestamp(time.time() - 30, tz=timezone.utc)
    ProxySQLSample.objects.create(node=node, ts=ts, questions_ps=1234.0, conn_used=4, conn_free=2)
    pool_snapshot(
        node.pk,
        ts,
        [
            {
                "hostgroup": 101,
                "srv_host": "db1.example",
                "srv_port": 3306,
                "status": "ONLINE",
                "conn_used": 4,
                "conn_free": 2,
                "queries_ps": 99.0,
                "latency_us": 250,
            }
        ],
    ).save()
    BackendSample.objects.create(server=servers[0], ts=ts, local_state=4, primary=True, ready=True, recv_queue=3)

    overview_page = page(viewer_client, reverse("pages:overview"))
    assert 'data-live="unavailable"' in overview_page and "Live data unavailable" in overview_page
    assert "Unknown while live data is unavailable" in overview_page and 'data-kind="no data"' not in overview_page
    node_page = page(viewer_client, node.get_absolute_url())
    assert "Live data unavailable" in node_page and "Last poll stored in history" in node_page
    assert "db1.example:3306" in node_page and "1,234" in node_page  # the stored pool and figures
    chart = viewer_client.get(reverse("monitoring:proxysql_chart", args=[node.pk, "queries"])).json()
    assert 1234.0 in chart["series"][0]["values"]  # history still drawn
    server_page = page(viewer_client, servers[0].get_absolute_url())
    assert "Live data unavailable" in server_page and "Synced" in server_page
    cluster_page = page(viewer_client, cluster.get_absolute_url())
    assert "Live data unavailable" in cluster_page and cluster_page.count("<rect") == 1  # sparkline from history


def test_redis_down_the_overview_does_not_count_every_node_as_down(small, settings, viewer_client):
    """Redis not answering: the totals said "0/1 ProxySQL nodes answering · 0/2 backends Synced", which reads as an
    outage of the whole fleet at 3 a.m.; they are unknown, not down."""
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    overview_page = page(viewer_client, reverse("pages:overview"))
    assert "0/1 ProxySQL nodes answering" not in overview_page and "0/2 backends" not in overview_page
    assert 'data-totals="unknown"' in overview_page
    assert (
        "1 ProxySQL nodes · 2 backends: whether they answer is unknown while live data is unavailable" in overview_page
    )


def test_overview_query_count_does_not_grow_with_the_fleet(live_redis, viewer_client, django_assert_max_num_queries):
    """Session + user + roles, then clusters, nodes, servers, memberships, pending rollbacks and the firing alerts
    by severity (the alert banner): the same at 4 and 40 clusters."""
    counts = []
    for n in (4, 40):
        _, nodes, servers = synthetic.fleet(n, 2, 6, prefix=f"q{n}")
        synthetic.publish(nodes, servers, trouble_every=7)
        viewer_client.get(reverse("monitoring:overview_live"))  # warm the session
        with django_assert_max_num_queries(9) as captured:
            response = viewer_client.get(reverse("monitoring:overview_live"))
        assert response.status_code == 200
        counts.append(len(captured.captured_queries))
    assert counts[0] == counts[1]
    print(f"overview live refresh: {counts[1]} queries")


def test_the_overview_pages_clusters_but_lists_every_attention_item(live_redis, viewer_client):
    _, nodes, servers = synthetic.fleet(60, 1, 2, prefix="pg")
    synthetic.publish(nodes, servers, trouble_every=20)  # nodes 0, 20, 40 unreachable
    first = viewer_client.get(reverse("pages:overview")).content.decode()
    assert "page 1 of 3" in first and first.count('data-kind="unreachable"') == 3
    assert "pg-0040" in attention_of(first) and "pg-0040" not in first[first.index("<h2>Clusters") :]
    only = viewer_client.get(reverse("pages:overview") + "?attention=1").content.decode()
    troubled = {a["cluster"] for a in overview.fleet_overview()["attention"]}
    assert f"({len(troubled)} needing attention, of 60)" in only and "page 1 of" not in only
    assert only.count('class="needs-attention"') == len(troubled)


def test_mirror_verdict_reads_the_queue_as_a_total_over_threads():
    figures = {
        "mirror_queue_length": 90,
        "mirror_max_queue_length": 50,
        "mysql_threads": 2,
        "mirror_concurrency": 3,
        "mirror_max_concurrency": 16,
        "questions_ps": 100.0,
        "prepared_ps": 60.0,
    }
    m = status.mirror(figures)
    assert m.queue_limit == 100 and m.queue_near_limit and not m.concurrency_at_limit and m.mostly_prepared
    assert "queue 90 of 100 (90%; 50 per thread x 2 threads)" in m.summary()
    assert not status.mirror({**figures, "mirror_queue_length": 60}).queue_near_limit  # over 50, but 30 a thread
    assert status.mirror({**figures, "mirror_concurrency": 16, "mirror_queue_length": 0}).saturated
    assert not status.mirror({}).saturated and status.mirror({}).prepared_share is None


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"local_state": 2, "local_state_comment": "Donor/Desynced"},
        {"cluster_status": "non-Primary"},
        {"ready": False},
        {"local_recv_queue": 51},
        {"local_recv_queue": 50},
        {"pxc_maint_mode": "MAINTENANCE"},
        {"pxc_maint_mode": "DISABLED"},
        {"wsrep_on": False, "local_state": None, "cluster_status": None},
        {"wsrep_on": False, "local_state": None, "lag": 51},
        {"wsrep_on": False, "local_state": None, "lag": 3},
    ],
)
def test_the_overview_fast_path_agrees_with_backend_problems(state):
    import json

    doc = synthetic.backend_doc(time.time())
    doc["lag_seconds"] = state.pop("lag", None)
    doc["state"].update(state)
    decoded = overview._decoders[live.BACKEND].decode(json.dumps(doc).encode())
    assert decoded.clean(50) == (not status.backend_problems(doc, 50))
    assert status.backend_problems(decoded.as_dict(), 50) == status.backend_problems(doc, 50)
