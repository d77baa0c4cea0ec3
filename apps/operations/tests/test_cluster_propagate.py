"""Issue 24 §1, the other way: a cluster whose changes ProxySQL Cluster itself carries (Cluster.cluster_sync_mode
"propagate", sync_hold.propagate). A plan whose change is one state (one module, one step) writes it on one node and
waits until every peer has pulled it; its rollback is undone there and pulled the same way. A plan that cannot be
carried so (a switchover, a repair, several modules) holds the sync as by default and says why.

Each test checks the doubles' runtime history (every runtime_mysql_servers a LOAD or a pull left): the peer only ever
served its state before or a state the origin loaded whole, never one in between; and every node ends equal in every
layer with the sync settings as they were."""

import threading
import time

import pytest

from apps.audit.actor import Actor
from apps.configuration import services
from apps.configuration.tests.test_change_sets import run
from apps.fleet.choices import ClusterSyncMode
from apps.fleet.models import Cluster, Server
from apps.operations import drain, repair, switchover
from apps.operations.choices import OperationState

from . import test_cluster_sync as cluster_sync
from .conftest import run_plan
from .test_cluster_sync import (
    EACH_NODE,
    PULLS_DUE_S,
    layers,
    pulls_since,
    resume_later,
    resumed_once_paused,
    retried,
    sql,
    sync_settings,
)
from .test_three_layers import pause_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def propagating(adopted_cluster_lab):
    cluster, doubles = adopted_cluster_lab
    Cluster.objects.filter(pk=cluster.pk).update(cluster_sync_mode=ClusterSyncMode.PROPAGATE)
    cluster.refresh_from_db()
    # The doubles were seeded (each LOADed) just now: a LOAD in that same second would share their epoch, and ProxySQL
    # pulls only a newer epoch (two LOADs in one second never converge: lab/reference/README.md).
    time.sleep(1.1)
    return cluster, doubles


def served(double, since=0.0):
    """The runtime_mysql_servers states the double served since `since` (its LOADs and pulls), in order."""
    return [tuple(tuple(row) for row in rows) for t, rows in double.status()["servers_history"] if t >= since]


def assert_whole_states_only(origin, peer, started, peer_before):
    """The origin loaded at most the change and its undo; the peer served nothing but its state before and those."""
    loaded = served(origin, started)
    assert 1 <= len(loaded) <= 2, loaded
    assert set(served(peer, started)) <= {peer_before, *loaded}


def assert_equal_and_sync_untouched(doubles, settings_before):
    first, second = doubles
    assert layers(first) == layers(second)
    for double in doubles:
        assert sync_settings(double) == settings_before[double.port]


def weight_change(cluster, user, weight=5):
    """One module (mysql_servers): a reader's weight."""
    reader = next(
        r for r in services.latest(cluster).content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3313
    )
    cs = services.start_change_set(cluster, actor=Actor.command(user), reason="a reader's weight")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3313],
            "row": {**reader, "weight": weight},
        },
        actor=Actor.command(user),
    )
    return cs


def weights(double, layer="runtime_"):
    return sql(double, f"SELECT weight FROM {layer}mysql_servers WHERE hostgroup_id=101 AND port=3313")


