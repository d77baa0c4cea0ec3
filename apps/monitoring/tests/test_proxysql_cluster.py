"""ProxySQL Cluster (native sync) as the polls read it and the cluster page shows it: two ProxySQL doubles in a
ProxySQL Cluster with sync on at ProxySQL's defaults (adopted_cluster_lab), or with sync off (adopted_lab)."""
import time

import pytest
from django.urls import reverse

from apps.fleet.models import ProxySQLNode
from apps.monitoring import live, pollers, proxysql_cluster, selectors
from lab import demo

pytestmark = pytest.mark.django_db


def poll():
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    pollers.proxysql_round(nodes)
    return nodes, live.read_typed(live.PROXYSQL, [n.pk for n in nodes], selectors.NodeDoc)  # as the cluster page


def sql(double, *statements):
    rows = demo.admin_sql(double.port, *statements, user=double.user, password=double.password)
    return [tuple(r) for r in rows or ()]


def wait_until(predicate, timeout=6.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_poll_reads_each_nodes_sync_and_the_peer_it_synced_from(adopted_cluster_lab, live_redis):
    cluster, (first, second) = adopted_cluster_lab
    nodes, docs = poll()
    part = docs[nodes[0].pk].proxysql_cluster
    assert part["user"] and sorted(p for _, p in part["peers"]) == sorted([first.port, second.port])
    assert part["modules"]["mysql_servers"] == [3, True] and proxysql_cluster.sync_on(part, "mysql_servers")
    assert "admin-cluster_username" not in docs[nodes[0].pk].variables   # cluster settings kept apart
    time.sleep(1.0)   # a new second: the LOAD below gets an epoch of its own
    sql(first, "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313", "LOAD MYSQL SERVERS TO RUNTIME")
    loaded_at = time.time()
    wait_until(lambda: sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313")
               == [("7",)])
    time.sleep(1.1)   # the puller's own row in its stats shows the change at its next check
    nodes, docs = poll()
    a, b = (docs[n.pk].proxysql_cluster for n in nodes)
    assert a["checksums"]["mysql_servers"][1:] == b["checksums"]["mysql_servers"][1:]
    assert b["checksums"]["mysql_servers"][1] == int(loaded_at) or b["checksums"]["mysql_servers"][1] == int(loaded_at) - 1
    source, when = proxysql_cluster.synced_from(b, nodes[1].admin_host, nodes[1].admin_port, "mysql_servers")
    assert source == f"127.0.0.1:{first.port}" and loaded_at + 1 <= when <= loaded_at + 5
    assert proxysql_cluster.synced_from(a, nodes[0].admin_host, nodes[0].admin_port, "mysql_servers") is None
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert not view["disagree"] and not view["growing"]
    servers = next(m for m in view["modules"] if m["name"] == "mysql_servers")
    assert servers["sync_on"] == ["proxysql-1", "proxysql-2"] and servers["converged"] and not servers["traps"]


def test_cluster_page_shows_sync_per_module_and_the_same_epoch_trap(adopted_cluster_lab, live_redis, viewer_client):
    cluster, (first, second) = adopted_cluster_lab
    time.sleep(1.0)
    while time.time() % 1 > 0.6:
        time.sleep(0.05)
    sql(first, "UPDATE mysql_servers SET weight=111 WHERE hostgroup_id=101 AND port=3313", "LOAD MYSQL SERVERS TO RUNTIME")
    sql(second, "UPDATE mysql_servers SET weight=222 WHERE hostgroup_id=101 AND port=3313", "LOAD MYSQL SERVERS TO RUNTIME")
    time.sleep(8.0)   # diff_check past 3 + 3 on both nodes
    nodes, docs = poll()
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    panel = page[page.index('id="proxysql-cluster"'):page.index("Hostgroups at runtime")]
    assert 'data-cluster="disagree"' in panel and "Nodes disagree on mysql_servers" in panel
    assert panel.count('data-module="mysql_servers"') == 2 and panel.count('data-sync="on"') >= 12
    assert "the same epoch, different checksums" in panel
    assert "LOAD MYSQL SERVERS TO RUNTIME again on the node whose configuration is right" in panel
    assert panel.count('data-growing="mysql_servers"') == 2 and "neither pulls and they never converge" in panel
    fragment = viewer_client.get(reverse("monitoring:cluster_live", args=[cluster.pk])).content.decode()
    assert 'id="proxysql-cluster"' in fragment


def test_version_1_on_every_node_is_named_with_the_load_that_clears_it(adopted_cluster_lab, live_redis, viewer_client):
    cluster, (first, second) = adopted_cluster_lab
    sql(first, "SAVE MYSQL SERVERS TO DISK", "SAVE ADMIN VARIABLES TO DISK", "SAVE PROXYSQL SERVERS TO DISK")
    sql(second, "UPDATE mysql_servers SET weight=9 WHERE hostgroup_id=101 AND port=3313", "SAVE MYSQL SERVERS TO DISK",
        "SAVE ADMIN VARIABLES TO DISK", "SAVE PROXYSQL SERVERS TO DISK")
    first.restart()
    second.restart()   # both from their own disks: version 1, different checksums
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    servers = next(m for m in view["modules"] if m["name"] == "mysql_servers")
    assert not servers["converged"] and [r["version"] for r in servers["rows"]] == [1, 1]
    assert any("no node can be a sync source until a LOAD ... TO RUNTIME on one node: LOAD MYSQL SERVERS TO RUNTIME"
               in action for _, action in servers["traps"])
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    assert "no node can be a sync source until a LOAD ... TO RUNTIME on one node" in page


def test_without_sync_the_panel_says_off(adopted_lab, live_redis, viewer_client):
    """The plain lab pair lists each other in proxysql_servers with cluster credentials, but every module's
    diffs_before_sync is 0: the product writes every node itself."""
    cluster, _ = adopted_lab
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert view and all(not m["sync_on"] for m in view["modules"])
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    panel = page[page.index('id="proxysql-cluster"'):page.index("Hostgroups at runtime")]
    assert 'data-sync="on"' not in panel and 'data-sync="off"' in panel


def test_checksums_are_read_only_while_the_node_is_in_a_cluster(adopted_lab, live_redis, settings):
    cluster, (first, second) = adopted_lab
    settings.MONITOR_VARIABLES_INTERVAL_S = 0   # the cluster settings read at every poll
    first.clear_statements()
    poll()
    assert any("FROM runtime_checksums_values" in s for s in first.statements())
    assert any("FROM stats_proxysql_servers_checksums" in s for s in first.statements())
    for double in (first, second):
        sql(double, "DELETE FROM proxysql_servers", "LOAD PROXYSQL SERVERS TO RUNTIME")
        double.clear_statements()
    nodes, docs = poll()
    assert not any("checksums" in s for s in first.statements())
    assert proxysql_cluster.cluster_view(nodes, docs) is None


def test_a_change_its_peer_has_not_pulled_yet_is_not_a_difference(adopted_cluster_lab, live_redis, viewer_client):
    """Issue 24: within diffs_before_sync checks of a LOAD, a peer that syncs the module has not pulled it yet: the
    panel says so instead of "nodes disagree"; once pulled, every node holds the same checksum."""
    cluster, (first, second) = adopted_cluster_lab
    time.sleep(1.0)   # a new second: the LOAD below gets an epoch of its own
    sql(first, "UPDATE mysql_servers SET weight=8 WHERE hostgroup_id=101 AND port=3313", "LOAD MYSQL SERVERS TO RUNTIME")
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert not view["disagree"] and [m["name"] for m in view["not_synced_yet"]] == ["mysql_servers"]
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    panel = page[page.index('id="proxysql-cluster"'):page.index("Hostgroups at runtime")]
    assert 'data-cluster="disagree"' not in panel and "nodes disagree" not in panel
    assert 'data-cluster="not-synced-yet"' in panel and "Peer has not synced yet: mysql_servers" in panel
    wait_until(lambda: sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313")
               == [("8",)])
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert not view["disagree"] and not view["not_synced_yet"]
