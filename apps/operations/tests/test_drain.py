"""Maintenance drain and restore of a backend across both ProxySQL doubles."""

import pytest

from apps.audit.actor import Actor
from apps.fleet.models import HostgroupMembership, Server
from apps.operations import drain, services
from apps.operations.choices import OperationState

from .conftest import query, run_plan, runtime

pytestmark = pytest.mark.django_db


def test_drain_a_reader_then_restore_it(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    reader = Server.objects.get(port=3313)
    op = run_plan(drain.plan_drain(reader, drain_timeout_ms=2000, note="disk swap"), operator_user)
    assert op.state == OperationState.DONE, op.error
    for double in (first, second):
        assert ("127.0.0.1", 3313, "OFFLINE_SOFT") in runtime(double, 101)
        assert ("127.0.0.1", 3313, "OFFLINE_SOFT") in runtime(double, 102)
    reader.refresh_from_db()
    assert reader.maintenance and reader.maintenance_note == "disk swap"
    assert set(HostgroupMembership.objects.filter(server=reader).values_list("status", flat=True)) == {"OFFLINE_SOFT"}

    op = run_plan(drain.plan_restore(reader), operator_user)
    assert op.state == OperationState.DONE, op.error
    for double in (first, second):
        assert ("127.0.0.1", 3313, "ONLINE") in runtime(double, 101)
    reader.refresh_from_db()
    assert not reader.maintenance
    assert set(HostgroupMembership.objects.filter(server=reader).values_list("status", flat=True)) == {"ONLINE"}


def test_draining_the_only_writer_is_refused(adopted_lab, operator_user, admin_user_role):
    cluster, _ = adopted_lab
    plan = drain.plan_drain(Server.objects.get(port=3311))
    assert "not_the_writer" in [g.key for g in plan.failed_guards]
    op = services.save_plan(plan, actor=Actor.command(admin_user_role))
    with pytest.raises(services.NotAllowed, match="cannot be overridden"):
        services.confirm(op, actor=Actor.command(admin_user_role), override_reason="yolo", enqueue=False)


def test_pinned_reader_sessions_time_out_and_roll_back(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    for double in (first, second):  # readers holding their connection: user variables pin regardless
        double.traffic.set_sessions(hostgroup=101, count=6, kind="read", pinned_reason="user_variable")
    reader = Server.objects.get(port=3312)
    plan = drain.plan_drain(reader, drain_timeout_ms=300)
    op = run_plan(plan, operator_user)
    assert op.state == OperationState.ROLLED_BACK and "drain timed out" in op.error
    for double in (first, second):
        assert ("127.0.0.1", 3312, "ONLINE") in runtime(double, 101)
    reader.refresh_from_db()
    assert not reader.maintenance


def test_a_desynced_node_is_not_restored(adopted_lab, galera_healthy, operator_user):
    """Back ONLINE only when Galera says the node can serve: Synced, Primary, ready, a short receive queue."""
    cluster, doubles = adopted_lab
    reader = Server.objects.get(port=3313)
    assert run_plan(drain.plan_drain(reader, drain_timeout_ms=2000), operator_user).state == OperationState.DONE
    reader.refresh_from_db()
    galera_healthy.set_desync(3, True)
    try:
        plan = drain.plan_restore(reader)
        failed = {g.key: g for g in plan.failed_guards}
        assert set(failed) == {"server_synced"}, [(g.key, g.value) for g in plan.failed_guards]
        assert failed["server_synced"].label == "127.0.0.1:3313 is Synced"
        assert failed["server_synced"].value == "2 Donor/Desynced"
        assert {"server_primary", "server_ready", "server_queue"} <= {g.key for g in plan.guards}
        op = services.save_plan(plan, actor=Actor.command(operator_user))
        with pytest.raises(services.NotAllowed, match="127.0.0.1:3313 is Synced"):
            services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
        for double in doubles:
            assert ("127.0.0.1", 3313, "OFFLINE_SOFT") in runtime(double, 101)
    finally:
        galera_healthy.set_desync(3, False)
    plan = drain.plan_restore(reader)
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    assert run_plan(plan, operator_user).state == OperationState.DONE


def test_a_stopped_replica_is_not_restored(async_lab, operator_user):
    """Async: back ONLINE only with its replication threads running and its lag within the cluster's limit."""
    cluster, doubles, lab = async_lab
    replica = Server.objects.get(port=3323)
    assert run_plan(drain.plan_drain(replica, drain_timeout_ms=2000), operator_user).state == OperationState.DONE
    replica.refresh_from_db()
    query(lab, 3, "STOP SLAVE")
    try:
        plan = drain.plan_restore(replica)
        assert [(g.key, g.value) for g in plan.failed_guards] == [
            ("server_replication_running", "IO No, SQL No"),
            ("server_lag", "None"),
        ]
        assert [g.key for g in plan.guards if g.key.startswith("server_")] == [
            "server_replicates_old",
            "server_replication_running",
            "server_lag",
        ]
    finally:
        query(lab, 3, "START SLAVE")
    lab.wait_caught_up(3)
    plan = drain.plan_restore(replica)
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    assert run_plan(plan, operator_user).state == OperationState.DONE


def test_a_drains_guards_are_said_positively(adopted_lab):
    """Issue 36 item 12: "The server is not the cluster's only writer: no" and "not already in maintenance: no"
    read as double negatives; each guard now says what holds, and its value what was seen."""
    plan = drain.plan_drain(Server.objects.get(port=3313))
    guards = {g.key: g for g in plan.guards}
    assert (guards["not_the_writer"].label, guards["not_the_writer"].value, guards["not_the_writer"].passed) == (
        "Another writer stays for the cluster (if the server is its only writer: a switchover first)",
        "yes: not a writer",
        True,
    )
    assert (guards["not_in_maintenance"].label, guards["not_in_maintenance"].value) == (
        "The server is in service (a drained one is restored, not drained again)",
        "yes",
    )
    only = {g.key: g for g in drain.plan_drain(Server.objects.get(port=3311)).guards}["not_the_writer"]
    assert not only.passed and only.value == "no: it is the only writer"


def test_the_drain_planner_reads_once_then_judges_and_builds_from_the_read_alone(
    adopted_lab, django_assert_num_queries
):
    """Issue 35 item 5, as the switchover's: read_drain reads the nodes, the inventory, the lock; drain_guards and
    drain_steps make no query and open no connection (both nodes refusing), and give plan_drain's guards and steps."""
    cluster, doubles = adopted_lab
    reader = Server.objects.get(port=3313)
    read = drain.read_drain(reader)
    assert len(read.per_node) == 2 and read.readers_left >= 1 and read.writers
    for d in doubles:
        d.set_mode("refuse")
    try:
        with django_assert_num_queries(0):
            guards = drain.drain_guards(reader, read, 2000)
            steps = drain.drain_steps(reader, read, 2000, "rollback", "disk swap")
    finally:
        for d in doubles:
            d.set_mode("normal")
    plan = drain.plan_drain(reader, drain_timeout_ms=2000, note="disk swap")
    assert [(g.key, g.passed, g.value) for g in guards] == [(g.key, g.passed, g.value) for g in plan.guards]
    assert [(s.key, s.nodes, s.params) for s in steps] == [(s.key, s.nodes, s.params) for s in plan.steps]
