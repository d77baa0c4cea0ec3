"""Issue 38 §3 and §1: a selected cluster that another operation holds is skipped with the reason, or waited for up
to a limit (then the rollout halts); clusters are selected by the ProxySQL version their nodes run (as the polls
read it: fleet/node_versions.py)."""

import threading
import time

import pytest

from apps.audit.actor import Actor
from apps.fleet.models import Cluster, ProxySQLNode
from apps.monitoring import pollers
from apps.operations import locks
from apps.operations.choices import OperationState
from apps.operations.models import Operation
from apps.plans.vocabulary import Plan
from apps.rollouts import services
from apps.rollouts.models import ClusterState, RolloutState

from .test_rollouts import LAYERS, RULE, Poller, build_fleet, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)


def hold(cluster):
    """Another operation holding the cluster's lock (as a running switchover would)."""
    op = Operation.objects.create(
        kind="switchover",
        cluster=cluster,
        title="a switchover elsewhere",
        actor="olga",
        state=OperationState.RUNNING,
        plan=Plan("switchover", cluster.pk, "t", [], []).to_json(),
    )
    locks.acquire(op, ttl_s=120)
    return op


def test_a_busy_cluster_is_skipped_with_the_reason_or_waited_for_up_to_the_limit(
    proxysql_double_factory, live_redis, people
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 3, first_port=52000)
    busy = hold(clusters[1])
    skipping = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="skip the busy one",
        bake_canary_s=0.3,
        bake_s=0.3,
        when_busy="skip",
    )
    with Poller():
        services.start(skipping, actor=Actor.command(starter), enqueue=False)
        assert services.run(skipping.pk) == RolloutState.DONE
    states = {rc.cluster.name: (rc.state, rc.error) for rc in skipping.clusters.select_related("cluster")}
    assert states["fleet-0"][0] == states["fleet-2"][0] == ClusterState.APPLIED
    assert states["fleet-1"] == (ClusterState.SKIPPED, f"skipped: #{busy.pk} a switchover elsewhere (by olga)"), states
    assert [rule_ids(d)["disk"] for d in doubles] == [[77], [77], [], [], [77], [77]]

    # waited for: the other operation ends 3 s later, then fleet-1 gets the change
    other = {**RULE, "row": {**RULE["row"], "rule_id": 78}}
    waiting = services.plan(
        {"edits": [other]},
        {"names": ["fleet-1"]},
        "1",
        actor=Actor.command(planner),
        reason="wait for the busy one",
        bake_canary_s=0.3,
        bake_s=0.3,
        busy_wait_s=30,
    )
    threading.Timer(3, lambda: locks.release(busy)).start()
    started = time.monotonic()
    with Poller():
        services.start(waiting, actor=Actor.command(starter), enqueue=False)
        assert services.run(waiting.pk) == RolloutState.DONE
    assert time.monotonic() - started >= 2.5
    assert rule_ids(doubles[2]) == {layer: [78] for layer in LAYERS}

    # waited for too long: the rollout halts, saying who holds it
    third = hold(clusters[2])
    limited = services.plan(
        {"edits": [other]},
        {"names": ["fleet-2"]},
        "1",
        actor=Actor.command(planner),
        reason="wait a second only",
        bake_canary_s=0.3,
        bake_s=0.3,
        busy_wait_s=1,
    )
    services.start(limited, actor=Actor.command(starter), enqueue=False)
    assert services.run(limited.pk) == RolloutState.HALTED
    limited.refresh_from_db()
    assert limited.halt_reason == f"wave 0: fleet-2: still busy after 1 s: #{third.pk} a switchover elsewhere (by olga)"
    assert rule_ids(doubles[4])["runtime"] == [77]  # untouched by the halted one


def test_clusters_are_selected_by_the_proxysql_version_their_nodes_run(proxysql_double_factory, people):
    planner, _ = people
    build_fleet(proxysql_double_factory, 2, first_port=53000)
    build_fleet(lambda n: proxysql_double_factory(n, version="2.5"), 1, prefix="old", first_port=54000)
    pollers.proxysql_round(list(ProxySQLNode.objects.select_related("cluster")), threads=4)  # reads admin-version
    versions = dict(ProxySQLNode.objects.values_list("name", "version"))
    assert versions["old-0-proxysql-1"].startswith("2.5.") and not versions["fleet-0-proxysql-1"].startswith("2.5.")
    newer = versions["fleet-0-proxysql-1"].split(".")[0] + "." + versions["fleet-0-proxysql-1"].split(".")[1]

    selector = services.parse_selector([f"version={newer}"])
    assert [c.name for c in services.select(selector)] == ["fleet-0", "fleet-1"]
    assert [c.name for c in services.select(services.parse_selector(["version=2.5"]))] == ["old-0"]
    # a mixed cluster runs neither version whole
    ProxySQLNode.objects.filter(name="fleet-1-proxysql-2").update(version="2.5.5-10-g195bd70")
    assert [c.name for c in services.select(selector)] == ["fleet-0"]
    with pytest.raises(services.Refused, match="no cluster matches"):
        services.select(services.parse_selector(["version=3.0"]))
    rollout = services.plan({"edits": [RULE]}, selector, "1", actor=Actor.command(planner), reason="2.7 only")
    assert set(rollout.clusters.values_list("cluster__name", flat=True)) == {"fleet-0"}
    assert Cluster.objects.count() == 3
