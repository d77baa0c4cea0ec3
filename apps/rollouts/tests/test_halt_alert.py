"""A rollout halted by its gate raises the alert rollout_halted (apps/alerts/events.py): firing at once, naming the
gate and its figures, delivered to the channels as any alert (a local webhook receiver records what it got), and
resolved when the rollout is aborted."""

import time

import pytest

from apps.alerts import notify
from apps.alerts.models import Alert, AlertState, Channel, Notification
from apps.alerts.tests.conftest import Receiver
from apps.audit.actor import Actor
from apps.rollouts import services
from apps.rollouts.models import Rollout, RolloutState

from .test_rollouts import RULE, Poller, build_fleet, once_baking

pytestmark = pytest.mark.django_db(transaction=True)


def deliver_due():
    """What beat and the tasks do: every due group flushed, each new message delivered once."""
    before = set(Notification.objects.values_list("pk", flat=True))
    notify.flush_due(time.time() + 60)
    out = list(Notification.objects.exclude(pk__in=before).order_by("pk"))
    for n in out:
        notify.attempt(n.pk)
    return out


def test_a_halt_by_the_gate_alerts_with_the_gate_and_its_figures_and_the_abort_resolves_it(
    proxysql_double_factory, live_redis, people
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=50000)
    receiver = Receiver()
    try:
        Channel.objects.create(name="ops-hook", kind="webhook", url=receiver.url)
        rollout = services.plan(
            {"edits": [RULE]},
            {"tags": [["env", "prod"]]},
            "1,100%",
            actor=Actor.command(planner),
            reason="a rule that hurts",
            bake_canary_s=8,
            bake_s=0.5,
        )

        def hurt():
            doubles[0].traffic.set_global("Client_Connections_aborted", 100000)

        with Poller(interval=0.3):
            hurting = once_baking(rollout, 0, hurt)
            services.start(rollout, actor=Actor.command(starter), enqueue=False)
            assert services.run(rollout.pk) == RolloutState.HALTED
            hurting.join(5)

        [alert] = Alert.objects.filter(rule="rollout_halted")
        assert alert.state == AlertState.FIRING and alert.cluster == clusters[0] and alert.severity == "critical"
        assert alert.subject == f"ro{rollout.pk}" and alert.subject_label == f"{rollout}: a rule that hurts"
        assert alert.summary.startswith(
            f"{rollout} halted: wave 0 failed its health gate: the errors gate on fleet-0-proxysql-1: "
        ), alert.summary
        assert "errors/s since the change" in alert.summary and "before (threshold +1)" in alert.summary
        [gate] = alert.details["gates"]
        assert gate["gate"] == "errors" and gate["node"] == "fleet-0-proxysql-1" and gate["threshold"] == 1.0
        assert gate["after"] > gate["threshold"] + (gate["before"] or 0)
        assert alert.summary.endswith(Rollout.objects.get(pk=rollout.pk).halt_reason)  # the page says the same

        [sent] = deliver_due()
        assert sent.status == "firing"
        [msg] = receiver.messages()
        [told] = msg["alerts"]
        assert told["labels"]["alertname"] == "rollout_halted" and told["labels"]["cluster"] == "fleet-0"
        assert told["annotations"]["summary"] == alert.summary
        assert told["annotations"]["title"] == "A fleet rollout halted"

        services.abort(Rollout.objects.get(pk=rollout.pk), actor=Actor.command(starter), enqueue=False)
        alert.refresh_from_db()
        assert alert.state == AlertState.RESOLVED and alert.active_key is None
        [resolved] = deliver_due()
        assert resolved.status == "resolved" and receiver.messages()[-1]["status"] == "resolved"
    finally:
        receiver.down()
