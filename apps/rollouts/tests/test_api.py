"""/api/v1/rollouts/: an operator plans (201: the exact clusters per wave), a viewer may read but not write, the
planner may not start a two-person cluster's rollout (409, audited refusal leaves it planned), a second operator
starts it and a real Celery worker runs it to done; a planned rollout aborted ends aborted."""

import time

import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster
from apps.rollouts.models import Rollout, RolloutState
from apps.rollouts.tests.test_rollouts import LAYERS, RULE, Poller, build_fleet, rule_ids
from apps.api.tests.test_writes import client_of, expect

pytestmark = pytest.mark.django_db(transaction=True)


def test_plan_start_follow_abort_through_the_api(
    proxysql_double_factory, live_redis, celery_broker, celery_factory, redis_server, people, viewer_user
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=46000)
    Cluster.objects.filter(pk=clusters[0].pk).update(two_person_rule=True)
    api, second, viewer = client_of(planner), client_of(starter, "s"), client_of(viewer_user, "v")
    request = {
        "reason": "a rule to the prod fleet",
        "select": {"tags": {"env": "prod"}},
        "waves": "1,100%",
        "edits": [RULE],
        "bake_canary_s": 0.5,
        "bake_s": 0.5,
    }
    expect(viewer.post("/api/v1/rollouts/", request), 403)
    expect(api.post("/api/v1/rollouts/", {**request, "waves": "0"}), 409)
    plan = expect(api.post("/api/v1/rollouts/", request), 201)
    assert [[c["name"] for c in w["clusters"]] for w in plan["waves"]] == [["fleet-0"], ["fleet-0"], ["fleet-1"]]
    assert expect(viewer.get(f"/api/v1/rollouts/{plan['rollout']}/"), 200)["state"] == "planned"

    refused = expect(api.post(f"/api/v1/rollouts/{plan['rollout']}/start/"), 409)
    assert "two people" in str(refused)
    celery_factory("worker", redis_server, concurrency=1, name="w1@api")
    with Poller():
        started = expect(second.post(f"/api/v1/rollouts/{plan['rollout']}/start/"), 200)
        assert started["state"] == "running"
        deadline = time.monotonic() + 120
        while Rollout.objects.get(pk=plan["rollout"]).state == RolloutState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.3)
    done = expect(viewer.get(f"/api/v1/rollouts/{plan['rollout']}/"), 200)
    assert done["state"] == "done", done
    for double in doubles:
        assert rule_ids(double) == {layer: [77] for layer in LAYERS}

    again = expect(
        api.post("/api/v1/rollouts/", {**request, "edits": [{**RULE, "row": {**RULE["row"], "rule_id": 78}}]}), 201
    )
    aborted = expect(second.post(f"/api/v1/rollouts/{again['rollout']}/abort/"), 200)
    assert aborted["state"] == "aborted"
    expect(second.post(f"/api/v1/rollouts/{again['rollout']}/abort/"), 409)
    assert [r["rollout"] for r in expect(viewer.get("/api/v1/rollouts/"), 200)][:2] == [
        again["rollout"],
        plan["rollout"],
    ]
    assert AuditEvent.objects.filter(action="rollout started", actor__startswith=starter.username).count() == 1
