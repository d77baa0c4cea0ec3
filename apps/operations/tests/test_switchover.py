"""Planned switchover against two ProxySQL doubles in front of the Galera lab, run by the executor."""
import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import HostgroupMembership, Server
from apps.operations import executor, services, switchover
from apps.operations.choices import OnDrainTimeout, OperationState
from apps.operations.models import ClusterLock

from .conftest import runtime, variable

pytestmark = pytest.mark.django_db


def server(port):
    return Server.objects.get(port=port)


def run_switchover(cluster, operator_user, to_port=3312, **options):
    plan = switchover.plan_switchover(cluster, server(to_port), **options)
    op = services.save_plan(plan, user=operator_user)
    services.confirm(op, user=operator_user, enqueue=False)
    executor.run(op.pk)
    op.refresh_from_db()
    return plan, op


def test_plan_shows_exact_sql_per_node_and_guards(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    plan = switchover.plan_switchover(cluster, server(3312))
    assert plan.guards_passed, [g for g in plan.failed_guards]
    drain = next(s for s in plan.steps if s.key == "drain")
    assert len(drain.nodes) == 2
    for spec in drain.nodes.values():
        assert spec["sql"] == ["UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=100 AND "
                               "hostname='127.0.0.1' AND port=3311", "LOAD MYSQL SERVERS TO RUNTIME"]
    # What holds the old writer, and why, is in the plan's facts before anything runs.
    assert plan.facts["pinned_total"] == 8 and plan.facts["nodes"]
    assert [g.key for g in plan.guards if g.key.startswith("new_writer")] == [
        "new_writer_synced", "new_writer_primary", "new_writer_ready", "new_writer_queue"]


def test_switchover_with_the_autoinc_way_through(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    plan, op = run_switchover(cluster, operator_user, lower_autoinc=True, drain_timeout_ms=2000)
    assert op.state == OperationState.DONE, op.error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
        assert ("127.0.0.1", 3311, "ONLINE") in runtime(double, 101)
        assert variable(double, "mysql-auto_increment_delay_multiplex") == "5"  # restored
        assert double.traffic.status()["counters"]["sessions_cut"] == 0
    assert HostgroupMembership.objects.get(hostgroup_id=100).server.port == 3312
    assert op.timings["wait_drain"] < 500 and op.timings["overhead_ms"] < 1000
    event = AuditEvent.objects.get(action="switchover done")
    assert event.details["timings"]["total_ms"] > 0 and event.details["steps"][0]["executed"]


def test_pinned_drain_times_out_and_rolls_back_without_cutting(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    plan, op = run_switchover(cluster, operator_user, drain_timeout_ms=400)
    assert op.state == OperationState.ROLLED_BACK and "drain timed out" in op.error and "no session was cut" in op.error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]
        assert double.traffic.status()["counters"]["sessions_cut"] == 0
    assert HostgroupMembership.objects.get(hostgroup_id=100).server.port == 3311
    assert not ClusterLock.objects.exists()


def test_offline_hard_on_timeout_cuts_the_sessions_it_announced(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    plan, op = run_switchover(cluster, operator_user, drain_timeout_ms=300, on_timeout=OnDrainTimeout.OFFLINE_HARD)
    assert plan.facts["sessions_cut_if_timeout"] == 8
    assert op.state == OperationState.DONE, op.error
    cut = sum(d.traffic.status()["counters"]["sessions_cut"] for d in (first, second))
    assert cut == 8
    wait = op.steps.get(key="wait_drain")
    assert wait.detail["offline_hard"]["sessions_cut"] == 8


def test_proxysql_node_lost_between_confirm_and_start_is_refused_at_start(adopted_lab, operator_user):
    # Issue 9 item 3: the start re-checks every guard (before, this ran and rolled back on the other node;
    # a node lost mid-way is in test_faults.py).
    cluster, (first, second) = adopted_lab
    plan = switchover.plan_switchover(cluster, server(3312), lower_autoinc=True)
    op = services.save_plan(plan, user=operator_user)
    services.confirm(op, user=operator_user, enqueue=False)
    second.stop()
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == OperationState.REFUSED and "proxysql-2" in op.error and "nothing was changed" in op.error
    assert runtime(first, 100) == [("127.0.0.1", 3311, "ONLINE")]
    assert variable(first, "mysql-auto_increment_delay_multiplex") == "5"
    assert not first.statements() or not any(s.startswith("UPDATE") for s in first.statements())


def test_unreachable_node_at_preflight_is_refused(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    second.stop()
    plan = switchover.plan_switchover(cluster, server(3312))
    assert not plan.guards_passed and "proxysql_reachable" in [g.key for g in plan.failed_guards]
    op = services.save_plan(plan, user=operator_user)
    with pytest.raises(services.NotAllowed, match="cannot be overridden"):
        services.confirm(op, user=operator_user, enqueue=False)
    assert AuditEvent.objects.filter(action="switchover refused").exists()


def test_two_switchovers_at_once_exactly_one_runs(adopted_lab, operator_user, admin_user_role):
    cluster, _ = adopted_lab
    one = services.save_plan(switchover.plan_switchover(cluster, server(3312)), user=operator_user)
    two = services.save_plan(switchover.plan_switchover(cluster, server(3313)), user=admin_user_role)
    services.confirm(one, user=operator_user, enqueue=False)
    with pytest.raises(services.NotAllowed, match="otto-operator"):
        services.confirm(two, user=admin_user_role, enqueue=False)


def test_failed_guard_needs_an_admin_and_a_reason(adopted_lab, operator_user, admin_user_role, galera_healthy):
    cluster, _ = adopted_lab
    galera_healthy.set_desync(2, True)  # B is Donor/Desynced: the Synced guard fails
    plan = switchover.plan_switchover(cluster, server(3312), lower_autoinc=True)
    assert "new_writer_synced" in [g.key for g in plan.failed_guards]
    op = services.save_plan(plan, user=operator_user)
    with pytest.raises(services.NotAllowed, match="Only an admin"):
        services.confirm(op, user=operator_user, enqueue=False)
    op = services.save_plan(plan, user=admin_user_role)
    services.confirm(op, user=admin_user_role, override_reason="desync is planned maintenance", enqueue=False)
    confirmed = AuditEvent.objects.get(action="switchover confirmed")
    assert confirmed.details["override_reason"] == "desync is planned maintenance"
    assert confirmed.details["overridden_guards"] == ["new_writer_synced"]
