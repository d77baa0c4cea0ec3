"""Wave 0 of a rollout is ONE ProxySQL node (issue 38): on the double's ProxySQL Cluster model (adopted_cluster_lab:
two doubles pulling from each other at ProxySQL's defaults), the canary's operation holds the sync, so its peer does
not pull the canary's change while it bakes; the rest of the cluster is written by that same change set after the
bake, and a canary that fails its gate is rolled back by the executor, the sync restored, nothing pulled."""

import threading
import time

import pytest

from apps.audit.actor import Actor
from apps.configuration import services as config
from apps.operations.models import Operation
from apps.operations.tests.test_cluster_sync import PULLS_DUE_S, assert_cooperated, pulls_since, sql, sync_settings
from apps.rollouts import services
from apps.rollouts.models import ClusterState, Rollout, RolloutState

from .test_rollouts import LAYERS, RULE, Poller, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)


class Readings(list):
    """[(canary's, peer's), ...] with `at`: the monotonic time of each reading."""

    def __init__(self):
        super().__init__()
        self.at = []


def watch_canary_bake(rollout, canary, peer):
    """A thread that reads both nodes' runtime rules while wave 0 bakes: Readings [(canary's, peer's), ...]."""
    seen = Readings()

    def read():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = Rollout.objects.get(pk=rollout.pk).waves[0]["state"]
            if state == "baking":
                reading, at = (rule_ids(canary)["runtime"], rule_ids(peer)["runtime"]), time.monotonic()
                # kept only when the bake was still on after it: a reading that straddles the bake's end may show
                # the next wave's own apply on the peer, not a pull
                if Rollout.objects.get(pk=rollout.pk).waves[0]["state"] == "baking":
                    seen.append(reading)
                    seen.at.append(at)
            elif seen:
                return
            time.sleep(0.25)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, seen


def plan(cluster, user, bake_canary_s):
    return services.plan(
        {"edits": [RULE]},
        {"names": [cluster.name]},
        "1",
        actor=Actor.command(user),
        reason="the canary first",
        bake_canary_s=bake_canary_s,
        bake_s=0.5,
    )


def test_the_canary_is_one_node_its_peer_does_not_pull_it_while_it_bakes_then_the_rest_gets_it(
    adopted_cluster_lab, live_redis, people, client
):
    planner, starter = people
    cluster, (canary, peer) = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in (canary, peer)}
    version = config.latest(cluster).number
    rollout = plan(cluster, planner, bake_canary_s=PULLS_DUE_S + 1.5)  # longer than a peer needs to pull
    waves = services.describe(rollout)["waves"]
    assert [(w["canary"], w["node"], w["rest_of_canary"], [c["name"] for c in w["clusters"]]) for w in waves] == [
        (True, "proxysql-1", False, ["galera-lab"]),
        (False, None, True, ["galera-lab"]),
    ]

    started = time.time()
    with Poller(interval=0.3):
        watcher, seen = watch_canary_bake(rollout, canary, peer)
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.DONE
        watcher.join(5)
    assert len(seen) >= 10 and set(map(str, seen)) == {str(([77], []))}, seen  # the peer never had it while baking
    rollout.refresh_from_db()
    assert [w["state"] for w in rollout.waves] == ["passed", "passed"]
    assert list(rollout.waves[0]["gate"]["nodes"]) == ["proxysql-1"] and rollout.waves[0]["gate"]["ok"]
    op = Operation.objects.get(kind="rollout_canary")
    assert [s.key for s in op.steps.order_by("index")][:4] == ["sync_hold", "apply_canary", "canary_bake", "apply"]
    assert op.steps.order_by("index").last().key == "sync_restore"
    client.force_login(planner)  # the operation's page shows it as any other: the bake among its steps
    shown = client.get(op.get_absolute_url())
    assert shown.status_code == 200 and "Bake the canary" in shown.content.decode()
    assert "rollout canary" in shown.content.decode()
    assert config.latest(cluster).number == version + 1  # one version, once every node runs it
    for double in (canary, peer):
        assert rule_ids(double) == {layer: [77] for layer in LAYERS}
    time.sleep(PULLS_DUE_S)
    assert_cooperated((canary, peer), started, before)  # the sync restored in every layer, nothing pulled


def test_a_canary_failing_its_gate_is_rolled_back_and_its_peer_never_pulled_it(adopted_cluster_lab, live_redis, people):
    planner, starter = people
    cluster, (canary, peer) = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in (canary, peer)}
    layers_before = [rule_ids(d) for d in (canary, peer)]
    version = config.latest(cluster)
    rollout = plan(cluster, planner, bake_canary_s=30)
    hurt_at = []

    def hurt_once_the_peer_would_have_pulled():
        time.sleep(PULLS_DUE_S)
        canary.traffic.set_global("Client_Connections_aborted", 100000)
        hurt_at.append(time.monotonic())

    started = time.time()
    with Poller(interval=0.3):
        watcher, seen = watch_canary_bake(rollout, canary, peer)
        hurting = threading.Thread(
            target=lambda: (wait_baking(rollout), hurt_once_the_peer_would_have_pulled()), daemon=True
        )
        hurting.start()
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.HALTED
        done_at = time.monotonic()
        watcher.join(5)
        hurting.join(5)
    print(f"canary: first errors to rollback done {done_at - hurt_at[0]:.2f} s")
    assert done_at - hurt_at[0] < 5
    # the peer never had it; the canary had it for the whole wait (then its rollback, while wave 0 still reads baking)
    assert {str(p) for _, p in seen} == {"[]"} and sum(c == [77] for c, _ in seen) >= 10, seen
    rollout.refresh_from_db()
    assert rollout.halt_reason.startswith("wave 0 failed its health gate: the errors gate on proxysql-1: "), (
        rollout.halt_reason
    )
    assert [w["state"] for w in rollout.waves] == ["rolled_back", "pending"]
    assert rollout.clusters.get().state == ClusterState.ROLLED_BACK
    assert Operation.objects.get(kind="rollout_canary").state == "rolled_back"
    assert config.latest(cluster) == version  # nothing recorded: the canary's operation rolled back
    assert [rule_ids(d) for d in (canary, peer)] == layers_before
    time.sleep(PULLS_DUE_S)
    assert_cooperated((canary, peer), started, before)  # the sync restored, nothing pulled, both equal
    assert pulls_since((canary, peer), started) == {canary.port: [], peer.port: []}
    assert sql(peer, "SELECT COUNT(*) FROM runtime_mysql_query_rules WHERE rule_id=77") == [("0",)]


def wait_baking(rollout):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Rollout.objects.get(pk=rollout.pk).waves[0]["state"] != "baking":
        time.sleep(0.1)
