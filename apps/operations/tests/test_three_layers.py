"""Issue 21: an operation ends with memory, runtime and disk equal to intent on every node it touched. Found on a
real ProxySQL 2.7.1 pair: a switchover whose second node paused at the save step rolled back runtime and memory,
but both disks kept the new writer (the first node had saved, the second saved its in-flight SAVE on resume), and
a restart of one node made it write to the other backend. A rollback past a SAVE saves again."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Server
from apps.operations import executor, repair, rollbacks, switchover
from apps.operations.choices import OperationState, PendingState, StepState
from apps.operations.models import Operation, PendingRollback
from lab import demo

from .conftest import confirmed, inventory_layout, run_plan, runtime, variable

pytestmark = pytest.mark.django_db
AUTOINC = "mysql-auto_increment_delay_multiplex"
TABLES = {"memory": "mysql_servers", "runtime": "runtime_mysql_servers", "disk": "disk.mysql_servers"}


def layers(double):
    """Each layer's mysql_servers rows of the cluster's hostgroups, shaped as inventory_layout's (the configured
    status: SHUNNED is ProxySQL's own verdict)."""
    out = {}
    for layer, table in TABLES.items():
        rows = demo.admin_sql(
            double.port,
            f"SELECT hostgroup_id, port, status, weight, max_connections, comment "
            f"FROM {table} WHERE hostgroup_id IN (100, 101, 102)",
            user=double.user,
            password=double.password,
        )
        out[layer] = sorted(
            (
                int(hg),
                int(port),
                "ONLINE" if status == "SHUNNED" else status,
                int(weight),
                int(max_connections),
                comment,
            )
            for hg, port, status, weight, max_connections, comment in rows
        )
    return out


def disk_variable(double, name):
    rows = demo.admin_sql(
        double.port,
        f"SELECT variable_value FROM disk.global_variables WHERE variable_name='{name}'",
        user=double.user,
        password=double.password,
    )
    return rows[0][0]


def pause_at(double, text):
    """The double applies the first statement containing `text`, then stops answering (its answer held): a
    ProxySQL paused with that statement in flight runs it when it resumes, so its effect is the same."""
    demo.admin_sql(
        double.port,
        'LAB FAIL_STATEMENTS {"text": "%s", "pause": true}' % text,
        user=double.user,
        password=double.password,
    )


def retry_now():
    PendingRollback.objects.update(next_try_at=timezone.now())
    return rollbacks.retry_due()


def test_a_switchover_rolled_back_past_its_save_leaves_every_layer_on_the_old_writer(
    adopted_lab, operator_user, live_redis
):
    cluster, (first, second) = adopted_lab
    intent = inventory_layout(cluster)
    pause_at(second, "SAVE MYSQL SERVERS TO DISK")
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING and "ROLLBACK PENDING on proxysql-2" in op.error, op.error
    # proxysql-1 took the SAVE, then its rollback: it saves again once memory is back.
    assert layers(first) == {"memory": intent, "runtime": intent, "disk": intent}
    row = PendingRollback.objects.get(operation=op)
    assert row.node.name == "proxysql-2" and row.statements[-1]["sql"] == "SAVE MYSQL SERVERS TO DISK"

    second.set_mode("normal")  # it resumes: its in-flight SAVE wrote the new writer to its disk
    assert layers(second)["disk"] != intent
    assert retry_now() == [f"proxysql-2: {len(row.statements)} statement(s) ran; its rollback is complete"]
    assert PendingRollback.objects.get(pk=row.pk).state == PendingState.DONE
    assert Operation.objects.get(pk=op.pk).state == OperationState.ROLLED_BACK
    assert switchover.current_writer(cluster).server.port == 3311
    for double in (first, second):
        assert layers(double) == {"memory": intent, "runtime": intent, "disk": intent}
        assert disk_variable(double, AUTOINC) == "5"
        double.restart()  # a restart loads disk
        assert layers(double) == {"memory": intent, "runtime": intent, "disk": intent}
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")] and variable(double, AUTOINC) == "5"


