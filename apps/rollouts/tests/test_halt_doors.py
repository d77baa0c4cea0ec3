"""An operator's halt through the API (POST /api/v1/rollouts/<id>/halt/ with a reason) and the command line
(`manage.py rollout halt N --user NAME --reason ...`), each during the canary's bake: the canary fails its gate
with the operator's words, is rolled back (every layer of every node as before), the halt is audited with its door,
and what must be refused is (a viewer, no reason, a rollout that is not running)."""

import io

import pytest
from django.core.management import call_command

from apps.api.tests.test_writes import client_of, expect
from apps.audit.actor import Actor
from apps.audit.models import ActorKind, AuditEvent
from apps.rollouts import services
from apps.rollouts.models import Rollout, RolloutState

from .test_rollouts import LAYERS, RULE, Poller, build_fleet, once_baking, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)


def halted_untouched(rollout, doubles, said):
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.HALTED
    assert rollout.halt_reason == said, rollout.halt_reason
    assert rollout.waves[0]["state"] == "rolled_back" and rollout.waves[0]["gate"]["failed"][0]["gate"] == "operator"
    assert [rule_ids(d) for d in doubles] == [{layer: [] for layer in LAYERS}] * len(doubles)


def test_an_operator_halts_a_baking_canary_through_the_api(proxysql_double_factory, live_redis, people, viewer_user):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=55000)
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="halted through the API",
        bake_canary_s=20,
        bake_s=0.5,
    )
    api, viewer = client_of(starter), client_of(viewer_user, "v")
    url = f"/api/v1/rollouts/{rollout.pk}/halt/"
    expect(api.post(url, {"reason": "too early"}), 409)  # planned, not running: nothing to halt
    answers = []

    def halt():
        answers.append(viewer.post(url, {"reason": "a viewer may not"}))
        answers.append(api.post(url, {"reason": "   "}))
        answers.append(api.post(url, {}))
        answers.append(api.post(url, {"reason": "p99 doubled on the canary"}))

    with Poller():
        halting = once_baking(rollout, 0, halt)
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.HALTED  # well before the 20 s bake
        halting.join(10)
    viewer_no, blank, missing, done = answers
    expect(viewer_no, 403)
    assert expect(blank, 400)["error"]["fields"]["reason"] and expect(missing, 400)["error"]["fields"]["reason"]
    assert expect(done, 200)["state"] == "running"  # asked; the worker acts on it at its next gate reading
    halted_untouched(rollout, doubles, f"wave 0: halted by {starter.username}: p99 doubled on the canary")
    [event] = AuditEvent.objects.filter(action="rollout halt requested", target=str(rollout))
    assert event.actor_kind == ActorKind.API and event.actor_user_id == starter.pk
    expect(api.post(url, {"reason": "again"}), 409)  # ended: refused, nothing changes
    assert AuditEvent.objects.filter(action="rollout halt requested").count() == 1


def test_an_operator_halts_a_baking_canary_from_the_command_line(proxysql_double_factory, live_redis, people):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=56000)
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="halted from the command line",
        bake_canary_s=20,
        bake_s=0.5,
    )
    said = []

    def command(*args):
        out = io.StringIO()
        with pytest.raises(SystemExit) as ended:
            call_command("rollout", *args, stdout=out)
        said.append((ended.value.code, out.getvalue()))

    def halt():
        command("halt", str(rollout.pk), "--user", starter.username)  # no reason: refused
        command("halt", str(rollout.pk), "--user", starter.username, "--reason", "the canary's errors look wrong")

    with Poller():
        halting = once_baking(rollout, 0, halt)
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.HALTED
        halting.join(10)
    (refused, refused_out), (asked, asked_out) = said
    assert refused == 2 and "reason: say why you halt it" in refused_out, refused_out
    assert asked == 1 and f"{rollout}: running" in asked_out, asked_out  # asked; not ended when it answered
    halted_untouched(rollout, doubles, f"wave 0: halted by {starter.username}: the canary's errors look wrong")
    [event] = AuditEvent.objects.filter(action="rollout halt requested", target=str(rollout))
    assert event.actor_kind == ActorKind.COMMAND
    command("status", str(rollout.pk))
    assert said[-1][0] == 3 and "halted: wave 0: halted by" in said[-1][1]  # halted: the CI job's exit code
    assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.HALTED
