"""Issue 9 item 2: a rollback a ProxySQL node did not take stays visibly pending, per node, and is retried
until the node takes it; while it is pending manual operations are refused, failover still runs, and a
later change of the cluster supersedes it (the node is repaired from the inventory instead of replaying
statements that would undo that change). In-process: the second double refuses the rollback's
statements (LAB FAIL_STATEMENTS) or hangs; the fault tests pause a double under real Celery workers."""

import pytest
from django.test import Client

from lab import demo
from django.urls import reverse
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration.drift import cluster_drift
from apps.fleet.models import HostgroupMembership, Server
from apps.operations import drain, rollbacks, rules, services, switchover
from apps.operations.choices import OperationState, PendingState
from apps.operations.models import Operation, PendingRollback

from .conftest import fail_statements, run_plan, runtime, servers, variable

pytestmark = pytest.mark.django_db
AUTOINC = "mysql-auto_increment_delay_multiplex"


def pending_switchover(cluster, doubles, user):
    """A switchover whose drain times out (sessions pinned by user variables) while the second node refuses
    every REPLACE: its rollback stays pending there."""
    first, second = doubles
    for double in doubles:
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="user_variable")
    fail_statements(second, "REPLACE INTO mysql_servers")
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True, drain_timeout_ms=300)
    return run_plan(plan, user)


def due_now():
    PendingRollback.objects.update(next_try_at=timezone.now())


def test_rollback_a_node_did_not_take_is_pending_with_its_statements_then_retried(
    adopted_lab, operator_user, live_redis
):
    cluster, (first, second) = adopted_lab
    before = servers(first)
    op = pending_switchover(cluster, (first, second), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING and "ROLLBACK PENDING on proxysql-2" in op.error
    assert runtime(first, 100) == [("127.0.0.1", 3311, "ONLINE")] and variable(first, AUTOINC) == "5"
    assert runtime(second, 100) == [("127.0.0.1", 3311, "OFFLINE_SOFT")] and variable(second, AUTOINC) == "0"
    pending = PendingRollback.objects.get()
    assert pending.node.name == "proxysql-2" and pending.state == PendingState.PENDING
    sql = [s["sql"] for s in pending.statements]  # in order: the drain's undo, then the variable's
    assert sql[0].startswith("REPLACE INTO mysql_servers") and "3311,0,'ONLINE'" in sql[0]
    assert sql[1:] == [
        "LOAD MYSQL SERVERS TO RUNTIME",
        f"UPDATE global_variables SET variable_value='5' WHERE variable_name='{AUTOINC}'",
        "LOAD MYSQL VARIABLES TO RUNTIME",
    ]
    assert AuditEvent.objects.get(action="switchover rollback_pending").details["rollback_pending"]

    due_now()
    rollbacks.retry_due()  # still refused: a try, audited with the node's error, and a backoff
    pending.refresh_from_db()
    assert pending.attempts == 1 and "refused by the lab" in pending.last_error and len(pending.statements) == 4
    assert (pending.next_try_at - pending.last_try_at).total_seconds() == pytest.approx(1, abs=0.1)
    failed = AuditEvent.objects.get(action="rollback retry")
    assert failed.outcome == "failure" and "refused by the lab" in failed.details["error"]

    fail_statements(second, None)
    due_now()
    rollbacks.retry_due()
    pending.refresh_from_db()
    assert pending.state == PendingState.DONE and pending.statements == [] and len(pending.ran) == 4
    assert Operation.objects.get(pk=op.pk).state == OperationState.ROLLED_BACK
    assert servers(second) == servers(first) == before and variable(second, AUTOINC) == "5"
    assert AuditEvent.objects.filter(action="rollback retry", outcome="success").count() == 1
    assert AuditEvent.objects.filter(action="switchover rolled_back").exists()


def test_backoff_doubles_and_is_capped(adopted_lab, operator_user, live_redis):
    cluster, doubles = adopted_lab
    pending_switchover(cluster, doubles, operator_user)
    row = PendingRollback.objects.get()
    gaps = []
    for _ in range(7):
        due_now()
        rollbacks.retry_due()
        row.refresh_from_db()
        gaps.append(round((row.next_try_at - row.last_try_at).total_seconds()))
    assert gaps == [1, 2, 4, 8, 16, 30, 30] and AuditEvent.objects.filter(action="rollback retry").count() == 7


def test_manual_operations_are_refused_while_a_rollback_is_pending(
    adopted_lab, operator_user, admin_user_role, live_redis
):
    cluster, doubles = adopted_lab
    op = pending_switchover(cluster, doubles, operator_user)
    for plan in (
        switchover.plan_switchover(cluster, Server.objects.get(port=3313)),
        drain.plan_drain(Server.objects.get(port=3313)),
        drain.plan_restore(Server.objects.get(port=3313)),
    ):
        guard = next(g for g in plan.guards if g.key == "no_pending_rollback")
        assert not guard.passed and not guard.overridable and guard.label.startswith("No rollback is pending")
        assert guard.value == (
            f"operation #{op.pk} ({op.title}): rollback pending on proxysql-2: 4 statement(s) of "
            "the rollback not taken yet"
        )
    refused = services.save_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3313)), actor=Actor.command(admin_user_role)
    )
    with pytest.raises(services.NotAllowed, match="No rollback is pending"):
        services.confirm(refused, actor=Actor.command(admin_user_role), override_reason="I know", enqueue=False)
    # The read-pool rules wait too (applying them would supersede the rollback); the refusal is audited.
    plan = rules.plan_changes(cluster, {(Server.objects.get(port=3313).pk, 101): ("OFFLINE_SOFT", "test")}, {}, [])
    assert "no_pending_rollback" in [g.key for g in plan.failed_guards]
    assert rules._execute(cluster, plan, rules.RULE) is None