def test_a_worker_that_died_at_the_save_step_is_reaped_and_its_rollback_saves_again(adopted_lab, operator_user):
    cluster, doubles = adopted_lab
    intent = inventory_layout(cluster)
    op = confirmed(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user
    )
    # What the worker did before it died: every node's statements up to and including its SAVE.
    by_name = {f"proxysql-{i}": double for i, double in enumerate(doubles, 1)}
    steps = op.plan["steps"]
    save = next(i for i, step in enumerate(steps) if step["key"] == "save")
    for step in steps[: save + 1]:
        for spec in step["nodes"].values():
            double = by_name[spec["name"]]
            demo.admin_sql(double.port, *spec["sql"], user=double.user, password=double.password)
    assert all(layers(double)["disk"] != intent for double in doubles)
    Operation.objects.filter(pk=op.pk).update(
        state=OperationState.RUNNING, heartbeat_at=timezone.now() - timedelta(minutes=1)
    )
    op.steps.filter(index__lt=save).update(state=StepState.DONE)
    op.steps.filter(index=save).update(state=StepState.RUNNING)

    assert executor.reap_stale() == [op.pk]
    assert Operation.objects.get(pk=op.pk).state == OperationState.ROLLED_BACK
    for double in doubles:
        assert layers(double) == {"memory": intent, "runtime": intent, "disk": intent}
        double.restart()
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")] and variable(double, AUTOINC) == "5"


def test_a_repair_paused_mid_write_goes_forward_and_ends_with_every_layer_repaired(
    adopted_lab, operator_user, live_redis
):
    """A repair never rolls back to the drift it was asked to remove: the node that answered stays repaired, the
    paused one keeps the rest of its statements (finish pending) and takes them when it answers; then every layer
    equals the inventory on both, and a restart keeps it (bin/bench-faults rows repair/repair and repair/verify)."""
    from .test_repair import hand_edit

    cluster, (first, second) = adopted_lab
    intent = inventory_layout(cluster)
    for double in (first, second):
        hand_edit(double)
        demo.admin_sql(
            double.port,
            "DELETE FROM mysql_servers WHERE hostgroup_id=500",
            "LOAD MYSQL SERVERS TO RUNTIME",
            "SAVE MYSQL SERVERS TO DISK",
            user=double.user,
            password=double.password,
        )
    pause_at(second, "REPLACE INTO mysql_servers")
    op = run_plan(repair.plan_repair(cluster), operator_user)
    assert op.state == OperationState.FINISH_PENDING and "FINISH PENDING on proxysql-2" in op.error, op.error
    assert layers(first) == {"memory": intent, "runtime": intent, "disk": intent}  # repaired, not rolled back
    row = PendingRollback.objects.get(operation=op)
    assert row.node.name == "proxysql-2" and row.statements[-1]["sql"] == "SAVE MYSQL VARIABLES TO DISK"

    second.set_mode("normal")
    retry_now()
    assert Operation.objects.get(pk=op.pk).state == OperationState.DONE
    for double in (first, second):
        assert layers(double) == {"memory": intent, "runtime": intent, "disk": intent}
        double.restart()
        assert layers(double) == {"memory": intent, "runtime": intent, "disk": intent}
        assert variable(double, AUTOINC) == "5"


def test_a_node_that_stops_answering_at_a_verify_past_the_point_of_no_return_is_finished_later(
    adopted_lab, operator_user
):
    """Past the point of no return a verify that cannot read a node fails nothing: the node joins those whose
    statements wait for it (the save after it included), so the operation ends finish pending, not failed with
    its disk left behind (bench-faults row repair/verify). Before that point the same error rolls back."""

    cluster, (first, second) = adopted_lab
    hand_edit_weight = "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3312"
    demo.admin_sql(
        second.port, hand_edit_weight, "LOAD MYSQL SERVERS TO RUNTIME", user=second.user, password=second.password
    )
    op = confirmed(repair.plan_repair(cluster), operator_user)
    run = executor.Run(op)
    try:
        verify = next(s for s in run.plan.steps if s.key == "verify")
        second_pk = str(cluster.proxysql_nodes.get(name="proxysql-2").pk)
        second.set_mode("hang")
        with pytest.raises(executor.ClientError):  # before the point of no return: the error rolls back
            run.verify(verify, {})
        run.op.point_of_no_return = True
        run.admins.pop(int(second_pk)).close()
        run.verify(verify, detail := {})
        assert detail["problems"] == [] and run.unfinished[second_pk]["name"] == "proxysql-2"
        save = next(s for s in run.plan.steps if s.key == "save")
        run.run_past_no_return(save, [], {})
        assert run.unfinished[second_pk]["statements"] == [{"step": "save", "sql": "SAVE MYSQL SERVERS TO DISK"}]
    finally:
        second.set_mode("normal")
        run.close()
