"""Issue 24 §1: operations on ProxySQL nodes that run ProxySQL Cluster sync (adopted_cluster_lab: two doubles with
sync on at ProxySQL's defaults). The plan holds the sync of the modules it loads on every node for the operation
(diffs_before_sync=0) and restores it after: on success, on rollback, and through the pending retry when a node
does not answer. Each test pauses a node once mid-operation, lets it answer again for longer than ProxySQL's 3 checks
(a sync left on pulls by then), and checks the doubles' history of pulls: no peer pulled anything."""

import threading
import time

import pytest

from apps.audit.actor import Actor
from apps.audit.tests.faults import answer, audit_outage  # noqa: F401 (a fixture)
from apps.fleet.models import Server
from apps.operations import drain, executor, repair, rollbacks, switchover
from apps.operations.choices import OperationState
from apps.operations.models import PendingRollback
from lab import demo

from .conftest import run_plan
from .test_three_layers import pause_at, retry_now

pytestmark = pytest.mark.django_db
MODULES = (
    "mysql_servers",
    "mysql_users",
    "mysql_query_rules",
    "mysql_variables",
    "admin_variables",
    "proxysql_servers",
)
TABLES = ("mysql_servers", "mysql_users", "mysql_query_rules", "global_variables")
NODE_OWN = ("admin-mysql_ifaces", "mysql-interfaces", "admin-web_port", "admin-restapi_port")
PULLS_DUE_S = 4.0  # past 3 checks of 1 s: a peer whose sync is on has pulled a difference by then


def sql(double, statement):
    return [tuple(r) for r in demo.admin_sql(double.port, statement, user=double.user, password=double.password) or ()]


def layers(double):
    """Every managed table and the shared variables, in memory, runtime and disk (SHUNNED is ProxySQL's own verdict)."""
    out = {}
    for table in TABLES:
        for layer, name in (("memory", table), ("runtime", f"runtime_{table}"), ("disk", f"disk.{table}")):
            rows = sql(double, f"SELECT * FROM {name} ORDER BY 1, 2")
            if table == "global_variables":
                rows = [r for r in rows if r[0] not in NODE_OWN]
            out[f"{layer} {table}"] = sorted(tuple("ONLINE" if v == "SHUNNED" else v for v in r) for r in rows)
    return out


def sync_settings(double):
    """{layer: {module: diffs_before_sync}}."""
    names = ",".join(f"'admin-cluster_{m}_diffs_before_sync'" for m in MODULES)
    return {
        layer: dict(sql(double, f"SELECT variable_name, variable_value FROM {table} WHERE variable_name IN ({names})"))
        for layer, table in (
            ("memory", "global_variables"),
            ("runtime", "runtime_global_variables"),
            ("disk", "disk.global_variables"),
        )
    }


def pulls_since(doubles, started):
    return {d.port: [p for p in d.status()["cluster"]["pulls"] if p[0] >= started] for d in doubles}


def assert_cooperated(doubles, started, settings_before):
    """Every node equal in every layer, the sync settings as they were in every layer, and no pull since `started`."""
    assert pulls_since(doubles, started) == {d.port: [] for d in doubles}
    first, second = doubles
    assert layers(first) == layers(second)
    for double in doubles:
        assert sync_settings(double) == settings_before[double.port]
        assert set(sync_settings(double)["runtime"].values()) == {"3"}


def resume_later(double):
    """The paused node answers again a moment later and stays unretried past the sync's 3 checks."""
    time.sleep(1.0)
    double.set_mode("normal")
    time.sleep(PULLS_DUE_S)


def resumed_once_paused(double, after_s):
    """A thread that waits until the paused statement arrived (the double stops answering), then lets it answer again
    `after_s` later. Counted from the pause, not from the test's start: on CI's loaded machine the operation reached
    its wait after a 1.5 s timer had already fired, and the peer, paused then, never answered again."""

    def resume():
        deadline = time.monotonic() + 60
        while double.engine.mode != "hang" and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after_s)
        double.set_mode("normal")

    thread = threading.Thread(target=resume, daemon=True)
    thread.start()
    return thread


def retried(op, double, ends):
    """The paused node answers again, later its pending statements are retried: the operation `ends` so."""
    resume_later(double)
    retry_now()
    op.refresh_from_db()
    assert op.state == ends, op.error
    time.sleep(PULLS_DUE_S)


