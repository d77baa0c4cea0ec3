"""Issue 38's "done when": a harmless rule rolls out to 20 clusters (two ProxySQL doubles each) in 4 waves, run by a
real Celery worker over real Redis, the gate reading the stored polls; at the end every layer of every node equals
its cluster's new version (the drift engine's comparison: memory, runtime and disk of every table)."""

import time

import pytest

from apps.audit.actor import Actor
from apps.configuration import services as config
from apps.configuration.drift import cluster_drift
from apps.rollouts import services
from apps.rollouts.models import ClusterState, Rollout, RolloutState
from apps.rollouts.tests.test_rollouts import LAYERS, RULE, Poller, build_fleet, rule_ids
from apps.rollouts.tests.test_worker import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_harmless_rule_reaches_twenty_clusters_in_four_waves_every_layer_of_every_node(
    proxysql_double_factory, live_redis, celery_broker, celery_factory, redis_server, people, settings
):
    planner, starter = people
    # The 40 doubles are served by one event-loop thread of this test process, beside the poll thread: at a load of
    # 6-10 (four test shards on two cores) a worker's handshake to one of them once took longer than the product's
    # 0.5 s connect deadline ("fleet-13 ... does not answer", CI 2026-12-05). What this test checks is the rollout.
    patient = {"PROXYSQL_CONNECT_TIMEOUT": 3, "PROXYSQL_READ_TIMEOUT": 3}
    for name, value in patient.items():
        setattr(settings, name, value)
    clusters, doubles = build_fleet(proxysql_double_factory, 20, first_port=43000)
    before = {c.pk: config.latest(c).number for c in clusters}
    assert all(cluster_drift(c).in_sync for c in clusters)  # the fleet as adopted: nothing differs yet
    # Short bakes through the rollout's own settings (the defaults are 60 s and 30 s); thresholds as default.
    rollout = services.plan(
        {"edits": [RULE]},
        services.parse_selector(["env=prod"]),
        "1,25%,100%",
        actor=Actor.command(planner),
        reason="route the probe fleet-wide",
        bake_canary_s=1,
        bake_s=0.5,
    )
    plan = services.describe(rollout)
    # wave 0: one node of fleet-0; wave 1: the rest of fleet-0; then up to 25 % of 20 (4 more); then the rest
    assert [len(w["clusters"]) for w in plan["waves"]] == [1, 1, 4, 15]
    assert plan["waves"][0]["node"] == "fleet-0-proxysql-1"

    celery_factory("worker", redis_server, concurrency=1, name="w1@twenty", **patient)
    with Poller():
        started = time.monotonic()
        services.start(rollout, actor=Actor.command(starter))  # queued on commit: the worker runs it
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state != RolloutState.RUNNING, 300, "the rollout ended")
        print(f"20 clusters in 4 waves: {time.monotonic() - started:.1f} s")

    rollout.refresh_from_db()
    assert rollout.state == RolloutState.DONE, rollout.halt_reason
    assert [w["state"] for w in rollout.waves] == ["passed"] * 4
    assert all(w["gate"]["ok"] and w["gate"]["nodes"] for w in rollout.waves)
    assert set(rollout.clusters.values_list("state", flat=True)) == {ClusterState.APPLIED}
    for cluster in clusters:
        version = config.latest(cluster)
        assert version.number == before[cluster.pk] + 1  # changed once
        assert [r["rule_id"] for r in version.content["mysql_query_rules"]] == [77]
        drift = cluster_drift(cluster)
        assert drift.version == version.number and drift.in_sync, [
            (n.node_name, n.error, [f.words for f in n.findings]) for n in drift.nodes
        ]
    for double in doubles:
        assert rule_ids(double) == {layer: [77] for layer in LAYERS}
