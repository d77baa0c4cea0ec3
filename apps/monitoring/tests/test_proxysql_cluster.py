"""ProxySQL Cluster (native sync) as the polls read it and the cluster page shows it: two ProxySQL doubles in a
ProxySQL Cluster with sync on at ProxySQL's defaults (adopted_cluster_lab), or with sync off (adopted_lab)."""

import time

import pytest
from django.urls import reverse

from apps.fleet.models import ProxySQLNode
from apps.monitoring import live, pollers, proxysql_cluster, selectors
from lab import demo
from lab.capture_cluster_2146 import galera_row

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
    assert "admin-cluster_username" not in docs[nodes[0].pk].variables  # cluster settings kept apart
    time.sleep(1.0)  # a new second: the LOAD below gets an epoch of its own
    sql(
        first, "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313", "LOAD MYSQL SERVERS TO RUNTIME"
    )
    loaded_at = time.time()
    wait_until(
        lambda: sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == [("7",)]
    )
    time.sleep(1.1)  # the puller's own row in its stats shows the change at its next check
    nodes, docs = poll()
    a, b = (docs[n.pk].proxysql_cluster for n in nodes)
    assert a["checksums"]["mysql_servers"][1:] == b["checksums"]["mysql_servers"][1:]
    assert (
        b["checksums"]["mysql_servers"][1] == int(loaded_at) or b["checksums"]["mysql_servers"][1] == int(loaded_at) - 1
    )
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
    sql(
        first,
        "UPDATE mysql_servers SET weight=111 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    sql(
        second,
        "UPDATE mysql_servers SET weight=222 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    time.sleep(8.0)  # diff_check past 3 + 3 on both nodes
    nodes, docs = poll()
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    panel = page[page.index('id="proxysql-cluster"') : page.index("Hostgroups at runtime")]
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
    sql(
        second,
        "UPDATE mysql_servers SET weight=9 WHERE hostgroup_id=101 AND port=3313",
        "SAVE MYSQL SERVERS TO DISK",
        "SAVE ADMIN VARIABLES TO DISK",
        "SAVE PROXYSQL SERVERS TO DISK",
    )
    first.restart()
    second.restart()  # both from their own disks: version 1, different checksums
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    servers = next(m for m in view["modules"] if m["name"] == "mysql_servers")
    assert not servers["converged"] and [r["version"] for r in servers["rows"]] == [1, 1]
    assert any(
        "no node can be a sync source until a LOAD ... TO RUNTIME on one node: LOAD MYSQL SERVERS TO RUNTIME" in action
        for _, action in servers["traps"]
    )
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
    panel = page[page.index('id="proxysql-cluster"') : page.index("Hostgroups at runtime")]
    assert 'data-sync="on"' not in panel and 'data-sync="off"' in panel


def test_checksums_are_read_only_while_the_node_is_in_a_cluster(adopted_lab, live_redis, settings):
    cluster, (first, second) = adopted_lab
    settings.MONITOR_VARIABLES_INTERVAL_S = 0  # the cluster settings read at every poll
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
    time.sleep(1.0)  # a new second: the LOAD below gets an epoch of its own
    sql(
        first, "UPDATE mysql_servers SET weight=8 WHERE hostgroup_id=101 AND port=3313", "LOAD MYSQL SERVERS TO RUNTIME"
    )
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert not view["disagree"] and [m["name"] for m in view["not_synced_yet"]] == ["mysql_servers", "mysql_servers_v2"]
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    panel = page[page.index('id="proxysql-cluster"') : page.index("Hostgroups at runtime")]
    assert 'data-cluster="disagree"' not in panel and "nodes disagree" not in panel
    assert 'data-cluster="not-synced-yet"' in panel and "Peer has not synced yet: mysql_servers" in panel
    wait_until(
        lambda: sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == [("8",)]
    )
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert not view["disagree"] and not view["not_synced_yet"]


# What ProxySQL 2.6+ does with the mysql_servers module (lab/reference/README.md, "sysown/proxysql #2146 on two real
# 2.7.1 nodes"): the pull is decided on mysql_servers_v2 (mysql_servers plus every hostgroup table) and fetches all of
# them under every sync algorithm; its diff_check climbs only when two nodes LOAD different hostgroup state in the same
# second, and a later LOAD on one node clears it.
SAME_SECOND_V2 = (
    "within the same second: the same epoch with different mysql_servers_v2 checksums, so neither pulls "
    "and they never converge"
)
ONE_NODE_ONLY = (
    "LOAD MYSQL SERVERS TO RUNTIME on one node only, the one whose servers and hostgroup tables are intended"
)


def test_hostgroup_tables_loaded_in_one_second_on_2_7_are_shown_growing_on_mysql_servers_v2(
    adopted_cluster_lab, live_redis, viewer_client
):
    """Different galera hostgroup rows LOADed on both 2.7 nodes within one second (the capture's step 6):
    mysql_servers stays equal, mysql_servers_v2 shares an epoch with different checksums and its diff_check climbs on
    both nodes. The panel says the nodes disagree on mysql_servers_v2, names the same-second conflict and the LOAD on
    one node only that clears it; after that LOAD the other node holds its galera row and nothing grows."""
    cluster, (first, second) = adopted_cluster_lab
    time.sleep(1.0)
    while time.time() % 1 > 0.6:
        time.sleep(0.05)
    sql(first, galera_row("first", writer=200), "LOAD MYSQL SERVERS TO RUNTIME")
    sql(second, galera_row("second", writer=210), "LOAD MYSQL SERVERS TO RUNTIME")
    time.sleep(8.0)  # diff_check past 3 + 3 on both nodes
    nodes, docs = poll()
    a, b = (docs[n.pk].proxysql_cluster for n in nodes)
    assert a["checksums"]["mysql_servers"][1:] == b["checksums"]["mysql_servers"][1:]
    assert a["checksums"]["mysql_servers_v2"][1] == b["checksums"]["mysql_servers_v2"][1]
    assert a["checksums"]["mysql_servers_v2"][2] != b["checksums"]["mysql_servers_v2"][2]
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert [m["name"] for m in view["disagree"]] == ["mysql_servers_v2"]
    assert sorted((g["node"].name, g["module"]) for g in view["growing"]) == [
        ("proxysql-1", "mysql_servers_v2"),
        ("proxysql-2", "mysql_servers_v2"),
    ]
    assert all(SAME_SECOND_V2 in g["what"] and g["action"].startswith(ONE_NODE_ONLY) for g in view["growing"])
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    panel = page[page.index('id="proxysql-cluster"') : page.index("Hostgroups at runtime")]
    assert 'data-cluster="disagree"' in panel and "Nodes disagree on mysql_servers_v2." in panel
    assert panel.count('data-module="mysql_servers_v2"') == 2 and panel.count('data-growing="mysql_servers_v2"') == 2
    assert SAME_SECOND_V2 in panel and ONE_NODE_ONLY in panel and "#2146" not in panel
    sql(first, "LOAD MYSQL SERVERS TO RUNTIME")  # a later second, one node: the other pulls all of it
    wait_until(lambda: sql(second, "SELECT writer_hostgroup FROM runtime_mysql_galera_hostgroups") == [("200",)])
    time.sleep(1.1)  # the next check reads equal checksums: diff_check 0
    nodes, docs = poll()
    view = proxysql_cluster.cluster_view(nodes, docs)
    assert not view["disagree"] and not view["growing"]


def _part(version_2_6, algorithm=None, peer_epoch=1795926900, diff=9):
    """One node's "proxysql_cluster" part as a poll of a 2.5 node (no mysql_servers_v2 row in runtime_checksums_values)
    or of a 2.6+ node writes it: itself 127.0.0.1:6032 and a peer 127.0.0.1:6042 whose mysql_servers differs with
    another epoch and whose diff_check has climbed to `diff`."""
    own = {"mysql_servers": [3, 1795926890, "0x00000000000000AA"]}
    peer = {"mysql_servers": [4, peer_epoch, "0x00000000000000BB"]}
    if version_2_6:
        own["mysql_servers_v2"] = [3, 1795926890, "0x00000000000000CC"]
        peer["mysql_servers_v2"] = [4, peer_epoch, "0x00000000000000CC"]
    seen = []
    for port, values, d in ((6032, own, 0), (6042, peer, diff)):
        for name, (ver, epoch, csum) in values.items():
            seen.append(
                ["127.0.0.1", port, name, ver, epoch, csum, epoch + 1, epoch + 30, d if name == "mysql_servers" else 0]
            )
    settings = {
        "admin-cluster_username": "cluster",
        "admin-cluster_mysql_servers_diffs_before_sync": "3",
        "admin-cluster_mysql_servers_save_to_disk": "true",
    }
    if algorithm is not None:
        settings["admin-cluster_mysql_servers_sync_algorithm"] = str(algorithm)
    return {
        **proxysql_cluster.settings_part(settings, [("127.0.0.1", 6032), ("127.0.0.1", 6042)]),
        "checksums": own,
        "seen": seen,
    }


def test_the_2146_words_stay_for_a_node_before_2_6():
    """On 2.5 (no mysql_servers_v2) the mysql_servers pull is the old one: a growing mysql_servers diff_check is
    sysown/proxysql #2146."""
    part = _part(version_2_6=False)
    [(peer, module, diff, ver, epoch)] = proxysql_cluster.growing(part, "127.0.0.1", 6032)
    assert (peer, module, diff) == ("127.0.0.1:6042", "mysql_servers", 9)
    for version in ("2.5.5-10-g195bd70", None):  # read by the poll, or not read yet: no mysql_servers_v2 row
        what, action = proxysql_cluster.why_growing(part, module, ver, epoch, version)
        assert "sysown/proxysql #2146" in what and "galera, replication, group-replication and aurora" in what
        assert "mysql_galera/replication/group_replication_hostgroups the same on every node" in action


def test_a_2_6_node_is_never_told_2146():
    """On 2.6+ the pull is decided on mysql_servers_v2 and brings every hostgroup table under every algorithm: a
    growing mysql_servers diff_check with another epoch is a runtime-only difference that algorithm 2 or 3 never
    pulls, else a peer that does not pull at all; never #2146 nor "set the sync algorithm"."""
    for version in ("2.7.1-0-g2726c27", "2.6.6", None):
        for algorithm, words in (
            (2, "runtime-only difference"),
            (3, "runtime-only difference"),
            (1, "does not pull it"),
        ):
            what, action = proxysql_cluster.why_growing(_part(True, algorithm), "mysql_servers", 4, 1795926900, version)
            assert "#2146" not in what + action and "or on 2.7 set" not in action
            assert words in what, (version, algorithm, what)


def test_why_growing_explains_mysql_servers_v2():
    """mysql_servers_v2 is part of the mysql_servers module (its LOAD is LOAD MYSQL SERVERS TO RUNTIME): a growing
    diff_check on it is explained, on 2.6+ by the same-second conflict when the epochs are equal."""
    part = _part(True, 1)
    what, action = proxysql_cluster.why_growing(part, "mysql_servers_v2", 4, 1795926890, "2.7.1")
    assert SAME_SECOND_V2 in what and action.startswith(ONE_NODE_ONLY)
    what, action = proxysql_cluster.why_growing(part, "mysql_servers_v2", 4, 1795926900, "2.7.1")
    assert "#2146" not in what and "LOAD MYSQL SERVERS TO RUNTIME" in action