def test_failover_still_runs_and_supersedes_the_pending_rollback(adopted_lab, operator_user, live_redis):
    """The danger: the writer moved while proxysql-2 could not take its rollback. Replaying that rollback would
    put the old writer back ONLINE on proxysql-2 only; the node is repaired from the inventory instead."""
    cluster, (first, second) = adopted_lab
    op = pending_switchover(cluster, (first, second), operator_user)
    fail_statements(second, None)
    second.set_mode("hang")  # paused: failover goes on without it
    failover = rules._execute(
        cluster,
        rules.plan_failover(
            cluster, Server.objects.get(port=3311), Server.objects.get(port=3312).pk, {"down_polls": 2}
        ),
        rules.FAILOVER_RULE,
    )
    assert Operation.objects.get(pk=failover).state == OperationState.DONE
    assert runtime(first, 100) == [("127.0.0.1", 3312, "ONLINE")]
    second.set_mode("normal")
    due_now()
    outcomes = rollbacks.retry_due()
    assert "repaired from the inventory" in outcomes[0], outcomes
    row = PendingRollback.objects.get()
    assert row.state == PendingState.REPAIRED and row.superseded_by_id == failover
    # proxysql-2 follows the failover (the inventory), not the old rollback: one writer, the same as proxysql-1.
    assert runtime(second, 100) == [("127.0.0.1", 3312, "ONLINE")] and variable(second, AUTOINC) == "5"
    assert servers(second) == servers(first)
    assert cluster_drift(cluster).in_sync
    superseded = AuditEvent.objects.get(action="rollback superseded")
    assert superseded.details["superseded_by"] == failover and superseded.details["statements_not_replayed"]
    assert AuditEvent.objects.filter(action="rollback resolved by repair").exists()
    op.refresh_from_db()
    assert op.state == OperationState.ROLLED_BACK and "repaired from the inventory" in op.error
    repair = Operation.objects.get(kind="repair")
    assert repair.state == OperationState.DONE and repair.actor == rollbacks.RETRY_RULE


