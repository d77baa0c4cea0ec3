"""Planned switchover against two ProxySQL doubles in front of the Galera lab, run by the executor."""

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.fleet.choices import WriterIsAlsoReader
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.operations import executor, services, switchover
from apps.operations.choices import OnDrainTimeout, OperationState
from apps.operations.models import ClusterLock
from conftest import adopt_double
from lab import demo

from .conftest import extended_processlist, inventory_layout, layout, mirrored, runtime, variable

pytestmark = pytest.mark.django_db


def server(port):
    return Server.objects.get(port=port)


def run_switchover(cluster, operator_user, to_port=3312, **options):
    plan = switchover.plan_switchover(cluster, server(to_port), **options)
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
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
        assert spec["sql"] == [
            "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=100 AND "
            "hostname='127.0.0.1' AND port=3311",
            "LOAD MYSQL SERVERS TO RUNTIME",
        ]
    # What holds the old writer, and why, is in the plan's facts before anything runs.
    assert plan.facts["pinned_total"] == 8 and plan.facts["nodes"]
    assert [g.key for g in plan.guards if g.key.startswith("new_writer")] == [
        "new_writer_synced",
        "new_writer_primary",
        "new_writer_ready",
        "new_writer_queue",
    ]


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
    plan, op = run_switchover(cluster, operator_user, drain_timeout_ms=400, lower_autoinc=False)  # the old way
    assert op.state == OperationState.ROLLED_BACK and "drain timed out" in op.error and "no session was cut" in op.error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]
        assert double.traffic.status()["counters"]["sessions_cut"] == 0
    assert HostgroupMembership.objects.get(hostgroup_id=100).server.port == 3311
    assert not ClusterLock.objects.exists()