def test_a_change_set_is_written_on_one_node_and_pulled_by_its_peer(propagating, operator_user):
    cluster, (first, second) = propagating
    settings_before = {d.port: sync_settings(d) for d in (first, second)}
    peer_before = served(second)[-1]
    started = time.time()
    op, plan = run(weight_change(cluster, operator_user), operator_user)
    assert op.state == OperationState.DONE, op.error
    first_pk = str(cluster.proxysql_nodes.get(name="proxysql-1").pk)
    assert [s.key for s in plan.steps] == ["apply", "sync_wait", "verify", "save", "record"]
    assert list(plan.steps[0].nodes) == [first_pk] and "(on proxysql-1 only: its peers pull it)" in plan.steps[0].title
    assert len(plan.steps[3].nodes) == 2  # each node saves what it runs (a peer with save_to_disk off too)
    assert plan.facts["cluster_sync_propagated"]["said"] == (
        "ProxySQL Cluster: written on proxysql-1 only; proxysql-2 pulls it (sync of mysql_servers on); a rollback is "
        "undone on proxysql-1 and pulled the same way"
    )
    assert "cluster_sync_held" not in plan.facts
    wait = op.steps.get(key="sync_wait")
    # ProxySQL's 3 checks of 1 s: the peer pulled 2-3 s after the LOAD, within the plan's bound (6 s at the defaults)
    assert wait.detail["behind"] == {} and 1500 <= wait.detail["waited_ms"] <= plan.steps[1].params["timeout_ms"]
    assert plan.steps[1].params["timeout_ms"] == 6000
    assert [p[1] for p in pulls_since((second,), started)[second.port]] == ["mysql_servers"]
    assert weights(second) == weights(second, "disk.") == [("5",)]
    assert_equal_and_sync_untouched((first, second), settings_before)
    assert_whole_states_only(first, second, started, peer_before)


def test_a_change_set_of_two_modules_holds_the_sync_and_says_why(propagating, operator_user):
    cluster, doubles = propagating
    cs = weight_change(cluster, operator_user)
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 30, "active": 1, "apply": 1, "match_digest": "^DELETE", "destination_hostgroup": 100},
        },
        actor=Actor.command(operator_user),
    )
    started = time.time()
    op, plan = run(cs, operator_user)
    assert op.state == OperationState.DONE, op.error
    assert [plan.steps[0].key, plan.steps[-1].key] == ["sync_hold", "sync_restore"]
    assert plan.facts["cluster_sync_propagate_refused"] == (
        "it loads 2 modules (mysql_query_rules, mysql_servers), and a peer could pull one without the other"
    )
    assert "not propagated from one node: it loads 2 modules" in plan.steps[0].title
    time.sleep(PULLS_DUE_S)
    assert pulls_since(doubles, started) == {d.port: [] for d in doubles}
    assert layers(doubles[0]) == layers(doubles[1])


@pytest.mark.parametrize(
    "planner,why",
    [
        (
            lambda cluster: switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True),
            "a switchover drains its writer on every node before it moves it, and a peer pulling in between would have no "
            "writer",
        ),
        (repair.plan_repair, "a repair writes each node what that node lacks"),
    ],
    ids=["switchover", "repair"],
)
def test_a_switchover_and_a_repair_hold_the_sync_whatever_the_mode(propagating, operator_user, planner, why):
    cluster, doubles = propagating
    if planner is repair.plan_repair:  # something to repair: a reader's weight on both nodes
        for double in doubles:
            sql(double, "UPDATE mysql_servers SET weight=9 WHERE hostgroup_id=101 AND port=3313")
            sql(double, "LOAD MYSQL SERVERS TO RUNTIME")
        time.sleep(PULLS_DUE_S)
    settings_before = {d.port: sync_settings(d) for d in doubles}
    started = time.time()
    plan = planner(cluster)
    assert plan.facts["cluster_sync_propagate_refused"] == why
    assert plan.steps[0].key == "sync_hold" and why in plan.facts["cluster_sync_held"]["said"]
    op = run_plan(plan, operator_user)
    assert op.state == OperationState.DONE, op.error
    time.sleep(PULLS_DUE_S)
    assert pulls_since(doubles, started) == {d.port: [] for d in doubles}
    assert_equal_and_sync_untouched(doubles, settings_before)