def test_repair_resolves_a_pending_rollback(adopted_lab, operator_user, live_redis):
    from apps.operations import repair

    cluster, (first, second) = adopted_lab
    op = pending_switchover(cluster, (first, second), operator_user)
    fail_statements(second, None)
    fixed = run_plan(repair.plan_repair(cluster, [second_node(cluster).pk]), operator_user)
    assert fixed.state == OperationState.DONE, fixed.error
    assert PendingRollback.objects.get().state == PendingState.REPAIRED
    assert Operation.objects.get(pk=op.pk).state == OperationState.ROLLED_BACK
    assert servers(second) == servers(first) and variable(second, AUTOINC) == "5"


def second_node(cluster):
    return cluster.proxysql_nodes.get(name="proxysql-2")


def test_run_now_button_and_banners(adopted_lab, operator_user, viewer_user, live_redis):
    cluster, (first, second) = adopted_lab
    operator_client, viewer_client = Client(), Client()
    operator_client.force_login(operator_user)
    viewer_client.force_login(viewer_user)
    op = pending_switchover(cluster, (first, second), operator_user)
    for url in (
        cluster.get_absolute_url(),
        reverse("pages:overview"),
        reverse("operations:pending_rollbacks") + f"?cluster={cluster.pk}",
    ):
        html = viewer_client.get(url).content.decode()
        assert 'id="pending-rollbacks"' in html and f"Operation #{op.pk}" in html and "proxysql-2" in html
        assert "REPLACE INTO mysql_servers" in html and "LOAD MYSQL VARIABLES TO RUNTIME" in html
        assert "Rollback pending on 1 ProxySQL node" in html
        assert "rollback pending on proxysql-2: 4 statement(s) of the rollback not taken yet" in html
        assert "finish pending" not in html.lower()
    page = operator_client.get(op.get_absolute_url()).content.decode()
    assert "Run the pending rollback now" in page and "Rollback per node" in page and "rollback pending" in page
    assert "finish pending" not in page.lower() and "Finish" not in page
    assert "Run the pending rollback now" not in viewer_client.get(op.get_absolute_url()).content.decode()
    assert viewer_client.post(reverse("operations:rollback_now", args=[op.pk])).status_code == 403
    fail_statements(second, None)
    operator_client.post(reverse("operations:rollback_now", args=[op.pk]))  # now, whatever the backoff says
    assert Operation.objects.get(pk=op.pk).state == OperationState.ROLLED_BACK
    event = AuditEvent.objects.get(action="rollback retry")
    assert event.actor == "otto-operator" and event.outcome == "success"
    assert 'id="pending-rollbacks"' not in viewer_client.get(cluster.get_absolute_url()).content.decode()
    assert HostgroupMembership.objects.get(hostgroup_id=100).server.port == 3311


def test_a_later_operation_left_finish_pending_supersedes_an_older_pending_rollback(
    adopted_lab, operator_user, live_redis
):
    """Failover runs while a rollback is pending. If it moved the writer but left a node to finish, it changed the
    cluster all the same: replaying the older rollback on that node would put the old writer back there only."""
    cluster, doubles = adopted_lab
    op = pending_switchover(cluster, doubles, operator_user)
    row = PendingRollback.objects.get(operation=op)
    later = Operation.objects.create(
        cluster=cluster,
        kind="failover",
        state=OperationState.FINISH_PENDING,
        point_of_no_return=True,
        title="failover 3311 -> 3312",
        actor=rules.FAILOVER_RULE,
        plan={},
        finished_at=timezone.now(),
    )
    assert rollbacks.superseding(row) == later