def test_offline_hard_on_timeout_cuts_the_sessions_it_announced(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    plan, op = run_switchover(
        cluster, operator_user, drain_timeout_ms=300, on_timeout=OnDrainTimeout.OFFLINE_HARD, lower_autoinc=False
    )
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
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
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
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    with pytest.raises(services.NotAllowed, match="cannot be overridden"):
        services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    assert AuditEvent.objects.filter(action="switchover refused").exists()


def test_two_switchovers_at_once_exactly_one_runs(adopted_lab, operator_user, admin_user_role):
    cluster, _ = adopted_lab
    one = services.save_plan(switchover.plan_switchover(cluster, server(3312)), actor=Actor.command(operator_user))
    two = services.save_plan(switchover.plan_switchover(cluster, server(3313)), actor=Actor.command(admin_user_role))
    services.confirm(one, actor=Actor.command(operator_user), enqueue=False)
    with pytest.raises(services.NotAllowed, match="otto-operator"):
        services.confirm(two, actor=Actor.command(admin_user_role), enqueue=False)


def test_failed_guard_needs_an_admin_and_a_reason(adopted_lab, operator_user, admin_user_role, galera_healthy):
    cluster, _ = adopted_lab
    galera_healthy.set_desync(2, True)  # B is Donor/Desynced: the Synced guard fails
    plan = switchover.plan_switchover(cluster, server(3312), lower_autoinc=True)
    assert "new_writer_synced" in [g.key for g in plan.failed_guards]
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    with pytest.raises(services.NotAllowed, match="Only an admin"):
        services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    op = services.save_plan(plan, actor=Actor.command(admin_user_role))
    services.confirm(
        op, actor=Actor.command(admin_user_role), override_reason="desync is planned maintenance", enqueue=False
    )
    confirmed = AuditEvent.objects.get(action="switchover confirmed")
    assert confirmed.details["override_reason"] == "desync is planned maintenance"
    assert confirmed.details["overridden_guards"] == ["new_writer_synced"]


def test_the_available_nodes_guard_counts_and_names_the_nodes_besides_the_new_writer(adopted_lab, galera_healthy):
    """A backend stopped at 3 a.m.: the row "At least 1 available node(s) besides the new writer" said "2 available",
    counting the new writer itself (and, when the new writer was the one down, subtracting it all the same)."""
    cluster, _ = adopted_lab
    galera_healthy.stop(3)
    guard = next(g for g in switchover.plan_switchover(cluster, server(3312)).guards if g.key == "min_available")
    assert guard.passed and guard.value == "1 available: 127.0.0.1:3311; not counted: 127.0.0.1:3313 (does not answer)"
    galera_healthy.set_desync(2, True)  # the new writer itself not Synced: the others are counted all the same
    plan = switchover.plan_switchover(cluster, server(3312))
    guard = next(g for g in plan.guards if g.key == "min_available")
    assert guard.value == "1 available: 127.0.0.1:3311; not counted: 127.0.0.1:3313 (does not answer)"
    assert "new_writer_synced" in [g.key for g in plan.failed_guards]


def test_the_move_sends_its_rows_in_one_replace_and_one_delete_per_node(adopted_lab, operator_user):
    """Issue 37: every statement of the move is an admin round trip inside the writer hold, 10-30 ms each on a real
    node under CPU contention; the rows that change go in one REPLACE and one DELETE before the LOAD, and the way
    back the same, and the result is the same mirror image of the roles."""
    cluster, doubles = adopted_lab
    before = [layout(d) for d in doubles]
    plan, op = run_switchover(cluster, operator_user, to_port=3312, lower_autoinc=True, drain_timeout_ms=2000)
    assert op.state == OperationState.DONE, op.error
    sent = {}
    for e in op.steps.get(key="move").executed:
        sent.setdefault(e["node"], []).append(e["sql"].split(" ", 1)[0])
    assert len(sent) == 2 and all(verbs == ["REPLACE", "DELETE", "LOAD"] for verbs in sent.values()), sent
    move = next(s for s in plan.steps if s.key == "move")
    for spec in move.nodes.values():
        assert [sql.split(" ", 1)[0] for sql in spec["rollback"]] == ["REPLACE", "DELETE", "LOAD"], spec["rollback"]
    for double, rows in zip(doubles, before):
        assert layout(double) == mirrored(rows, 3311, 3312, port_at=2)


# -- roles: a switchover swaps every role row of the two servers ----------------------------------------
def test_a_switchover_gives_the_mirror_image_of_the_roles(adopted_lab, operator_user):
    """Seed pair: writer 3311 (1000000), also a reader at 100 "writer, reads elsewhere first"; readers at
    10000; backup writers 3312 (1000) then 3313 (100). After 3311 → 3312 every row of the two is exchanged."""
    cluster, doubles = adopted_lab
    before, inventory_before = [layout(d) for d in doubles], inventory_layout(cluster)
    plan, op = run_switchover(cluster, operator_user, to_port=3312, lower_autoinc=True, drain_timeout_ms=2000)
    assert op.state == OperationState.DONE, op.error
    for double, rows in zip(doubles, before):
        assert layout(double) == mirrored(rows, 3311, 3312, port_at=2)
    assert inventory_layout(cluster) == mirrored(inventory_before, 3311, 3312, port_at=1)
    # Previewed: per node, the statements for every row of the two, and the rollback that puts them back.
    move = next(s for s in plan.steps if s.key == "move")
    for spec in move.nodes.values():
        assert any(
            sql.startswith("DELETE FROM mysql_servers WHERE ")
            and "(hostgroup_id=102 AND hostname='127.0.0.1' AND port=3312)" in sql
            for sql in spec["sql"]
        )
        assert any(
            "(102,'127.0.0.1',3311,0,'ONLINE',1000," in sql and "'backup writer 1'" in sql for sql in spec["sql"]
        )
        assert any(
            "(101,'127.0.0.1',3312,0,'ONLINE',100," in sql and "'writer, reads elsewhere first'" in sql
            for sql in spec["sql"]
        )
        assert any("(101,'127.0.0.1',3311,0,'ONLINE',10000," in sql and "'reader'" in sql for sql in spec["sql"])
        assert any("(102,'127.0.0.1',3312,0,'ONLINE',1000," in sql for sql in spec["rollback"])
    # Verify compared whole rows, not only statuses.
    verify = op.steps.get(key="verify")
    expect = next(iter(plan.steps[[s.key for s in plan.steps].index("verify")].params["expect"].values()))
    assert {"weight": 100, "comment": "writer, reads elsewhere first"}.items() <= next(
        want for hg, host, port, want in expect if (hg, port) == (101, 3312)
    ).items()
    assert verify.state == "done" and verify.detail["problems"] == []


def test_switchover_and_back_restores_the_original_layout(adopted_lab, operator_user):
    cluster, doubles = adopted_lab
    before, inventory_before = [layout(d) for d in doubles], inventory_layout(cluster)
    for port in (3312, 3311):
        plan, op = run_switchover(cluster, operator_user, to_port=port, lower_autoinc=True, drain_timeout_ms=2000)
        assert op.state == OperationState.DONE, op.error
    assert [layout(d) for d in doubles] == before
    assert inventory_layout(cluster) == inventory_before


# The seeds' plain layout (seed 001): writer 100 holds one server, readers 101 the other two, the writer
# does not read, no backup writers.
PLAIN_ROWS = [(100, 3311, 1000, "writer"), (101, 3312, 1000, "reader a"), (101, 3313, 1000, "reader b")]


@pytest.fixture
def plain_lab(db, proxysql_double_pair, galera_lab):
    for i, double in enumerate(proxysql_double_pair, 1):
        demo.admin_sql(
            double.port,
            "DELETE FROM mysql_servers",
            *[
                f"INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,comment) VALUES ({hg},'127.0.0.1',{port},"
                f"{weight},'{comment}')"
                for hg, port, weight, comment in PLAIN_ROWS
            ],
            "SET mysql-monitor_username='monitor'",
            "SET mysql-monitor_password='monitor'",
            "LOAD MYSQL VARIABLES TO RUNTIME",
            "LOAD MYSQL SERVERS TO RUNTIME",
            "SAVE MYSQL SERVERS TO DISK",
            user=double.user,
            password=double.password,
        )
        # The roles as the operator enters them in the adopt form.
        adopt_double(double, "plain-lab", f"proxysql-{i}", roles={"writer": 100, "reader": 101})
        double.traffic.set_sessions(hostgroup=100, count=2, kind="write", pinned_reason="auto_increment")
    Cluster.objects.filter(name="plain-lab").update(
        backup_writer_hostgroup=None, offline_hostgroup=None, writer_is_also_reader=WriterIsAlsoReader.NO
    )
    return Cluster.objects.get(name="plain-lab"), proxysql_double_pair


def test_plain_layout_the_writer_never_reads(plain_lab, operator_user):
    cluster, doubles = plain_lab
    before, inventory_before = [layout(d) for d in doubles], inventory_layout(cluster)
    plan, op = run_switchover(cluster, operator_user, to_port=3312, lower_autoinc=True, drain_timeout_ms=2000)
    assert op.state == OperationState.DONE, op.error
    for double, rows in zip(doubles, before):  # 3312 writes and leaves 101; 3311 reads with 3312's old row
        assert layout(double) == mirrored(rows, 3311, 3312, port_at=2)
    plan, op = run_switchover(cluster, operator_user, to_port=3311, lower_autoinc=True, drain_timeout_ms=2000)
    assert op.state == OperationState.DONE, op.error
    assert [layout(d) for d in doubles] == before
    assert inventory_layout(cluster) == inventory_before


# -- speed: the drain probe ----------------------------------------------------------------------------
def test_the_drain_probes_every_node_in_each_round_at_once(adopted_lab, operator_user):
    cluster, doubles = adopted_lab
    plan = switchover.plan_switchover(
        cluster, server(3312), drain_timeout_ms=1000, lower_autoinc=False
    )  # pinned, and the operator chose the old way: it times out
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    for double in doubles:
        double.clear_statements()
        double.set_mode("normal", latency_ms=200)  # every statement answered 200 ms late
    try:
        executor.run(op.pk)
    finally:
        for double in doubles:
            double.set_mode("normal", latency_ms=0)
    op.refresh_from_db()
    assert op.state == OperationState.ROLLED_BACK and "drain timed out" in op.error
    answered = [[e["t"] for e in list(d.engine.log) if "ConnUsed" in e["sql"]] for d in doubles]
    rounds = op.steps.get(key="wait_drain").detail["probes"]
    assert rounds >= 2 and len(answered[0]) == len(answered[1]) == rounds  # every node, every round
    for first, second in zip(*answered):  # together: one after the other would be >= 200 ms apart
        assert abs(first - second) < 0.1, answered


def test_the_start_recheck_reads_through_the_connections_the_steps_use(adopted_lab, operator_user):
    """At start the executor opens each node's connection, plans again through it and runs the steps on it: one
    handshake per node. A second, fresh one for the re-check's reads was one more 0.5 s connect deadline that a
    starved machine could miss, refusing the start (CI, issue 37)."""
    cluster, doubles = adopted_lab
    plan = switchover.plan_switchover(cluster, server(3312), lower_autoinc=True, drain_timeout_ms=2000)
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    for double in doubles:
        double.clear_statements()
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    for double in doubles:
        log = list(double.engine.log)
        first_step = next(
            e for e in log if "auto_increment_delay_multiplex" in e["sql"] and e["sql"].startswith("UPDATE")
        )
        rechecked = [e for e in log if e["seq"] < first_step["seq"] and "runtime_mysql_servers" in e["sql"]]
        assert rechecked and {e["conn"] for e in rechecked} == {first_step["conn"]}, log[:12]


# -- issue 23: the default way through pinned sessions ------------------------------------------------------
AUTOINC_REASON = (
    "8 session(s) pinned by mysql-auto_increment_delay_multiplex: lowering it to 0 for the drain, restored after"
)


def test_the_default_plan_takes_the_autoinc_way_through_sessions_pinned_by_auto_increment(adopted_lab, operator_user):
    """ProxySQL 2.7's default auto_increment_delay_multiplex=5 pins the writer's sessions (4 per node): with no
    choice made, the plan lowers it for the drain, says why, and stores the choice so the re-check plans the same."""
    cluster, doubles = adopted_lab
    extended_processlist(doubles)
    plan, op = run_switchover(cluster, operator_user)
    assert plan.facts["pinned_reasons"] == {"auto_increment_delay_token": 8}
    assert plan.facts["autoinc_way"] == {
        "taken": True,
        "chosen_by": "planner",
        "pinned": 8,
        "inferred": False,
        "reason": AUTOINC_REASON,
    }
    assert plan.options["lower_autoinc"] is True  # stored resolved: recheck.replan plans it the same
    assert [s.key for s in plan.steps][1:3] == ["autoinc_off", "drain"]
    assert op.state == OperationState.DONE, op.error
    for double in doubles:
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
        assert variable(double, "mysql-auto_increment_delay_multiplex") == "5"  # restored
        assert double.traffic.status()["counters"]["sessions_cut"] == 0


def test_the_operators_choice_keeps_the_old_way_and_nothing_pinned_lowers_nothing(adopted_lab, operator_user):
    cluster, doubles = adopted_lab
    extended_processlist(doubles)
    plan = switchover.plan_switchover(cluster, server(3312), lower_autoinc=False)
    assert plan.options["lower_autoinc"] is False and "autoinc_off" not in [s.key for s in plan.steps]
    assert (
        plan.facts["autoinc_way"]["chosen_by"] == "operator"
        and "will not finish" in plan.facts["autoinc_way"]["reason"]
    )
    assert any("this drain will not finish" in n["text"] and n["level"] == "warning" for n in switchover.notes(plan))
    for double in doubles:
        double.traffic.clear_sessions(hostgroup=100)
    plan = switchover.plan_switchover(cluster, server(3312))
    assert plan.facts["pinned_total"] == 0 and plan.options["lower_autoinc"] is False
    assert "autoinc_off" not in [s.key for s in plan.steps] and plan.guards_passed


def test_sessions_pinned_by_user_variables_refuse_the_default_drain_unless_the_operator_chooses_a_way(
    adopted_lab, operator_user, admin_user_role
):
    """Lowering the auto-increment delay does not free a session that set a user variable: the drain would time
    out. A guard no admin can override says which sessions and why; OFFLINE_HARD or a longer timeout lets it run."""
    cluster, doubles = adopted_lab
    extended_processlist(doubles)
    for double in doubles:
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="user_variable")
    plan = switchover.plan_switchover(cluster, server(3312))
    guard = next(g for g in plan.guards if g.key == "no_held_sessions")
    assert not guard.passed and not guard.overridable
    assert guard.value.startswith("8 session(s) pinned: proxysql-1 session ") and "user_variable" in guard.value
    assert "this drain will not finish" in guard.value
    assert plan.options["lower_autoinc"] is False  # not the cause: the auto-increment way would not help
    op = services.save_plan(plan, actor=Actor.command(admin_user_role))
    with pytest.raises(services.NotAllowed):
        services.confirm(op, actor=Actor.command(admin_user_role), override_reason="I know", enqueue=False)
    assert runtime(doubles[0], 100) == [("127.0.0.1", 3311, "ONLINE")]

    chosen = switchover.plan_switchover(cluster, server(3312), on_timeout=OnDrainTimeout.OFFLINE_HARD)
    guard = next(g for g in chosen.guards if g.key == "no_held_sessions")
    assert guard.passed and "OFFLINE_HARD at the timeout cuts them" in guard.value
    assert any(n["level"] == "error" and "OFFLINE_HARD will cut" in n["text"] for n in switchover.notes(chosen))
    longer = switchover.plan_switchover(cluster, server(3312), drain_timeout_ms=cluster.drain_timeout_ms + 1000)
    assert next(g for g in longer.guards if g.key == "no_held_sessions").passed


