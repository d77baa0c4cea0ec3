"""The monitoring pages with real polled data: the adopted lab (two ProxySQL doubles in front of the Galera
lab) polled by the real poll rounds into a real Redis and the test database."""

import time

import pytest
from django.urls import reverse

from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import live, pollers
from apps.monitoring.models import BackendSample
from lab import demo

pytestmark = pytest.mark.django_db


def poll(rounds=2, pause=0.3):
    """Real poll rounds of every ProxySQL node and backend (two, so that rates exist)."""
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    servers = list(Server.objects.select_related("cluster").order_by("pk"))
    for i in range(rounds):
        if i:
            time.sleep(pause)
        pollers.proxysql_round(nodes)
        pollers.backend_round(servers)
    return nodes, servers


def html(client, url):
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def test_overview_shows_the_lab_with_live_figures_and_their_age(adopted_lab, live_redis, viewer_client):
    poll()
    page = html(viewer_client, reverse("pages:overview"))
    assert "galera-lab" in page and "proxysql-1" in page and "proxysql-2" in page
    assert page.count('data-state="ok"') == 5
    # the writer (hostgroup 100 in the inventory) is named on its chip, and only there
    assert '127.0.0.1:3311 · <b class="writer">writer</b> · Synced' in page and page.count('class="writer"') == 1
    assert "127.0.0.1:3312 · Synced" in page and "127.0.0.1:3313 · Synced" in page
    assert "q/s" in page and 'class="age"' in page
    assert 'data-attention="none"' in page and "2/2 ProxySQL nodes answering" in page
    assert 'hx-get="/monitoring/overview/live/?page=1"' in page and 'hx-trigger="every 2s"' in page
    fragment = html(viewer_client, reverse("monitoring:overview_live"))
    assert "<html" not in fragment and 'id="overview-live"' in fragment and "galera-lab" in fragment


def test_unreachable_node_is_first_in_the_attention_list_with_its_error_and_since_when(
    adopted_lab, live_redis, viewer_client
):
    cluster, (first, second) = adopted_lab
    poll(rounds=1)
    node = ProxySQLNode.objects.get(admin_port=second.port)
    second.stop()
    poll(rounds=2, pause=0.1)
    doc = live.read_one(live.PROXYSQL, node.pk)
    assert not doc["ok"] and doc["error_since"] < doc["ts"]
    page = html(viewer_client, reverse("pages:overview"))
    attention = page[page.index('id="attention"') : page.index("<h2>Clusters")]
    assert 'data-kind="unreachable"' in attention and node.name in attention
    assert doc["error_kind"] in attention and time.strftime("%H:%M:%S", time.gmtime(doc["error_since"])) in attention
    assert "1/2 ProxySQL nodes answering" in page and 'data-state="unreachable"' in page

    node_page = html(viewer_client, node.get_absolute_url())
    assert 'data-state="unreachable"' in node_page and "Failing since" in node_page
    assert "the figures below are from it" in node_page  # the last good poll's figures are kept


def test_drift_in_a_polled_runtime_is_an_attention_item(adopted_lab, live_redis, viewer_client):
    cluster, (first, second) = adopted_lab
    demo.admin_sql(
        first.port,
        "UPDATE mysql_servers SET weight=5 WHERE hostgroup_id=101 AND port=3312",
        "LOAD MYSQL SERVERS TO RUNTIME",
        user=first.user,
        password=first.password,
    )
    poll(rounds=1)
    page = html(viewer_client, reverse("pages:overview"))
    attention = page[page.index('id="attention"') : page.index("<h2>Clusters")]
    assert attention.count('data-kind="drift"') == 2  # the node against the inventory, and the nodes between them
    assert "hg 101 127.0.0.1:3312 weight: intended 10000, runtime 5" in attention
    assert "ProxySQL nodes disagree" in attention


def test_cluster_page_hostgroups_by_server_by_node_and_backend_sparklines(adopted_lab, live_redis, viewer_client):
    cluster, _ = adopted_lab
    poll(rounds=3, pause=0.2)
    page = html(viewer_client, cluster.get_absolute_url())
    live_section = page[page.index("Hostgroups at runtime") : page.index("Backends, live")]
    # writer hostgroup 100: 127.0.0.1:3311 seen by both nodes, ONLINE, weight 1,000,000, 4 connections used
    writer = live_section[live_section.index("<h3>100") : live_section.index("<h3>101")]
    assert writer.count("status-ONLINE") == 2 and writer.count(">1000000<") == 2 and "proxysql-2" in writer
    assert writer.count("4 / ") == 2  # ConnUsed of the four pinned writer sessions, per node
    backends = page[page.index("Backends, live") : page.index("Backends, last hour")]
    assert backends.count("Synced") == 3 and backends.count("Primary") == 3
    sparks = page[page.index("Backends, last hour") : page.index("Hostgroups (intended)")]
    assert sparks.count('<svg class="strip"') == 3 and sparks.count("<rect") >= 3
    assert sparks.count('<svg class="spark"') == 3
    assert 'id="drift-section"' in page  # the drift section stays
    fragment = html(viewer_client, reverse("monitoring:cluster_live", args=[cluster.pk]))
    assert "<html" not in fragment and "Hostgroups at runtime" in fragment