def test_a_change_set_with_its_origin_paused_at_its_load_rolls_back_and_the_peer_follows(
    propagating, operator_user, live_redis
):
    """The origin paused with its LOAD in flight: it runs it when it resumes (the whole change), the peer may pull it,
    the pending rollback's retry undoes it there, and the peer pulls that too: both end as before in every layer."""
    cluster, (first, second) = propagating
    settings_before = {d.port: sync_settings(d) for d in (first, second)}
    peer_before = served(second)[-1]
    weight_before = weights(first)
    started = time.time()
    pause_at(first, "LOAD MYSQL SERVERS TO RUNTIME")
    op, _ = run(weight_change(cluster, operator_user), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING and "ROLLBACK PENDING on proxysql-1" in op.error, op.error
    retried(op, first, OperationState.ROLLED_BACK)
    for double in (first, second):
        assert weights(double) == weights(double, "disk.") == weight_before
    assert_equal_and_sync_untouched((first, second), settings_before)
    assert_whole_states_only(first, second, started, peer_before)


def test_a_change_set_waits_for_a_paused_peer_that_catches_up(propagating, operator_user):
    """The peer stops answering as the wait starts and answers again 1.5 s later: it pulls about 2 s after it resumes
    (as a real paused peer does), within the plan's bound."""
    cluster, (first, second) = propagating
    settings_before = {d.port: sync_settings(d) for d in (first, second)}
    peer_before = served(second)[-1]
    started = time.time()
    pause_at(second, "runtime_checksums_values")
    resumer = resumed_once_paused(second, 1.5)
    try:
        op, _ = run(weight_change(cluster, operator_user), operator_user)
    finally:
        resumer.join()
    assert op.state == OperationState.DONE, op.error
    wait = op.steps.get(key="sync_wait")
    assert wait.detail["waited_ms"] > 1500 and wait.detail["behind"] == {}
    assert weights(second) == weights(second, "disk.") == [("5",)]
    assert_equal_and_sync_untouched((first, second), settings_before)
    assert_whole_states_only(first, second, started, peer_before)


def test_a_change_set_whose_peer_never_pulls_is_rolled_back_and_says_so(propagating, operator_user):
    """The peer stays paused past the bound: the step fails, the origin is undone, and the peer (which never pulled)
    is named as not answering; once it answers both are as before."""
    cluster, (first, second) = propagating
    peer_before = served(second)[-1]
    weight_before = weights(first)
    started = time.time()
    pause_at(second, "runtime_checksums_values")
    op, _ = run(weight_change(cluster, operator_user), operator_user)
    assert op.state == OperationState.FAILED, op.error
    assert (
        "ProxySQL Cluster did not carry the change from proxysql-1 within 6000 ms: proxysql-2: does not answer"
        in op.error
        and "ROLLBACK INCOMPLETE: ProxySQL Cluster:" in op.error
    ), op.error
    assert op.timings["rollback_ms"] >= 6000  # the rollback waited its own bound for the peer: said, not hidden
    resume_later(second)
    for double in (first, second):
        assert weights(double) == weights(double, "disk.") == weight_before
    assert layers(first) == layers(second)
    assert set(served(second, started)) <= {peer_before}


@EACH_NODE
def test_a_drain_paused_mid_way_then_done_and_restored(propagating, operator_user, live_redis, paused_index):
    """A maintenance drain carried by the sync: each node paused once (the origin at its LOAD; the peer as the wait
    reads it), then the drain and the restore done; the peer only ever served whole states."""
    cluster, (first, second) = propagating
    paused = (first, second)[paused_index]
    settings_before = {d.port: sync_settings(d) for d in (first, second)}
    peer_before = served(second)[-1]
    started = time.time()
    reader = Server.objects.get(port=3313)
    if paused is first:
        pause_at(first, "LOAD MYSQL SERVERS TO RUNTIME")
        op = run_plan(drain.plan_drain(reader), operator_user)
        assert op.state == OperationState.ROLLBACK_PENDING, op.error
        retried(op, first, OperationState.ROLLED_BACK)
        assert_whole_states_only(first, second, started, peer_before)
    else:
        pause_at(second, "runtime_checksums_values")
        resumer = resumed_once_paused(second, 1.0)
        try:
            op = run_plan(drain.plan_drain(reader), operator_user)
        finally:
            resumer.join()
        assert op.state == OperationState.DONE, op.error
        op = run_plan(drain.plan_restore(Server.objects.get(port=3313)), operator_user)
        assert op.state == OperationState.DONE, op.error
        assert [s.key for s in op.steps.order_by("index")][:2] == ["restore", "sync_wait"]
    if paused is first:
        op = run_plan(drain.plan_drain(reader), operator_user)
        assert op.state == OperationState.DONE, op.error
        assert [s.key for s in op.steps.order_by("index")][:3] == ["drain", "sync_wait", "wait_drain"]
        assert sql(second, "SELECT DISTINCT status FROM runtime_mysql_servers WHERE port=3313") == [("OFFLINE_SOFT",)]
        op = run_plan(drain.plan_restore(Server.objects.get(port=3313)), operator_user)
        assert op.state == OperationState.DONE, op.error
    time.sleep(PULLS_DUE_S)
    assert_equal_and_sync_untouched((first, second), settings_before)
    assert set(served(second, started)) <= set(served(first, started)) | {peer_before}


def test_a_peer_that_loads_in_the_same_second_fails_the_wait_at_once(propagating, operator_user):
    """A peer that loads mysql_servers itself just after the origin's LOAD has the same epoch or a newer one: ProxySQL
    pulls only a newer epoch, so it would never pull the change (and the origin might pull the peer's). The wait says
    so at once instead of waiting out its bound, and the change is rolled back on the origin."""
    cluster, (first, second) = propagating
    loads = len(served(first))
    weight_before = weights(first)

    def peer_loads_too():
        deadline = time.monotonic() + 10
        while len(served(first)) == loads and time.monotonic() < deadline:
            time.sleep(0.005)
        sql(second, "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313")
        sql(second, "LOAD MYSQL SERVERS TO RUNTIME")

    racer = threading.Thread(target=peer_loads_too)
    racer.start()
    try:
        op, _ = run(weight_change(cluster, operator_user), operator_user)
    finally:
        racer.join()
    assert (
        "ProxySQL Cluster will not carry the change: a peer loaded the same module in the same second or later, "
        "and ProxySQL pulls only a newer epoch: proxysql-2 mysql_servers" in op.error
    ), op.error
    wait = op.steps.get(key="sync_wait")
    assert wait.detail["waited_ms"] < 2000  # not the 6 s bound
    # Undone on the origin in a later second than the peer's LOAD: the newer epoch, so the peer pulls the intended
    # state back (in the same second the two would never converge) and the rollback's wait sees it.
    assert op.state == OperationState.ROLLED_BACK, op.error
    assert weights(first) == weights(second) == weights(second, "disk.") == weight_before, (
        weights(first),
        weights(second),
    )
    assert wait.detail["rollback_sync"]["behind"] == {}


def test_the_cluster_page_says_which_way_plans_take(propagating, live_redis, viewer_client):
    from apps.monitoring.tests.test_proxysql_cluster import poll

    cluster, _ = propagating
    poll()
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    panel = page[page.index('id="proxysql-cluster"') : page.index("Hostgroups at runtime")]
    assert (
        'data-sync-mode="propagate">This console\'s plans on these nodes: write one node, wait until every peer '
        "has pulled it"
    ) in panel


@EACH_NODE
@pytest.mark.parametrize(
    "scenario",
    [
        cluster_sync.test_a_switchover_paused_at_its_save_rolls_back_and_the_pending_retry_restores_the_sync,
        cluster_sync.test_a_repair_paused_mid_way_finishes_and_restores_the_sync,
    ],
    ids=["switchover", "repair"],
)
def test_plans_that_hold_do_so_on_a_propagating_cluster_each_node_paused(
    propagating, operator_user, live_redis, paused_index, scenario
):
    """Issue 24, done-when, for the cluster set to propagate: a switchover and a repair hold the sync as by default
    (above), so the default's own tests of them, each node paused once, hold on such a cluster too."""
    scenario(propagating, operator_user, live_redis, paused_index)
