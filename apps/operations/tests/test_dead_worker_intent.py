"""Issue 39: a worker killed past the point of no return, in the step that records what the operation did, left the
configuration version naming a writer no node used (every node wrote to the new one) and the operation failed. The
reaper now finishes such an operation from its stored plan: it reads the nodes again through the plan's checks, then
records. The worker's death is reproduced as it leaves things: every step before the record step run on the nodes,
the record step running, the heartbeat stale."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import content as C
from apps.configuration import services as configuration
from apps.fleet.models import Server
from apps.operations import executor, repair, switchover
from apps.operations.choices import OperationState, StepState
from apps.operations.models import Operation
from lab import demo

from apps.audit.tests.faults import audit_outage  # noqa: F401 (a fixture)

from .conftest import confirmed, inventory_layout, runtime, wait_for

pytestmark = pytest.mark.django_db


def die_in(op, doubles, key):
    """What a worker killed in step `key` leaves: every earlier step's statements taken by the nodes (in plan
    order), those steps done, `key` running, the point of no return passed, no heartbeat for a minute."""
    by_name = {f"proxysql-{i}": double for i, double in enumerate(doubles, 1)}
    steps = op.plan["steps"]
    at = next(i for i, step in enumerate(steps) if step["key"] == key)
    for step in steps[:at]:
        for spec in step["nodes"].values():
            double = by_name[spec["name"]]
            demo.admin_sql(double.port, *spec["sql"], user=double.user, password=double.password)
    Operation.objects.filter(pk=op.pk).update(
        state=OperationState.RUNNING, point_of_no_return=True, heartbeat_at=timezone.now() - timedelta(minutes=1)
    )
    op.steps.filter(index__lt=at).update(state=StepState.DONE)
    op.steps.filter(index=at).update(state=StepState.RUNNING)


def node_writers(double):
    return runtime(double, 100)


def test_a_worker_killed_in_a_switchovers_record_step_is_finished_by_the_reaper(adopted_lab, operator_user, live_redis):
    cluster, doubles = adopted_lab
    op = confirmed(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user
    )
    die_in(op, doubles, "inventory")
    assert all(node_writers(d) == [("127.0.0.1", 3312, "ONLINE")] for d in doubles)
    assert C.writers(configuration.latest(cluster).content) == [("127.0.0.1", 3311)]  # the state

    assert executor.reap_stale() == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    latest = configuration.latest(cluster)
    assert C.writers(latest.content) == [("127.0.0.1", 3312)] and latest.operation_id == op.pk
    assert switchover.current_writer(cluster).server.port == 3312  # the inventory follows the version
    assert all(node_writers(d) == [("127.0.0.1", 3312, "ONLINE")] for d in doubles)
    done = AuditEvent.objects.get(action="switchover done", details__operation=op.pk)
    assert done.details["finished_by"] == "the reaper, after its worker stopped"
    # A second reaper pass (or a worker killed after the record committed) records nothing twice.
    Operation.objects.filter(pk=op.pk).update(
        state=OperationState.RUNNING, heartbeat_at=timezone.now() - timedelta(minutes=1)
    )
    assert executor.reap_stale() == [op.pk]
    assert configuration.latest(cluster).number == latest.number


def test_a_reaper_does_not_record_what_the_nodes_do_not_hold(adopted_lab, operator_user, live_redis):
    """The plan's checks are read again first: nodes put back by hand meanwhile are not recorded as switched."""
    cluster, doubles = adopted_lab
    op = confirmed(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user
    )
    die_in(op, doubles, "inventory")
    for double in doubles:  # someone moved the writer back by hand after the worker died
        demo.admin_sql(
            double.port,
            "UPDATE mysql_servers SET status='ONLINE' WHERE hostgroup_id=100",
            "DELETE FROM mysql_servers WHERE hostgroup_id=100 AND port=3312",
            "REPLACE INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'127.0.0.1',3311)",
            "LOAD MYSQL SERVERS TO RUNTIME",
            user=double.user,
            password=double.password,
        )
    assert executor.reap_stale() == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.FAILED and "finishing it failed" in op.error, op.error
    assert C.writers(configuration.latest(cluster).content) == [("127.0.0.1", 3311)]


def weight_change(cluster, user):
    """A change set (a reader's weight to 5) planned and confirmed: (operation, change set, version it is based on)."""
    from apps.configuration.models import ChangeSet
    from apps.configuration.change_set import plan_change_set

    v1 = configuration.latest(cluster)
    row = next(r for r in v1.content["mysql_servers"] if (r["hostgroup_id"], r["port"]) == (101, 3313))
    cs = configuration.start_change_set(cluster, actor=Actor.command(user), reason="lighter reader")
    configuration.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3313], "row": {**row, "weight": 5}},
        actor=Actor.command(user),
    )
    plan, collector = plan_change_set(cs)
    collector.save()
    op = confirmed(plan, user)
    ChangeSet.objects.filter(pk=cs.pk).update(state=ChangeSet.State.PLANNED, operation=op)
    return op, cs, v1