def test_node_page_pool_table_refresh_is_small(adopted_lab, live_redis, viewer_client):
    nodes, _ = poll()
    node = nodes[0]
    page = html(viewer_client, node.get_absolute_url())
    assert 'hx-get="/monitoring/proxysql/%d/pool/"' % node.pk in page and "Connection pool" in page
    for chart in ("connections", "queries", "latency", "errors", "mirror_queue", "mirror_concurrency"):
        assert f'data-url="/monitoring/proxysql/{node.pk}/charts/{chart}.json"' in page
    response = viewer_client.get(reverse("monitoring:proxysql_pool", args=[node.pk]), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.count("<tr>") == 7  # the header and the six pool rows of the seeds' layout
    assert "127.0.0.1:3312" in body and "status-ONLINE" in body and 'data-state="ok"' in body
    size = len(response.content) + sum(len(k) + len(v) + 4 for k, v in response.items())
    print(f"pool table live refresh: {size} bytes on the wire (body {len(response.content)})")
    assert size < 20_000


def test_mirror_panel_warns_when_the_queue_is_at_its_limit_and_notes_prepared_traffic(
    adopted_lab, live_redis, viewer_client
):
    cluster, (first, _) = adopted_lab
    demo.admin_sql(
        first.port,
        "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,mirror_hostgroup,apply)"
        " VALUES (10,1,'^INSERT',100,101,1)",
        "LOAD MYSQL QUERY RULES TO RUNTIME",
        "SET mysql-mirror_max_concurrency=1",
        "SET mysql-mirror_max_queue_length=50",
        "LOAD MYSQL VARIABLES TO RUNTIME",
        user=first.user,
        password=first.password,
    )
    node = ProxySQLNode.objects.get(admin_port=first.port)
    time.sleep(0.5)  # the double's mirror queue fills: ~50 per thread
    poll(rounds=1)
    doc = live.read_one(live.PROXYSQL, node.pk)
    figures = doc["figures"]
    assert figures["mysql_threads"] == 2 and figures["mirror_max_queue_length"] == 50
    assert figures["mirror_queue_length"] > 50  # a total over two threads: above the per-thread limit
    panel = html(viewer_client, reverse("monitoring:proxysql_mirror", args=[node.pk]))
    assert 'data-mirror="saturated"' in panel and "Mirrored queries are being dropped" in panel
    assert "of 100" in panel  # limit shown: 50 per thread x 2 threads
    assert "Mirror_concurrency sits at its limit (1 of mysql-mirror_max_concurrency 1)" in panel
    overview = html(viewer_client, reverse("pages:overview"))
    assert 'data-kind="mirror"' in overview and "mirrored queries are being dropped" in overview

    first.traffic.set_sessions(hostgroup=100, count=4, prepared_fraction=1.0)
    first.traffic.set_sessions(hostgroup=101, count=8, prepared_fraction=1.0)
    poll(rounds=2)
    panel = html(viewer_client, reverse("monitoring:proxysql_mirror", args=[node.pk]))
    assert 'data-mirror="prepared"' in panel and "mirroring skips prepared statements" in panel


def test_backend_page_shows_the_polled_wsrep_state(adopted_lab, live_redis, viewer_client):
    _, servers = poll(rounds=1)
    server = servers[0]
    page = html(viewer_client, server.get_absolute_url())
    assert 'data-state="ok"' in page and "Synced" in page and "Primary" in page
    for chart in ("wsrep_state", "recv_queue", "flow_control"):
        assert f'data-url="/monitoring/servers/{server.pk}/charts/{chart}.json"' in page
    fragment = html(viewer_client, reverse("monitoring:server_live", args=[server.pk]))
    assert "<html" not in fragment and "wsrep_local_state" in fragment


def test_charts_of_a_polled_node_have_points(adopted_lab, live_redis, viewer_client):
    nodes, servers = poll(rounds=3, pause=0.2)
    data = viewer_client.get(reverse("monitoring:proxysql_chart", args=[nodes[0].pk, "connections"])).json()
    assert data["resolution"] == 0 and len(data["t"]) == 3
    labels = [s["label"] for s in data["series"]]
    assert labels == [
        "used · hg 100 (writer)",
        "free · hg 100 (writer)",
        "used · hg 101 (reader)",
        "free · hg 101 (reader)",
        "used · hg 102 (backup writer)",
        "free · hg 102 (backup writer)",
    ]
    used = data["series"][labels.index("used · hg 100 (writer)")]["values"]
    assert used == [4, 4, 4]
    state = viewer_client.get(reverse("monitoring:server_chart", args=[servers[0].pk, "wsrep_state"])).json()
    polled = BackendSample.objects.filter(server=servers[0]).order_by("ts")
    assert state["series"][0]["values"] == [s.local_state if s.reachable else None for s in polled]
    assert state["y"]["ticks"]["4"] == "Synced"
