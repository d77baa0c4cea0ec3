"""One ProxySQL pair fronting two Galera clusters (the Galera lab in hostgroups 100-102, the DR lab's dc1 in
200-202; conftest.adopted_shared): each ProxySQL is polled once per round, whatever the number of clusters
it serves, and each cluster's node row gets the result scoped to its hostgroups."""

import time

import pytest

from apps.monitoring.status import polled_layer
from apps.fleet.models import ProxySQLNode
from apps.monitoring import chunks, live, pollers
from apps.monitoring.models import PoolSnapshot, ProxySQLSample

pytestmark = pytest.mark.django_db

POOL_READ = "SELECT * FROM stats_mysql_connection_pool"


def test_rows_of_one_endpoint_always_fall_in_the_same_shard(adopted_shared):
    rows = ProxySQLNode.objects.count()
    for shards in (1, 2, 3, 4, 7):
        seen = {}
        for shard in range(shards):
            for node in pollers.proxysql_nodes_for_shard(shard, shards):
                seen.setdefault(node.endpoint, set()).add(shard)
        assert sum(1 for _ in seen) == 2 and all(len(s) == 1 for s in seen.values()), (shards, seen)
        assert sum(len(pollers.proxysql_nodes_for_shard(s, shards)) for s in range(shards)) == rows


def test_a_shared_proxysql_is_polled_once_per_round_and_each_cluster_gets_its_hostgroups(adopted_shared, live_redis):
    lab, dc1, (first, second) = adopted_shared
    nodes = pollers.proxysql_nodes_for_shard(0, 1)
    assert len(nodes) == 4  # two ProxySQL, two clusters each
    first.clear_statements()
    summary = pollers.proxysql_round(nodes, now=time.time())
    assert summary["polled"] == 4 and summary["failed"] == 0
    assert first.statements().count(POOL_READ) == 1  # not once per cluster served
    assert sum(1 for s in first.statements() if "stats_mysql_global" in s) == 1
    time.sleep(0.3)
    pollers.proxysql_round(pollers.proxysql_nodes_for_shard(0, 1), now=time.time())
    assert first.statements().count(POOL_READ) == 2

    by_cluster = {}
    for node in ProxySQLNode.objects.select_related("cluster"):
        doc = live.read_one(live.PROXYSQL, node.pk)
        assert doc["ok"]
        by_cluster.setdefault(node.cluster.name, []).append(doc)
    for doc in by_cluster["galera-lab"]:
        assert {r["key"][0] for r in doc["pool"]} == {100, 101, 102}
        assert {r["hostgroup_id"] for r in doc["runtime_servers"]} == {100, 101, 102}
        assert {r["hostgroup_id"] for r in polled_layer(doc, "memory") + polled_layer(doc, "disk")} == {100, 101, 102}
        assert doc["figures"]["conn_used"] == sum(r["conn_used"] for r in doc["pool"]) > 0  # the demo's traffic
        assert doc["shared_with"] == ["dc1"]
    for doc in by_cluster["dc1"]:
        assert {r["key"][0] for r in doc["pool"]} == {200, 201, 202}
        assert {r["hostgroup_id"] for r in doc["runtime_servers"]} == {200, 201, 202}
        assert {r["hostgroup_id"] for r in polled_layer(doc, "memory") + polled_layer(doc, "disk")} == {200, 201, 202}
        assert doc["figures"]["conn_used"] == sum(r["conn_used"] for r in doc["pool"])  # none of the lab's
        assert doc["shared_with"] == ["galera-lab"]
    # The node-wide figures are the same reading for both clusters.
    lab_doc, dc1_doc = by_cluster["galera-lab"][0], by_cluster["dc1"][0]
    assert lab_doc["figures"]["questions_ps"] == dc1_doc["figures"]["questions_ps"]

    # History: one sample row per cluster's node row and poll; each pool server stored once, not per cluster.
    assert ProxySQLSample.objects.count() == 8
    assert PoolSnapshot.objects.count() == 8
    stored = list(chunks.read_pool({}, ["status"]))
    pool_rows = len(first.query(POOL_READ)[1]) + len(second.query(POOL_READ)[1])
    assert len(stored) == 2 * pool_rows


def test_the_pages_say_what_is_node_wide_and_scope_the_rest_to_the_cluster(adopted_shared, live_redis, viewer_client):
    from django.urls import reverse

    lab, dc1, (first, second) = adopted_shared
    pollers.proxysql_round(pollers.proxysql_nodes_for_shard(0, 1), now=time.time())
    node = dc1.proxysql_nodes.get(name="proxysql-1")
    pool_html = viewer_client.get(reverse("monitoring:proxysql_pool", args=[node.pk])).content.decode()
    assert 'data-node-wide="galera-lab"' in pool_html and "shared with cluster galera-lab" in pool_html
    assert "<dt>Questions/s*</dt>" in pool_html and "<dt>Backend used/free</dt>" in pool_html
    assert "127.0.0.1:3331" in pool_html and "127.0.0.1:3311" not in pool_html  # dc1's servers, not the lab's
    mirror_html = viewer_client.get(reverse("monitoring:proxysql_mirror", args=[node.pk])).content.decode()
    assert "Mirroring is node-wide" in mirror_html and "cluster galera-lab" in mirror_html
    runtime_html = viewer_client.get(reverse("pages:proxysql_node_runtime", args=[node.pk])).content.decode()
    assert "127.0.0.1:3331" in runtime_html and "127.0.0.1:3311" not in runtime_html
    assert 'data-other-rows="6"' in runtime_html  # the lab's rows in 100-102, left to its own page
    chart = viewer_client.get(reverse("monitoring:proxysql_chart", args=[node.pk, "queries"])).json()
    assert chart["shared_with"] == ["galera-lab"]
    assert "Questions/s (all) · node-wide" in [s["label"] for s in chart["series"]]
    assert all(s["label"].startswith("hg 20") for s in chart["series"][3:])
    mirror_chart = viewer_client.get(reverse("monitoring:proxysql_chart", args=[node.pk, "mirror_queue"])).json()
    assert mirror_chart["title"].endswith("· node-wide")
    # A ProxySQL that serves one cluster says nothing of the kind.
    only_lab = ProxySQLNode.objects.get(cluster=lab, name="proxysql-1")
    dc1.proxysql_nodes.all().delete()
    html = viewer_client.get(reverse("monitoring:proxysql_pool", args=[only_lab.pk])).content.decode()
    assert "data-node-wide" not in html and "<dt>Questions/s</dt>" in html


def test_proxysql_endpoints_spread_over_every_shard(adopted_shared):
    """A pair adopted for two clusters has rows 1, 2 (first cluster) and 3, 4 (second): by pk modulo shards its
    ProxySQLs would sit in shards 1 and 2 of four, and a fleet of such pairs would leave shards 0 and 3 idle."""
    shards = pollers.proxysql_shards(4)
    by_endpoint = {}
    for node in ProxySQLNode.objects.all():
        by_endpoint.setdefault(node.endpoint, set()).add(shards[node.pk][0])
    assert sorted(by_endpoint.values(), key=min) == [{0}, {1}], by_endpoint
    assert {rows for _, rows in shards.values()} == {2}
