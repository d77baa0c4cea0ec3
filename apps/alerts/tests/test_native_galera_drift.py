"""A natively managed Galera cluster (issue 33 §4): ProxySQL's mysql_galera_hostgroups with Monitor active, over the
real Galera lab, on the double (lab/proxysql_double/galera_monitor.py) and on real ProxySQL 2.7.1. Monitor moves
the servers between the writer, backup writer, reader and offline hostgroups at runtime (lab/reference/native-galera/);
memory and disk keep the rows as configured. Adopted through the product, such a node is said natively managed, and
no consumer of the drift engine (the engine the pages and API read, the watcher's stored results, the alert rules
drift and restart_drift, the overview, a change set's unloaded-edits check, repair) reads Monitor's placement as drift, also after Monitor moved the writer; a real drift (a
weight edited in memory only, then loaded) is still reported. The product's switchover goes through Monitor
(apps/operations/tests/test_switchover_native_galera.py)."""

import time
from contextlib import closing

import pytest

from apps.configuration import nodes as N
from apps.configuration.drift import cluster_drift, stored, watch
from apps.configuration.findings import node_findings
from apps.configuration import services
from apps.configuration.models import ChangeSet
from apps.configuration.services import latest
from apps.audit.actor import Actor
from apps.operations import executor
from apps.operations import services as operations
from apps.configuration.change_set import plan_change_set
from apps.operations.models import Operation
from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring.overview import fleet_overview
from apps.operations.repair import plan_repair
from apps.operations.switchover import plan_switchover
from lab import demo

from conftest import adopt_double
from .conftest import open_alerts, set_rule, tick

pytestmark = pytest.mark.django_db

# All three backends in the writer hostgroup, Monitor deciding: one writer, the others backup writers, everyone a
# reader (writer_is_also_reader 1). As an operator following ProxySQL's documentation writes it.
NATIVE = [
    "DELETE FROM mysql_servers",
    "DELETE FROM mysql_galera_hostgroups",
    *[
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections) "
        f"VALUES (100,'127.0.0.1',{port},{weight},2000)"
        for port, weight in ((3311, 1000), (3312, 900), (3313, 800))
    ],
    "INSERT INTO mysql_galera_hostgroups (writer_hostgroup,backup_writer_hostgroup,reader_hostgroup,"
    "offline_hostgroup,active,max_writers,writer_is_also_reader,max_transactions_behind) "
    "VALUES (100,102,101,9101,1,1,1,100)",
    "LOAD MYSQL SERVERS TO RUNTIME",
    "SAVE MYSQL SERVERS TO DISK",
]


def admin(node, *statements):
    return demo.admin_sql(node.port, *statements, user=node.user, password=node.password)


def wait_placed(node, writer_port, seconds=20):
    """Until Monitor has placed the servers with writer_port the one ONLINE writer (its healthcheck: every 5 s on
    a real node). Returns the runtime rows."""
    deadline = time.monotonic() + seconds
    while True:
        rows = admin(node, "SELECT hostgroup_id, port, status FROM runtime_mysql_servers ORDER BY hostgroup_id, port")
        rows = [(int(hg), int(port), status) for hg, port, status in rows]
        if [r for r in rows if r[0] == 100 and r[2] == "ONLINE"] == [(100, writer_port, "ONLINE")] and any(
            r[0] == 102 for r in rows
        ):
            return rows
        assert time.monotonic() < deadline, f"Monitor did not place the servers within {seconds} s: {rows}"
        time.sleep(0.2)


def findings(cluster):
    return [f.words for n in cluster_drift(cluster).nodes for f in n.findings]


def unloaded_edits(cluster):
    """What a change set of mysql_servers finds of unloaded edits on the nodes (its effect check)."""
    reads = N.read_cluster(cluster, layers=("memory", "runtime"))
    return [
        f.value for f in node_findings(latest(cluster).content, reads, {"mysql_servers"}) if f.key == "unloaded_edits"
    ]


def no_drift_anywhere(cluster):
    """Every consumer of the drift engine says in sync: the engine, the watcher's stored results, the alert rules,
    the overview;
    a change set finds no unloaded edits and repair nothing to do."""
    assert findings(cluster) == [] and cluster_drift(cluster).in_sync
    assert unloaded_edits(cluster) == []
    facts = plan_repair(cluster).facts["nodes"]
    assert facts and all(n["nothing_to_do"] and n["changes"] == [] for n in facts.values()), facts
    watch()
    tick(["proxysql"])
    results = stored(ProxySQLNode.objects.filter(cluster=cluster).values_list("pk", flat=True))
    assert results and all(r.findings == [] and r.runtime == [] for r in results.values()), results
    left = open_alerts("drift") + open_alerts("restart_drift")
    assert not left, [(a.rule, a.state, a.held, a.summary, a.details) for a in left]  # what differed, when it fails
    assert [a for a in fleet_overview()["attention"] if a["what"] == "drift"] == []


def apply_weight(cluster, user, hostgroup, port, weight):
    """A change set of one server's weight, planned, confirmed and run to the end through the executor."""
    return apply_edits(cluster, user, f"weight {weight} for {port}", [weight_edit(cluster, hostgroup, port, weight)])


