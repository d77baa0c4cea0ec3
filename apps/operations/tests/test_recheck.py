"""Issue 9 item 3: at the start of execution every guard is read and evaluated again and the statements are
planned again; a plan whose guards fail now, or whose statements differ from what was confirmed, is
refused (audited, with the values); a confirmed plan not started within the cluster's validity window
expires. And item 8's operation part: who confirmed, the two-person rule, the refused side of a race."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster, Server
from apps.fleet.tests.conftest import admin_sql
from apps.configuration import change_set
from apps.operations import drain, executor, recheck, services, switchover
from apps.operations.choices import OperationState
from apps.operations.models import ClusterLock, Operation

from lab import demo

from .conftest import confirmed, finish, runtime

pytestmark = pytest.mark.django_db


def test_a_drain_planned_twice_and_confirmed_twice_is_refused_the_second_time(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    reader = Server.objects.get(port=3313)
    one = services.save_plan(drain.plan_drain(reader, drain_timeout_ms=2000), actor=Actor.command(operator_user))
    two = services.save_plan(drain.plan_drain(reader, drain_timeout_ms=2000), actor=Actor.command(operator_user))
    services.confirm(one, actor=Actor.command(operator_user), enqueue=False)
    assert finish(one).state == OperationState.DONE, one.error
    services.confirm(
        two, actor=Actor.command(operator_user), enqueue=False
    )  # its guards were computed before the first ran
    two = finish(two)
    assert two.state == OperationState.REFUSED
    assert (
        "these guards fail now: The server is in service (a drained one is restored, not drained again) (now: in "
        "maintenance)"
    ) in two.error
    event = AuditEvent.objects.get(action="drain refused", details__operation=two.pk)
    assert event.outcome == "refused"
    assert [g["key"] for g in event.details["failed_guards"]] == ["not_in_maintenance"]
    differ = event.details["statements_differ"]  # both versions: the rows are OFFLINE_SOFT now
    assert differ and all(v["confirmed"] != v["now"] for v in differ.values())
    assert set(two.steps.values_list("state", flat=True)) == {"skipped"} and not ClusterLock.objects.exists()
    for double in (first, second):
        assert ("127.0.0.1", 3313, "OFFLINE_SOFT") in runtime(double, 101)


def test_a_switchover_whose_target_desynced_after_confirm_is_refused_at_start(
    adopted_lab, operator_user, galera_healthy
):
    cluster, (first, second) = adopted_lab
    op = confirmed(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user
    )
    galera_healthy.set_desync(2, True)
    for double in (first, second):
        double.clear_statements()
    op = finish(op)
    assert op.state == OperationState.REFUSED and "127.0.0.1:3312 is Synced (now: 2 Donor/Desynced)" in op.error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]
        assert not [s for s in double.statements() if s.startswith(("UPDATE", "REPLACE", "DELETE"))]
    assert AuditEvent.objects.get(action="switchover refused").details["failed_guards"][0]["key"] == "new_writer_synced"


def test_a_guard_overridden_at_confirm_does_not_refuse_the_start(adopted_lab, admin_user_role, galera_healthy):
    cluster, _ = adopted_lab
    galera_healthy.set_desync(2, True)
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True)
    op = finish(confirmed(plan, admin_user_role, override_reason="desync is planned"))
    assert op.state == OperationState.DONE, op.error


def test_statements_that_would_differ_from_the_confirmed_plan_refuse_the_start(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    op = confirmed(drain.plan_drain(Server.objects.get(port=3313), drain_timeout_ms=2000), operator_user)
    admin_sql(
        second,
        "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )  # someone changed proxysql-2 by hand meanwhile
    op = finish(op)
    assert op.state == OperationState.REFUSED and "statements differ" in op.error and "drain on proxysql-2" in op.error
    differ = AuditEvent.objects.get(action="drain refused").details["statements_differ"]["drain on proxysql-2"]
    assert any(",7," in sql for sql in differ["now"]["rollback"]) and not any(
        ",7," in sql for sql in differ["confirmed"]["rollback"]
    )
    assert ("127.0.0.1", 3313, "ONLINE") in runtime(first, 101)


MOVED_ON = "refused at start, nothing was changed: the configuration moved on since this plan: "


def test_a_stale_change_set_confirmed_is_refused_as_the_configuration_moved_on(adopted_lab, operator_user):
    """Issue 23: two change sets planned on version 1, one applied; the other, confirmed from its open page, was
    refused as "statements differ" (what moved was the version) and its planner's "based on the current version"
    guard always passed."""
    from apps.configuration import services as config

    cluster, (first, _) = adopted_lab
    ops = []
    for value in ("4096", "2048"):
        cs = config.start_change_set(cluster, actor=Actor.command(operator_user), reason=f"max connections {value}")
        config.add_edit(
            cs,
            {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": value},
            actor=Actor.command(operator_user),
        )
        ops.append(change_set.plan_and_save(cs, actor=Actor.command(operator_user)))
    assert finish(confirmed_op(ops[0], operator_user)).state == OperationState.DONE
    stale = finish(confirmed_op(ops[1], operator_user))
    assert stale.state == OperationState.REFUSED
    assert stale.error.startswith(MOVED_ON + "version 2 is now current (was 1). Plan it again. In detail: "), (
        stale.error
    )
    assert "Based on the current version (1) (now: version 2 is current)" in stale.error
    assert "the statements differ from the confirmed plan for apply on proxysql-1" in stale.error
    event = AuditEvent.objects.get(action="config refused")
    assert event.details["moved_on"] == ["version 2 is now current (was 1)"] and event.details["statements_differ"]
    assert demo.admin_sql(
        first.port,
        "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-max_connections'",
        user=first.user,
        password=first.password,
    ) == (("4096",),)


def test_a_switchover_confirmed_after_another_moved_the_writer_names_the_writer(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    to_3312, to_3313 = (
        services.save_plan(
            switchover.plan_switchover(cluster, Server.objects.get(port=port), lower_autoinc=True),
            actor=Actor.command(operator_user),
        )
        for port in (3312, 3313)
    )
    assert finish(confirmed_op(to_3312, operator_user)).state == OperationState.DONE
    stale = finish(confirmed_op(to_3313, operator_user))
    assert stale.state == OperationState.REFUSED
    assert stale.error.startswith(
        MOVED_ON + "version 2 is now current (was 1); the writer is now 127.0.0.1:3312 "
        "(was 127.0.0.1:3311); in the inventory: 127.0.0.1:3311 left hostgroup 100; "
        "127.0.0.1:3311 joined hostgroup 102 (ONLINE); 127.0.0.1:3312 joined hostgroup 100 "
        "(ONLINE); 127.0.0.1:3312 left hostgroup 102. Plan it again."
    ), stale.error
    assert "In detail: " in stale.error and "statements differ" in stale.error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]


def test_nothing_moved_in_the_console_keeps_the_refusal_as_it_was(adopted_lab, operator_user, galera_healthy):
    """A guard failing from live state alone (a desynced target) names no move of the configuration."""
    cluster, _ = adopted_lab
    op = confirmed(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user
    )
    galera_healthy.set_desync(2, True)
    op = finish(op)
    assert op.state == OperationState.REFUSED and "moved on" not in op.error
    assert AuditEvent.objects.get(action="switchover refused").details["moved_on"] == []


def confirmed_op(op, user):
    services.confirm(op, actor=Actor.command(user), enqueue=False)
    return op


def test_a_confirmed_plan_not_started_within_the_validity_window_expires(adopted_lab, operator_user):
    cluster, (first, _) = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(plan_validity_s=1)
    op = confirmed(
        switchover.plan_switchover(
            Cluster.objects.get(pk=cluster.pk), Server.objects.get(port=3312), lower_autoinc=True
        ),
        operator_user,
    )
    time.sleep(1.2)
    op = finish(op)
    assert op.state == OperationState.EXPIRED and "validity window of 1 s" in op.error
    assert AuditEvent.objects.get(action="switchover expired").details["waited_s"] > 1
    assert runtime(first, 100) == [("127.0.0.1", 3311, "ONLINE")] and not ClusterLock.objects.exists()


def test_the_reaper_expires_a_plan_no_worker_started_and_frees_the_cluster(adopted_lab, operator_user):
    cluster, _ = adopted_lab
    op = confirmed(switchover.plan_switchover(cluster, Server.objects.get(port=3312)), operator_user)
    assert recheck.expire_unstarted() == []  # within its window
    Operation.objects.filter(pk=op.pk).update(confirmed_at=timezone.now() - timedelta(seconds=11))
    assert recheck.expire_unstarted() == [op.pk]
    assert Operation.objects.get(pk=op.pk).state == OperationState.EXPIRED and not ClusterLock.objects.exists()
    assert executor.run(op.pk) is None  # the worker that finally comes finds nothing to run


def test_who_confirmed_is_recorded_shown_and_audited(adopted_lab, operator_user, admin_user_role, client):
    cluster, _ = adopted_lab
    op = services.save_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312)), actor=Actor.command(operator_user)
    )
    services.confirm(op, actor=Actor.command(admin_user_role), enqueue=False)
    op.refresh_from_db()
    assert op.confirmed_by == admin_user_role and op.confirmer == "ada-admin" and op.confirmed_at
    assert AuditEvent.objects.get(action="switchover confirmed").details["confirmed_by"] == "ada-admin"
    client.force_login(operator_user)
    page = client.get(op.get_absolute_url()).content.decode()
    assert "planned by otto-operator" in page and "confirmed by <strong data-confirmer>ada-admin</strong>" in page


def test_the_two_person_rule_refuses_the_planner_and_lets_another_confirm(
    adopted_lab, operator_user, admin_user_role, client
):
    cluster, _ = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(two_person_rule=True)
    op = services.save_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312)), actor=Actor.command(operator_user)
    )
    client.force_login(operator_user)
    assert "another\n  operator must confirm it" in client.get(op.get_absolute_url()).content.decode()
    with pytest.raises(services.NotAllowed, match="requires two people: otto-operator planned"):
        services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    event = AuditEvent.objects.get(action="switchover refused")
    assert event.outcome == "refused" and event.details["two_person_rule"] and event.actor == "otto-operator"
    assert Operation.objects.get(pk=op.pk).state == OperationState.PLANNED
    services.confirm(op, actor=Actor.command(admin_user_role), enqueue=False)
    assert Operation.objects.get(pk=op.pk).confirmer == "ada-admin"


def test_the_losing_side_of_a_concurrent_confirm_is_audited(adopted_lab, operator_user, admin_user_role):
    cluster, _ = adopted_lab
    op = services.save_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312)), actor=Actor.command(operator_user)
    )
    stale = Operation.objects.get(pk=op.pk)  # what the second operator's request loaded
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    with pytest.raises(services.NotAllowed, match="already confirmed or discarded"):
        services.confirm(stale, actor=Actor.command(admin_user_role), enqueue=False)
    event = AuditEvent.objects.get(action="switchover refused")
    assert event.actor == "ada-admin" and event.details["lost_race"] and event.details["state"] == "pending"
    assert Operation.objects.get(pk=op.pk).confirmer == "otto-operator"


def test_a_held_cluster_refuses_the_confirm_audited_and_the_plan_stays_planned(
    adopted_lab, operator_user, admin_user_role
):
    cluster, _ = adopted_lab
    one = services.save_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312)), actor=Actor.command(operator_user)
    )
    two = services.save_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3313)), actor=Actor.command(admin_user_role)
    )
    services.confirm(one, actor=Actor.command(operator_user), enqueue=False)
    with pytest.raises(services.NotAllowed, match="holds the cluster"):
        services.confirm(two, actor=Actor.command(admin_user_role), enqueue=False)
    assert AuditEvent.objects.get(action="switchover refused").details["lock_holder"]
    assert Operation.objects.get(pk=two.pk).state == OperationState.PLANNED and not two.steps.exists()
