"""Operations on one of two clusters behind one ProxySQL pair (the Galera lab in hostgroups 100-102, the DR
lab's dc1 in 200-202): only that cluster's rows change, the other's are checked untouched, and the two
clusters' operations on the shared nodes are serialised."""

import pytest

from apps.audit.actor import Actor
from apps.clients.proxysql import ProxySQLAdmin
from apps.fleet.models import Server
from apps.operations import drain, locks, services, shared, switchover
from apps.operations.choices import OperationState
from apps.operations.models import EndpointLock
from apps.plans.vocabulary import VERIFY

from .conftest import confirmed, finish, runtime, servers

pytestmark = pytest.mark.django_db


def rows_of(double, low, high):
    """The double's whole runtime rows in hostgroups [low, high)."""
    return [tuple(r) for r in servers(double) if low <= int(r[0]) < high]


def test_a_switchover_on_one_cluster_leaves_the_other_clusters_rows_identical(adopted_shared, operator_user):
    lab, dc1, doubles = adopted_shared
    before = {d.port: rows_of(d, 200, 300) for d in doubles}
    plan = switchover.plan_switchover(lab, Server.objects.get(port=3312), lower_autoinc=True, drain_timeout_ms=2000)
    guard = next(g for g in plan.guards if g.key == shared.GUARD_KEY)
    assert guard.passed and guard.value == "proxysql-1: dc1's 6 row(s) untouched; proxysql-2: dc1's 6 row(s) untouched"
    verify = next(s for s in plan.steps if s.kind == VERIFY)
    assert {v["clusters"][0] for v in verify.params["others"].values()} == {"dc1"}
    op = finish(confirmed(plan, operator_user))
    assert op.state == OperationState.DONE, op.error
    for double in doubles:
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
        assert rows_of(double, 200, 300) == before[double.port]
    assert not EndpointLock.objects.exists()


def test_a_drain_on_the_other_cluster_leaves_the_first_clusters_rows_identical(adopted_shared, operator_user):
    lab, dc1, doubles = adopted_shared
    before = {d.port: rows_of(d, 100, 200) for d in doubles}
    plan = drain.plan_drain(Server.objects.get(port=3333))
    assert next(g for g in plan.guards if g.key == shared.GUARD_KEY).value.startswith(
        "proxysql-1: galera-lab's 6 row(s)"
    )
    op = finish(confirmed(plan, operator_user))
    assert op.state == OperationState.DONE, op.error
    for double in doubles:
        assert ("127.0.0.1", 3333, "OFFLINE_SOFT") in runtime(double, 201)
        assert rows_of(double, 100, 200) == before[double.port]


def test_the_other_clusters_plan_waits_for_the_shared_nodes(adopted_shared, operator_user):
    lab, dc1, doubles = adopted_shared
    first = confirmed(switchover.plan_switchover(lab, Server.objects.get(port=3312)), operator_user)  # holds its locks
    plan = drain.plan_drain(Server.objects.get(port=3333))
    guard = next(g for g in plan.guards if g.key == "no_other_operation")
    assert not guard.passed and any(
        f"ProxySQL 127.0.0.1:{d.port} (shared with another cluster) is busy: "
        f"#{first.pk} Switchover galera-lab" in guard.value
        for d in doubles
    )
    other = services.save_plan(plan, actor=Actor.command(operator_user))
    with pytest.raises(locks.LockHeld, match="shared with another cluster"):
        locks.acquire(other, ttl_s=60)
    assert not other.cluster.operations.exclude(pk=other.pk).exists() and EndpointLock.objects.count() == 2
    locks.release(first)
    locks.acquire(other, ttl_s=60)  # free again once the first operation let go
    assert set(EndpointLock.objects.values_list("operation", flat=True)) == {other.pk}


def test_verify_sees_a_change_to_the_other_clusters_rows(adopted_shared):
    lab, dc1, (first, second) = adopted_shared
    plan = drain.plan_drain(Server.objects.get(port=3312))
    node_ids = list(next(s for s in plan.steps if s.kind == VERIFY).params["others"])
    admins = {}

    def admin(node_id):
        from apps.fleet.models import ProxySQLNode

        if node_id not in admins:
            admins[node_id] = ProxySQLAdmin.for_node(ProxySQLNode.objects.get(pk=int(node_id)))
        return admins[node_id]

    before = shared.snapshot(admin, plan)
    assert sorted(before) == sorted(node_ids) and all(len(rows) == 6 for rows in before.values())
    from lab import demo

    demo.admin_sql(
        first.port,
        "UPDATE mysql_servers SET weight=3 WHERE hostgroup_id=202 AND port=3333",
        "LOAD MYSQL SERVERS TO RUNTIME",
        user=first.user,
        password=first.password,
    )
    others = next(s for s in plan.steps if s.kind == VERIFY).params["others"]
    problems = shared.differences(before, admin, others)
    for a in admins.values():
        a.close()
    assert len(problems) == 1 and "proxysql-1: dc1's row hg 202 127.0.0.1 3333 changed" in problems[0]


def test_failover_and_read_pool_rules_on_one_cluster_leave_the_other_clusters_rows_identical(
    adopted_shared, operator_user
):
    from apps.operations import rules

    lab, dc1, doubles = adopted_shared
    before = {d.port: rows_of(d, 200, 300) for d in doubles}
    new = Server.objects.get(port=3312)
    plan = rules.plan_failover(lab, Server.objects.get(port=3311), new.pk, {"test": "the planner, as a rule runs it"})
    assert next(g for g in plan.guards if g.key == shared.GUARD_KEY).passed
    op = finish(confirmed(plan, operator_user))
    assert op.state == OperationState.DONE, op.error
    reader = Server.objects.get(port=3313)
    plan = rules.plan_changes(lab, {(reader.pk, 101): ("OFFLINE_SOFT", "test")}, figures={}, alerts=[])
    op = finish(confirmed(plan, operator_user))
    assert op.state == OperationState.DONE, op.error
    for double in doubles:
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
        assert ("127.0.0.1", 3313, "OFFLINE_SOFT") in runtime(double, 101)
        assert rows_of(double, 200, 300) == before[double.port]