def test_a_switchover_says_it_holds_the_sync_and_restores_it(adopted_cluster_lab, operator_user, viewer_client):
    cluster, doubles = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in doubles}
    started = time.time()
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True)
    assert plan.steps[0].key == "sync_hold" and plan.steps[-1].key == "sync_restore"
    assert plan.facts["cluster_sync_held"]["said"] == (
        "ProxySQL Cluster sync of admin_variables, mysql_servers, mysql_variables held off on both nodes for the "
        "operation, restored after"
    )
    assert {"level": "info", "text": plan.facts["cluster_sync_held"]["said"] + "."} in switchover.notes(plan)
    hold = next(iter(plan.steps[0].nodes.values()))
    assert hold["sql"][-1] == "LOAD ADMIN VARIABLES TO RUNTIME" and "SAVE" not in str(hold)  # disk kept as it was
    assert (
        "UPDATE global_variables SET variable_value='0' WHERE variable_name="
        "'admin-cluster_mysql_servers_diffs_before_sync'"
    ) in hold["sql"]
    op = run_plan(plan, operator_user)
    assert op.state == OperationState.DONE, op.error
    assert plan.facts["cluster_sync_held"]["said"] in viewer_client.get(op.get_absolute_url()).content.decode()
    time.sleep(PULLS_DUE_S)
    assert_cooperated(doubles, started, before)
    assert sql(doubles[1], "SELECT port FROM runtime_mysql_servers WHERE hostgroup_id=100") == [("3312",)]


# Each node paused once (issue 24, done-when): the first node and the second, in turn.
EACH_NODE = pytest.mark.parametrize("paused_index", [0, 1], ids=["proxysql-1 paused", "proxysql-2 paused"])


@EACH_NODE
def test_a_switchover_paused_at_its_save_rolls_back_and_the_pending_retry_restores_the_sync(
    adopted_cluster_lab, operator_user, live_redis, paused_index
):
    cluster, doubles = adopted_cluster_lab
    paused, other = doubles[paused_index], doubles[1 - paused_index]
    before = {d.port: sync_settings(d) for d in doubles}
    started = time.time()
    pause_at(paused, "SAVE MYSQL SERVERS TO DISK")
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING, op.error
    # held where the rollback ran too, until the paused node took its undo (executor.keep_held)
    assert sync_settings(other)["runtime"]["admin-cluster_mysql_servers_diffs_before_sync"] == "0"
    resume_later(paused)
    for double in doubles:
        assert sync_settings(double)["runtime"]["admin-cluster_mysql_servers_diffs_before_sync"] == "0"  # still held
    assert retry_now() == [
        f"proxysql-{paused_index + 1}: {len(retry_statements(op, paused_index))} statement(s) "
        "ran; its rollback is complete",
        f"proxysql-{2 - paused_index}: 4 statement(s) ran; its rollback is complete",
    ]
    op.refresh_from_db()
    assert op.state == OperationState.ROLLED_BACK, op.error
    time.sleep(PULLS_DUE_S)
    assert_cooperated(doubles, started, before)
    for d in doubles:
        assert sql(d, "SELECT port FROM runtime_mysql_servers WHERE hostgroup_id=100") == [("3311",)]


def retry_statements(op, index):
    return [s for r in PendingRollback.objects.filter(operation=op, node__name=f"proxysql-{index + 1}") for s in r.ran]


def pause_at_resume(double, text):
    """The double stops answering as the first statement containing `text` arrives, and runs it when it answers
    again: a ProxySQL stopped (SIGSTOP) with that statement in flight runs it on SIGCONT, its change then the
    newest of the pair."""
    demo.admin_sql(
        double.port,
        'LAB FAIL_STATEMENTS {"text": "%s", "pause": "on_resume"}' % text,
        user=double.user,
        password=double.password,
    )


def servers(double):
    return {k: v for k, v in layers(double).items() if k.endswith(" mysql_servers")}


def test_a_rollback_keeps_the_sync_held_on_every_node_until_a_paused_one_took_its_undo(
    adopted_cluster_lab, operator_user, live_redis
):
    """Issues 33/39: a node stopped with its drain's LOAD in flight runs it when it resumes, after the other node
    rolled back: the pair's newest change. The node rolled back keeps its sync held (a pending row of its own, said)
    until the paused one took its undo, then the retry restores it. Before, it restored its sync at once, pulled the
    paused node's change about 3 s later and saved it to its disk (the real pair's test saw it after the restarts)."""
    cluster, (first, second) = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in (first, second)}
    intent = servers(first)
    started = time.time()
    pause_at_resume(second, "LOAD MYSQL SERVERS TO RUNTIME")
    op = run_plan(drain.plan_drain(Server.objects.get(port=3313)), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING, op.error
    held = PendingRollback.objects.get(operation=op, node__name="proxysql-1")
    assert held.what_is_pending == (
        "rollback pending on proxysql-1: its ProxySQL Cluster sync is held until the "
        "other nodes took theirs (restored then)"
    )
    assert "proxysql-1 (3 statement(s) not taken: its ProxySQL Cluster sync stays held until proxysql-2" in op.error
    # the operator's button keeps the order too (proxysql-2, paused, still does not answer)
    assert rollbacks.run_now(op, actor=Actor.rule("test"))[1] == (
        "proxysql-1: not tried, its ProxySQL Cluster sync stays held until proxysql-2 took the undo"
    )
    resume_later(second)  # its drain's LOAD runs now
    assert servers(first) == intent  # nothing pulled, nothing saved to its disk (a statement runs the checks due)
    assert pulls_since((first, second), started) == {first.port: [], second.port: []}
    assert retry_now() == [
        "proxysql-2: 6 statement(s) ran; its rollback is complete",
        "proxysql-1: 3 statement(s) ran; its rollback is complete",
    ]
    op.refresh_from_db()
    assert op.state == OperationState.ROLLED_BACK, op.error
    time.sleep(PULLS_DUE_S)
    assert_cooperated((first, second), started, before)
    assert servers(second) == intent


def test_a_switchover_rolled_back_restores_the_sync_on_every_node(adopted_cluster_lab, operator_user):
    """The drain times out (sessions pinned by user variables): the rollback restores the hold, last."""
    cluster, doubles = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in doubles}
    started = time.time()
    for double in doubles:
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="user_variable")
    op = run_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), drain_timeout_ms=300), operator_user
    )
    assert op.state == OperationState.ROLLED_BACK, op.error
    hold = op.steps.get(key="sync_hold")
    assert hold.state == "rolled_back" and hold.detail["rollback"][-1]["sql"] == "LOAD ADMIN VARIABLES TO RUNTIME"
    time.sleep(PULLS_DUE_S)
    assert_cooperated(doubles, started, before)