def test_the_planner_reads_once_then_judges_and_builds_from_the_read_alone(
    adopted_lab, django_assert_num_queries, operator_user
):
    """Issue 35 item 5: plan_switchover is read (read_switchover: every node and backend once), judge and build;
    the judge and the build make no query and open no connection (both nodes refuse connections meanwhile), and
    the three parts give the plan plan_switchover gives."""
    cluster, doubles = adopted_lab
    A, B = switchover.current_writer(cluster).server, server(3312)
    read = switchover.read_switchover(cluster, A, B, "reader")
    assert sorted(read.answered) == sorted(cluster.proxysql_nodes.values_list("pk", flat=True))
    assert set(read.cluster.backends) == set(cluster.servers.values_list("pk", flat=True))
    for d in doubles:
        d.set_mode("refuse")
    try:
        with django_assert_num_queries(0):
            guards, facts, lower = switchover.switchover_guards(
                cluster,
                A,
                B,
                read,
                drain_timeout_ms=cluster.drain_timeout_ms,
                on_timeout=OnDrainTimeout.ROLLBACK,
                longer_timeout=False,
                lower_autoinc=None,
            )
            steps = switchover.switchover_steps(
                cluster,
                A,
                B,
                read,
                lower_autoinc=lower,
                drain_timeout_ms=cluster.drain_timeout_ms,
                on_timeout=OnDrainTimeout.ROLLBACK,
                catchup_timeout_ms=2000,
                old_writer_to="reader",
            )
    finally:
        for d in doubles:
            d.set_mode("normal")
    plan = switchover.plan_switchover(cluster, B)
    assert [(g.key, g.passed) for g in guards] == [(g.key, g.passed) for g in plan.guards]
    assert [(s.key, s.nodes, s.params) for s in steps] == [(s.key, s.nodes, s.params) for s in plan.steps]

    def sessions(facts):  # the live sessions' ids and reasons (their time moves between two reads)
        return {pk: [(s["session"], s["reasons"]) for s in n["pinned"]] for pk, n in facts["nodes"].items()}

    assert sessions(facts) == sessions(plan.facts) and lower == plan.options["lower_autoinc"]