def weight_edit(cluster, hostgroup, port, weight):
    row = next(
        r for r in latest(cluster).content["mysql_servers"] if r["hostgroup_id"] == hostgroup and r["port"] == port
    )
    return {
        "op": "upsert",
        "table": "mysql_servers",
        "key": [hostgroup, "127.0.0.1", port],
        "row": {**row, "weight": weight},
    }


def apply_edits(cluster, user, reason, edits):
    """A change set of these edits, planned, confirmed and run to the end through the executor."""
    cs = services.start_change_set(cluster, actor=Actor.command(user), reason=reason)
    for edit in edits:
        services.add_edit(cs, edit, actor=Actor.command(user))
    plan, collector = plan_change_set(cs)
    collector.save()
    op = operations.save_plan(plan, actor=Actor.command(user))
    ChangeSet.objects.filter(pk=cs.pk).update(state=ChangeSet.State.PLANNED, operation=op)
    operations.confirm(op, actor=Actor.command(user), enqueue=False)
    executor.run(op.pk)
    op = Operation.objects.get(pk=op.pk)
    assert op.state == "done", op.error
    return op


def check_natively_managed(nodes, galera, user):
    """Two ProxySQL nodes, each with its own Monitor (their healthchecks are not in step), over one Galera cluster."""
    for node in nodes:
        admin(node, *demo.plain_layout_statements(), *NATIVE)
    for n, node in enumerate(nodes, 1):
        # Monitor's, not the operator's. It places in steps: once (real 2.7.1, a loaded machine) the writer was alone
        # ONLINE in 100 before its reader row was in 101, so the whole placement is waited for (Monitor's checks: 5 s).
        deadline = time.monotonic() + 15
        placed = wait_placed(node, 3311)
        while not {(101, 3311, "ONLINE"), (100, 3312, "SHUNNED")} <= set(placed) and time.monotonic() < deadline:
            time.sleep(0.2)
            placed = wait_placed(node, 3311)
        assert (101, 3311, "ONLINE") in placed and (100, 3312, "SHUNNED") in placed, placed
        adopt_double(node, "native-lab", f"n{n}")
    cluster = ProxySQLNode.objects.get(admin_port=nodes[0].port).cluster
    assert cluster.native_manager == "galera" and cluster.proxysql_nodes.count() == 2
    set_rule("drift", for_s=0)
    set_rule("restart_drift", for_s=0)
    no_drift_anywhere(cluster)

    # this product's switchover goes through Monitor (by the weights: operations/native_galera_switchover.py)
    plan = plan_switchover(cluster, Server.objects.get(port=3312))
    assert plan.guards_passed and "through ProxySQL's Galera manager" in plan.title, plan.failed_guards

    # Monitor moves the writer (node 1 read_only): still Monitor's placement, not drift
    with closing(galera.root_connection(1)) as conn:
        conn.cursor().execute("SET GLOBAL read_only=ON")
    try:
        for node in nodes:
            wait_placed(node, 3312)
        no_drift_anywhere(cluster)
    finally:
        with closing(galera.root_connection(1)) as conn:
            conn.cursor().execute("SET GLOBAL read_only=OFF")
    for node in nodes:
        wait_placed(node, 3311)

    # a change set on the manager's hostgroup (a weight), applied to both nodes, verified, recorded: no drift after
    apply_weight(cluster, user, 100, 3313, 700)
    for node in nodes:
        wait_placed(node, 3311)
        assert admin(node, "SELECT DISTINCT weight FROM runtime_mysql_servers WHERE port=3313") == (("700",),)
    no_drift_anywhere(cluster)

    # a real drift on the first node: a weight edited in memory only, then loaded
    node = nodes[0]
    admin(node, "UPDATE mysql_servers SET weight=5 WHERE hostgroup_id=100 AND port=3312")
    said = findings(cluster)
    assert any("unloaded edit" in w and "3312 weight 5" in w for w in said), said
    assert unloaded_edits(cluster) and "127.0.0.1', 3312" in unloaded_edits(cluster)[0]
    admin(node, "LOAD MYSQL SERVERS TO RUNTIME")
    wait_placed(node, 3311)
    said = findings(cluster)
    assert any("n1 runs hg 100 127.0.0.1:3312 weight 5 instead of 900" in w for w in said), said
    assert [(d["key"], d["field"]) for d in cluster_drift(cluster).between_nodes] == [
        ((100, "127.0.0.1", 3312), "weight")
    ]
    tick(["proxysql"])
    assert open_alerts("drift")
    drift = [a["detail"] for a in fleet_overview()["attention"] if a["what"] == "drift"]
    assert sorted(drift) == [
        "hg 100 127.0.0.1:3312 weight (n1: 5, n2: 900)",
        "hg 100 127.0.0.1:3312 weight: intended 900, runtime 5",
    ], drift


def test_a_natively_managed_double_pair_reports_no_drift_after_monitor_moved_servers(
    proxysql_double_factory, galera_healthy, live_redis, operator_user
):
    check_natively_managed(proxysql_double_factory(2), galera_healthy, operator_user)


def test_a_natively_managed_real_pair_reports_no_drift_after_monitor_moved_servers(
    real_proxysql_factory, galera_healthy, live_redis, operator_user
):
    check_natively_managed(
        [real_proxysql_factory("2.7.1", name=f"native-{n}") for n in (1, 2)], galera_healthy, operator_user
    )
