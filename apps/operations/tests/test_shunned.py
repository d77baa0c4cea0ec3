"""Operations on a cluster where one ProxySQL node shunned a backend by itself (issue 9, item 1), on real
SHUNNED rows: a Galera node killed while one double carries client reads to it (conftest.shun_backend).
SHUNNED is ProxySQL's runtime verdict: no guard reads it as an unloaded edit, verify reads the configured
status, and no statement the product sends ever writes it (double.statements() is what the node received)."""

import pytest

from apps.audit.actor import Actor
from apps.configuration import drift
from apps.fleet.models import Cluster, Server
from apps.monitoring import pollers
from apps.operations import drain, executor, rules, services, switchover
from apps.operations.choices import OperationState
from apps.plans.vocabulary import Plan
from conftest import shun_backend
from lab import demo

from .conftest import runtime, wait_for

pytestmark = pytest.mark.django_db


def server(port):
    return Server.objects.get(port=port)


def run(plan, user):
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    op = services.save_plan(plan, actor=Actor.command(user))
    services.confirm(op, actor=Actor.command(user), enqueue=False)
    executor.run(op.pk)
    op.refresh_from_db()
    return op


def plan_statements(plan):
    """Every statement of a plan, forward and rollback, for every node (the drain's OFFLINE_HARD way too)."""
    out = []
    for step in plan.steps:
        parts = [step.nodes, step.params.get("offline_hard") or {}]
        for part in parts:
            for spec in part.values():
                out += spec.get("sql", []) + spec.get("rollback", [])
    return out


def writes_of_shunned(statements):
    """Statements that would write SHUNNED into a ProxySQL node's configuration."""
    return [s for s in statements if "SHUNNED" in s.upper() and not s.lstrip().upper().startswith(("SELECT", "SHOW"))]


def memory_status(double, hg, port):
    return demo.admin_sql(
        double.port,
        f"SELECT status FROM mysql_servers WHERE hostgroup_id={hg} AND port={port}",
        user=double.user,
        password=double.password,
    )[0][0]


def test_switchover_is_not_refused_by_shunned_rows_and_leaves_the_nodes_consistent(
    adopted_lab, operator_user, galera_healthy
):
    """The real run's failure: after a backend restart one node kept SHUNNED at runtime while its memory said
    ONLINE, and every switchover was refused as 'unloaded mysql_servers edits'."""
    cluster, (first, second) = adopted_lab
    for double in (first, second):
        double.traffic.clear_sessions()
    # the old writer 3311, killed and restarted while proxysql-1's clients used it as writer and reader
    shunned = shun_backend(first, galera_healthy, 1, hostgroups=(100, 101))
    assert runtime(first, 100) == [("127.0.0.1", 3311, "SHUNNED")] and runtime(second, 100)[0][2] == "ONLINE"
    assert memory_status(first, 100, 3311) == memory_status(first, 101, 3311) == "ONLINE"

    plan = switchover.plan_switchover(cluster, server(3312))
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    assert plan.facts["shunned"] == {"proxysql-1": ["hg 100 127.0.0.1:3311", "hg 101 127.0.0.1:3311"]}
    assert writes_of_shunned(plan_statements(plan)) == []
    # automatic failover's plan, built on the same runtime, writes back configured rows too
    failover = rules.plan_failover(cluster, server(3311), server(3312).pk, {"down_polls": 2})
    assert writes_of_shunned(plan_statements(failover)) == []

    op = run(plan, operator_user)
    assert op.state == OperationState.DONE, op.error
    assert op.steps.get(key="verify").detail["problems"] == []
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
        assert writes_of_shunned(double.statements()) == []
    # The drain and the role swap changed the old writer's rows: their LOAD reset ProxySQL's verdict.
    assert runtime(first, 101) == runtime(second, 101) and {r[2] for r in runtime(first, 101)} == {"ONLINE"}
    assert memory_status(first, 101, 3311) == "ONLINE"
    # both nodes hold the same configuration, the inventory's
    state = drift.cluster_drift(cluster)
    assert state.between_nodes == [] and [n.differences for n in state.nodes] == [[], []]
    assert [n.runtime_states for n in state.nodes] == [[], []]
    assert shunned == {(100, "127.0.0.1", 3311), (101, "127.0.0.1", 3311)}


def test_drain_rollback_read_pool_rule_and_every_plan_write_configured_rows(
    adopted_lab, operator_user, galera_healthy, live_redis
):
    """Node 3 stays down; proxysql-1 has shunned it in the reader hostgroup its clients use."""
    cluster, (first, second) = adopted_lab
    for double in (first, second):
        double.traffic.clear_sessions()
    shun_backend(first, galera_healthy, 3, hostgroups=(101,), restart=False)
    reader = server(3313)

    # Every plan built now, forward and rollback, writes configured rows only.
    plans = [
        drain.plan_drain(reader),
        drain.plan_restore(reader),
        switchover.plan_switchover(cluster, reader),
        switchover.plan_switchover(cluster, server(3312)),
    ]
    for plan in plans:
        assert writes_of_shunned(plan_statements(plan)) == [], plan.title

    # A drain of the shunned server that cannot finish (a connection still held on proxysql-2) rolls back
    # by writing the rows as they were configured: ONLINE, never ProxySQL's SHUNNED.
    second.traffic.set_server(101, "127.0.0.1", 3313, conn_used=1)
    op = run(drain.plan_drain(reader, drain_timeout_ms=300), operator_user)
    assert op.state == OperationState.ROLLED_BACK and "drain timed out" in op.error
    second.traffic.set_server(101, "127.0.0.1", 3313, conn_used=None)
    for double in (first, second):
        assert writes_of_shunned(double.statements()) == []
        assert memory_status(double, 101, 3313) == "ONLINE"
        assert ("127.0.0.1", 3313, "ONLINE") in runtime(double, 101)  # the LOAD changed the row: verdict reset

    # Clients need 3313 again on proxysql-1: shunned again. The read-pool rule takes the dead node out;
    # its undo writes the configured row.
    first.traffic.set_sessions(hostgroup=101, count=4, kind="read")
    assert wait_for(lambda: ("127.0.0.1", 3313, "SHUNNED") in runtime(first, 101), 5)
    first.traffic.clear_sessions(hostgroup=101)
    Cluster.objects.filter(pk=cluster.pk).update(
        read_pool_rules_enabled=True, rules_dry_run=False, min_available_readers=1
    )
    cluster = Cluster.objects.get(pk=cluster.pk)
    servers = list(Server.objects.filter(cluster=cluster).select_related("cluster"))
    pollers.backend_round(servers)
    op_pk = rules.apply_read_pool(cluster, rules.read_polls([s.pk for s in servers]))
    op = cluster.operations.get(pk=op_pk)
    assert op.state == OperationState.DONE, op.error
    assert op.steps.get(key="verify").detail["problems"] == []
    assert writes_of_shunned(plan_statements(Plan.from_json(op.plan))) == []
    for double in (first, second):
        assert ("127.0.0.1", 3313, "OFFLINE_SOFT") in runtime(double, 101)
        assert writes_of_shunned(double.statements()) == []