def test_a_switchover_finishing_on_a_paused_node_restores_its_sync_when_it_answers(
    adopted_cluster_lab, operator_user, live_redis
):
    cluster, (first, second) = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in (first, second)}
    started = time.time()
    pause_at(second, "SET variable_value='5'")  # the auto-increment delay's restore, past the point of no return
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == OperationState.FINISH_PENDING, op.error
    retried(op, second, OperationState.DONE)
    assert_cooperated((first, second), started, before)


@EACH_NODE
def test_a_drain_paused_mid_way_and_its_restore(adopted_cluster_lab, operator_user, live_redis, paused_index):
    cluster, (first, second) = adopted_cluster_lab
    paused = (first, second)[paused_index]
    before = {d.port: sync_settings(d) for d in (first, second)}
    started = time.time()
    reader = Server.objects.get(port=3313)
    pause_at(paused, "LOAD MYSQL SERVERS TO RUNTIME")  # its drain loaded, then it stops answering
    op = run_plan(drain.plan_drain(reader), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING, op.error
    retried(op, paused, OperationState.ROLLED_BACK)
    op = run_plan(drain.plan_drain(reader), operator_user)
    assert op.state == OperationState.DONE, op.error
    op = run_plan(drain.plan_restore(Server.objects.get(port=3313)), operator_user)
    assert op.state == OperationState.DONE, op.error
    time.sleep(PULLS_DUE_S)
    assert_cooperated((first, second), started, before)


@EACH_NODE
def test_a_repair_paused_mid_way_finishes_and_restores_the_sync(
    adopted_cluster_lab, operator_user, live_redis, paused_index
):
    cluster, (first, second) = adopted_cluster_lab
    paused = (first, second)[paused_index]
    for double in (first, second):  # drift on both nodes: a reader's weight, loaded and saved
        sql(double, "UPDATE mysql_servers SET weight=9 WHERE hostgroup_id=101 AND port=3313")
        sql(double, "LOAD MYSQL SERVERS TO RUNTIME")
        sql(double, "SAVE MYSQL SERVERS TO DISK")
    time.sleep(PULLS_DUE_S)
    before = {d.port: sync_settings(d) for d in (first, second)}
    started = time.time()
    pause_at(paused, "REPLACE INTO mysql_servers")
    op = run_plan(repair.plan_repair(cluster), operator_user)
    assert op.state == OperationState.FINISH_PENDING, op.error
    retried(op, paused, OperationState.DONE)
    assert_cooperated((first, second), started, before)
    for d in (first, second):
        assert sql(d, "SELECT weight FROM disk.mysql_servers WHERE hostgroup_id=101 AND port=3313") != [("9",)]


def test_a_switchover_failed_past_its_point_of_no_return_still_restores_the_sync(
    adopted_cluster_lab, operator_user, audit_outage
):
    """A step after the point of no return fails (here the version's audit append, in the inventory step): the
    operation is not rolled back; the sync restore runs anyway (before, the hold stayed on and the nodes never pulled
    from each other again). A database failure there is finished by the reaper (issue 39), the restore with it; any
    other failure runs the restore at once (executor.restore_sync_hold)."""
    cluster, doubles = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in doubles}
    started = time.time()
    audit_outage("configuration version recorded")
    op = run_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True, drain_timeout_ms=2000),
        operator_user,
    )
    # The database failed past the point of no return: the run is left to the reaper (issue 39), which finishes it
    # once the database answers, its record and the sync restore included.
    assert op.state == OperationState.RUNNING, op.error
    answer()
    assert executor.reap_stale(stale_after_s=0) == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    restore = op.steps.get(key="sync_restore")
    assert restore.state == "done", (restore.state, restore.detail)
    time.sleep(PULLS_DUE_S)
    assert_cooperated(doubles, started, before)