def test_a_change_set_finished_by_the_reaper_with_a_node_that_does_not_answer(adopted_lab, operator_user, live_redis):
    """The reaper's check of a node that does not answer keeps that node for later (finish pending) and records."""
    from .test_three_layers import retry_now

    cluster, (first, second) = adopted_lab
    op, cs, v1 = weight_change(cluster, operator_user)
    die_in(op, (first, second), "record")
    second.set_mode("hang")
    try:
        assert executor.reap_stale() == [op.pk]
        op.refresh_from_db()
        assert op.state == OperationState.FINISH_PENDING and "proxysql-2" in op.error, op.error
        assert configuration.latest(cluster).number == v1.number + 1
    finally:
        second.set_mode("normal")
    retry_now()
    assert Operation.objects.get(pk=op.pk).state == OperationState.DONE


def test_a_worker_killed_in_a_change_sets_record_step_is_finished_by_the_reaper(adopted_lab, operator_user, live_redis):
    from apps.configuration.models import ChangeSet

    cluster, doubles = adopted_lab
    op, cs, v1 = weight_change(cluster, operator_user)
    die_in(op, doubles, "record")
    weights = "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313"
    assert [demo.admin_sql(d.port, weights, user=d.user, password=d.password) for d in doubles] == [(("5",),)] * 2, [
        s["nodes"] for s in op.plan["steps"]
    ]
    assert configuration.latest(cluster).number == v1.number

    assert executor.reap_stale() == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    latest = configuration.latest(cluster)
    assert latest.number == v1.number + 1
    assert (
        next(r["weight"] for r in latest.content["mysql_servers"] if (r["hostgroup_id"], r["port"]) == (101, 3313)) == 5
    )
    assert ChangeSet.objects.get(pk=cs.pk).state == ChangeSet.State.APPLIED


def test_a_worker_killed_in_a_repairs_last_step_is_finished_by_the_reaper(adopted_lab, operator_user, live_redis):
    from .test_repair import hand_edit

    cluster, (first, second) = adopted_lab
    intent = inventory_layout(cluster)
    hand_edit(second)
    op = confirmed(repair.plan_repair(cluster), operator_user)
    die_in(op, (first, second), "inventory")
    assert executor.reap_stale() == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    assert inventory_layout(cluster) == intent
    assert all(node_writers(d) == [("127.0.0.1", 3311, "ONLINE")] for d in (first, second))


def test_the_database_failing_in_the_record_step_leaves_the_operation_to_the_reaper(
    adopted_lab, operator_user, live_redis, audit_outage
):
    """The console's database lost while a switchover records its new writer (past its save): the run does not end
    it failed with the record missing; the reaper finishes it once the database answers."""
    from apps.audit.tests.faults import answer

    cluster, doubles = adopted_lab
    for double in doubles:
        double.traffic.clear_sessions()
    op = confirmed(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user
    )
    audit_outage("configuration version recorded")
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == OperationState.RUNNING and op.point_of_no_return
    assert C.writers(configuration.latest(cluster).content) == [("127.0.0.1", 3311)]
    answer()
    assert executor.reap_stale(stale_after_s=0) == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    assert C.writers(configuration.latest(cluster).content) == [("127.0.0.1", 3312)]
    assert all(node_writers(d) == [("127.0.0.1", 3312, "ONLINE")] for d in doubles)


@pytest.mark.django_db(transaction=True)
def test_beats_reaper_finishes_a_switchover_whose_worker_died_in_its_record_step(
    adopted_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory
):
    """The same, through Celery as in production: beat's reaper task (every 5 s) finds the stale heartbeat."""
    cluster, doubles = adopted_lab
    op = confirmed(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user
    )
    die_in(op, doubles, "inventory")
    celery_factory("worker", redis_server, OPERATIONS_STALE_AFTER_S=3)
    celery_factory("beat", redis_server, MONITOR_SHARDS=1)
    assert wait_for(lambda: Operation.objects.get(pk=op.pk).state == OperationState.DONE, 40), Operation.objects.get(
        pk=op.pk
    ).error
    assert C.writers(configuration.latest(cluster).content) == [("127.0.0.1", 3312)]
    assert all(node_writers(d) == [("127.0.0.1", 3312, "ONLINE")] for d in doubles)


def test_a_worker_killed_in_a_drains_record_step_is_finished_by_the_reaper(adopted_lab, operator_user, live_redis):
    from apps.operations import drain

    cluster, doubles = adopted_lab
    server = Server.objects.get(port=3313)
    op = confirmed(
        drain.plan_drain(server, drain_timeout_ms=2000, on_timeout="rollback", note="disk swap"), operator_user
    )
    die_in(op, doubles, "inventory")
    assert executor.reap_stale() == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    assert Server.objects.get(pk=server.pk).maintenance
    statuses = {r["status"] for r in configuration.latest(cluster).content["mysql_servers"] if r["port"] == 3313}
    assert statuses == {"OFFLINE_SOFT"}
