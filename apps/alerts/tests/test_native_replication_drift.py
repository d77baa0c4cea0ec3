"""A natively managed async cluster (issue 33 §4): ProxySQL's mysql_replication_hostgroups with Monitor active, over
the real replication lab, on the double (lab/proxysql_double/replication_monitor.py) and on real ProxySQL 2.7.1.
Monitor moves the servers between the writer and reader hostgroups by each backend's read_only, at runtime
(lab/reference/native-replication/); memory and disk keep the rows as configured. Adopted through the product, such
a node is said natively managed (replication), and no consumer of the drift engine (the engine, the watcher's stored
results, the alert rules drift and restart_drift, the overview, a change set's unloaded-edits check, repair) reads
Monitor's placement as drift, also after a promotion moved the writer and back; a real drift is still reported. The
product's switchover is planned through the manager (read_only), not by moving rows."""

import time

import pytest

from apps.fleet.models import ProxySQLNode, Server
from apps.operations.switchover import plan_switchover
from lab import demo

from conftest import adopt_double
from .conftest import open_alerts, set_rule, tick
from .test_native_galera_drift import admin, apply_weight, findings, no_drift_anywhere, unloaded_edits

pytestmark = pytest.mark.django_db

PORTS = (3321, 3322, 3323)
# All three backends in the writer hostgroup, the seed's rules sending plain reads to the reader hostgroup 20 (empty
# as configured): Monitor moves the read_only replicas there. As an operator following ProxySQL's documentation.
NATIVE = [
    "DELETE FROM mysql_servers",
    "DELETE FROM mysql_replication_hostgroups",
    *[
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections) "
        f"VALUES (10,'127.0.0.1',{port},1000,2000)"
        for port in PORTS
    ],
    "INSERT INTO mysql_replication_hostgroups (writer_hostgroup,reader_hostgroup,check_type) "
    "VALUES (10,20,'read_only')",
    "LOAD MYSQL SERVERS TO RUNTIME",
    "SAVE MYSQL SERVERS TO DISK",
]


def wait_placed(node, writer_port, readers, seconds=20):
    """Until Monitor has placed writer_port alone in the writer hostgroup 10 and `readers` in 20 (its read_only check:
    every second on a real node). Returns the runtime rows."""
    deadline = time.monotonic() + seconds
    while True:
        rows = admin(node, "SELECT hostgroup_id, port, status FROM runtime_mysql_servers ORDER BY hostgroup_id, port")
        rows = [(int(hg), int(port), status) for hg, port, status in rows]
        if rows == [(10, writer_port, "ONLINE"), *[(20, p, "ONLINE") for p in readers]]:
            return rows
        assert time.monotonic() < deadline, f"Monitor did not place the servers within {seconds} s: {rows}"
        time.sleep(0.2)


def check_natively_managed(nodes, lab, user):
    """Two ProxySQL nodes, each with its own Monitor, over one primary and two replicas."""
    for node in nodes:
        admin(node, *demo.plain_layout_statements(PORTS, writer=10, reader=20), *NATIVE)
    for n, node in enumerate(nodes, 1):
        wait_placed(node, 3321, (3322, 3323))  # Monitor's, not the operator's: the replicas left hostgroup 10
        adopt_double(node, "native-async", f"n{n}")
    cluster = ProxySQLNode.objects.get(admin_port=nodes[0].port).cluster
    assert cluster.native_manager == "replication" and cluster.proxysql_nodes.count() == 2
    assert (cluster.writer_hostgroup, cluster.reader_hostgroup) == (10, 20)
    set_rule("drift", for_s=0)
    set_rule("restart_drift", for_s=0)
    no_drift_anywhere(cluster)

    # the product's switchover goes through the manager (read_only on the backends, Monitor placing the writer: run in
    # apps/operations/tests/test_switchover_native_replication.py), never moving the rows itself
    plan = plan_switchover(cluster, Server.objects.get(port=3322))
    assert "native_manager" not in [g.key for g in plan.failed_guards], plan.failed_guards
    assert "wait_monitor" in [s.key for s in plan.steps] and "move" not in [s.key for s in plan.steps]

    # a promotion of node 2 (GTID switchover, read_only flipped): Monitor's placement, not drift; then node 1 back,
    # which leaves node 1 in the reader hostgroup too (Monitor moves, never puts back)
    lab.promote(2)
    for node in nodes:
        wait_placed(node, 3322, PORTS)
    no_drift_anywhere(cluster)
    lab.promote(1)
    for node in nodes:
        wait_placed(node, 3321, PORTS)
    no_drift_anywhere(cluster)

    # a change set on the manager's hostgroup (a weight), applied to both nodes, verified, recorded: no drift after;
    # its LOAD keeps Monitor's placement (node 1 reading too), not the configured rows (configuration/native_load.py)
    apply_weight(cluster, user, 10, 3323, 700)
    for node in nodes:
        wait_placed(node, 3321, PORTS)
        assert admin(node, "SELECT DISTINCT weight FROM runtime_mysql_servers WHERE port=3323") == (("700",),)
    no_drift_anywhere(cluster)

    # a real drift on the first node: a weight edited in memory only, then loaded
    node = nodes[0]
    admin(node, "UPDATE mysql_servers SET weight=5 WHERE hostgroup_id=10 AND port=3322")
    said = findings(cluster)
    assert any("unloaded edit" in w and "3322 weight 5" in w for w in said), said
    assert unloaded_edits(cluster)
    admin(node, "LOAD MYSQL SERVERS TO RUNTIME")
    wait_placed(node, 3321, (3322, 3323))
    said = findings(cluster)
    assert any("n1 runs hg 10 127.0.0.1:3322 weight 5 instead of 1000" in w for w in said), said
    tick(["proxysql"])
    assert open_alerts("drift")


def test_a_natively_managed_async_double_pair_reports_no_drift_after_monitor_moved_servers(
    proxysql_double_factory, replication_healthy, live_redis, operator_user
):
    check_natively_managed(proxysql_double_factory(2), replication_healthy, operator_user)


def test_a_natively_managed_async_real_pair_reports_no_drift_after_monitor_moved_servers(
    real_proxysql_factory, replication_healthy, live_redis, operator_user
):
    check_natively_managed(
        [real_proxysql_factory("2.7.1", name=f"native-async-{n}") for n in (1, 2)], replication_healthy, operator_user
    )
