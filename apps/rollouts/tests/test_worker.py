"""A rollout run by a real Celery worker (real Redis), the worker killed (SIGKILL, its whole process group) while a
wave bakes, a second worker started and the rollout taken up by resume_stale (what beat runs): it ends as a run
without the kill ends, every cluster changed once (one new version), every layer of every node the new one."""

import os
import signal
import time

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import services as config
from apps.rollouts import services
from apps.rollouts.models import ClusterState, Rollout, RolloutState
from apps.rollouts.tests.test_rollouts import LAYERS, RULE, Poller, build_fleet, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"not within {timeout} s: {what}")


def test_a_worker_killed_while_a_wave_bakes_and_the_rollout_resumed_ends_as_without_the_kill(
    proxysql_double_factory, live_redis, celery_broker, celery_factory, redis_server, people
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 4, first_port=45000)
    before = {c.pk: config.latest(c).number for c in clusters}
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,1,100%",
        actor=Actor.command(planner),
        reason="through a worker",
        bake_canary_s=0.5,
        bake_s=4,
    )
    first = celery_factory("worker", redis_server, concurrency=1, name="w1@rollouts")
    with Poller():
        services.start(rollout, actor=Actor.command(starter))  # queued on commit: the worker runs it
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).waves[1]["state"] == "baking", 120, "wave 1 baking")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.RUNNING
        celery_factory("worker", redis_server, concurrency=1, name="w2@rollouts")
        time.sleep(1.2)
        assert services.resume_stale(stale_after_s=1) == [rollout.pk]
        assert services.resume_stale(stale_after_s=1) == []  # claimed once
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state != RolloutState.RUNNING, 120, "the rollout ended")

    rollout.refresh_from_db()
    assert rollout.state == RolloutState.DONE, rollout.halt_reason
    assert [w["state"] for w in rollout.waves] == ["passed"] * 4  # a node of fleet-0, its rest, fleet-1, the rest
    assert set(rollout.clusters.values_list("state", flat=True)) == {ClusterState.APPLIED}
    for cluster in clusters:
        assert config.latest(cluster).number == before[cluster.pk] + 1  # changed once, not twice
    for double in doubles:
        assert rule_ids(double) == {layer: [77] for layer in LAYERS}
    assert AuditEvent.objects.filter(action="rollout taken up again", target=str(rollout)).count() == 1