def test_a_node_that_misses_the_steps_after_the_point_of_no_return_finishes_them_when_it_answers(
    adopted_lab, operator_user, live_redis
):
    """Found on the real pair: proxysql-2 paused while the switchover restored the auto-increment delay, after
    the SAVE (the point of no return). The operation ended failed, the inventory kept the old writer while
    both nodes had the new one, proxysql-2 kept the delay at 0, nothing retried, and every later switchover
    was refused. The steps past the point of no return go on without it (the inventory records the new
    writer), and what it did not take is kept for it and retried like a pending rollback."""
    cluster, (first, second) = adopted_lab
    # applied, then the node stops answering (its answer held), as the real node paused by SIGSTOP did
    demo.admin_sql(
        second.port,
        'LAB FAIL_STATEMENTS {"text": "SET variable_value=\'5\'", "pause": true}',
        user=second.user,
        password=second.password,
    )
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == OperationState.FINISH_PENDING and "FINISH PENDING on proxysql-2" in op.error, op.error
    assert op.get_state_display() == "finish pending: done on the other nodes"
    assert AuditEvent.objects.get(action="switchover finish_pending").details["finish_pending"]
    assert switchover.current_writer(cluster).server.port == 3312  # the inventory says what the nodes do
    second.set_mode("normal")  # it answers again: the UPDATE was applied in memory, not loaded
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    assert variable(first, AUTOINC) == "5" and variable(second, AUTOINC) == "0"
    row = PendingRollback.objects.get(operation=op)
    assert row.node.name == "proxysql-2" and [s["sql"] for s in row.statements] == [
        f"UPDATE global_variables SET variable_value='5' WHERE variable_name='{AUTOINC}'",
        "LOAD MYSQL VARIABLES TO RUNTIME",
    ]
    assert not cluster_drift(cluster).nodes[1].in_sync
    client = Client()
    client.force_login(operator_user)
    said = "finish pending on proxysql-2: 2 statement(s) past the point of no return not taken yet"
    for url in (
        cluster.get_absolute_url(),
        reverse("pages:overview"),
        reverse("operations:pending_rollbacks") + f"?cluster={cluster.pk}",
    ):
        html = client.get(url).content.decode()
        assert "Finish pending on 1 ProxySQL node" in html and said in html and f"Operation #{op.pk}" in html
        assert "rollback pending" not in html.lower()
    page = client.get(op.get_absolute_url()).content.decode()
    assert "finish pending: done on the other nodes" in page and "Finish per node" in page and said in page
    assert "Finish on the node now" in page
    assert "rollback pending" not in page.lower() and "Rollback per node" not in page
    assert "Run the pending rollback now" not in page
    guard = next(
        g
        for g in switchover.plan_switchover(cluster, Server.objects.get(port=3311)).guards
        if g.key == "no_pending_rollback"
    )
    assert not guard.passed and guard.label.startswith("No finish is pending on this cluster")
    assert guard.value == (
        f"operation #{op.pk} ({op.title}): finish pending on proxysql-2: 2 statement(s) past the "
        "point of no return not taken yet"
    )

    due_now()
    assert rollbacks.retry_due() == ["proxysql-2: 2 statement(s) ran; the operation is finished there"]
    op.refresh_from_db()
    assert op.state == OperationState.DONE and "finished on every node" in op.error
    assert variable(second, AUTOINC) == "5" and cluster_drift(cluster).in_sync
    assert AuditEvent.objects.filter(action="switchover done").exists()
    assert AuditEvent.objects.get(action="finish retry").outcome == "success"
    assert not AuditEvent.objects.filter(action__startswith="rollback").exists()
    later = run_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3311), lower_autoinc=True), operator_user
    )
    assert later.state == OperationState.DONE, later.error


def test_a_node_that_refuses_a_step_after_the_point_of_no_return_fails_the_operation_with_the_inventory_recorded(
    adopted_lab, operator_user, live_redis
):
    """A refusal is an answer: it is not retried (it would be refused again). The operation ends failed with the
    node's error for the operator to repair it, but the inventory still records the writer both nodes now have."""
    cluster, (first, second) = adopted_lab
    fail_statements(second, f"SET variable_value='5' WHERE variable_name='{AUTOINC}'")
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == OperationState.FAILED and "refused by the lab" in op.error and op.point_of_no_return
    assert not PendingRollback.objects.exists()
    assert switchover.current_writer(cluster).server.port == 3312
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    drift = cluster_drift(cluster)
    assert drift.nodes[0].in_sync and not drift.nodes[1].differences and drift.nodes[1].variables  # only the delay
