"""The product's own operations page nobody (issue 23): ten switchovers in a row, run here through the executor
with the polls and the judgement between them as the poll tasks run them (right after each one ends, while its
hold lasts, and once the hold is over), with a webhook channel attached, send nothing and leave no alert
firing: the status changes they made never count toward flapping. A backend flapping by hand afterwards
(outside any operation) still fires, once, counting only its own changes."""

import time

import pytest

from apps.alerts import notify
from apps.alerts.models import Alert, Channel
from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import status
from apps.operations import drain, switchover
from apps.operations.tests.conftest import run_plan
from lab import demo

from .conftest import firing, firing_all, open_alerts, tick

pytestmark = pytest.mark.django_db


def deliver():
    """What beat does: every group due now is flushed and its message sent (group interval 0: every change)."""
    notify.flush_due(time.time() + 1)


def described(alerts):
    return [(a.rule, a.subject_label, a.state, a.held, a.summary) for a in alerts]


def test_ten_switchovers_page_nobody_and_a_real_flap_still_fires(
    adopted_lab, galera_healthy, live_redis, operator_user, receiver, settings
):
    cluster, (first, second) = adopted_lab
    settings.ALERTS_GROUP_INTERVAL_S = 0  # every change a channel should hear of is sent at once
    Channel.objects.create(name="on-call", kind="webhook", url=receiver.url)
    tick()
    settle = settings.ALERTS_HOLD_SETTLE_POLLS * max(
        cluster.poll_interval_s or settings.MONITOR_DEFAULT_INTERVAL_S,
        cluster.backend_poll_interval_s or settings.MONITOR_DEFAULT_INTERVAL_S,
    )
    started = time.monotonic()
    for i in range(10):
        new = Server.objects.get(port=3312 if i % 2 == 0 else 3311)
        op = run_plan(switchover.plan_switchover(cluster, new, lower_autoinc=True), operator_user)
        assert op.state == "done", op.error
        tick()  # right after it ends: its hold still lasts
        deliver()
        time.sleep(settle + 0.2)
        tick()  # the hold is over: what the switchover did must not count now either
        deliver()
        assert not firing_all(), (i, described(open_alerts()))
    assert time.monotonic() - started < 120
    assert receiver.got == [], receiver.messages()
    assert not Alert.objects.filter(fired_at__isnull=False).exists(), described(Alert.objects.all())

    # A real flap of the old writer (the backend every switchover changed), outside any operation (after the
    # first poll past the last one's end, at the latest when a node not polled since would be stale): four
    # changes of its reader row, each seen by a poll, counted alone.
    interval = cluster.poll_interval_s or settings.MONITOR_DEFAULT_INTERVAL_S
    time.sleep(max(0, op.finished_at.timestamp() + max(settle, status.STALE_FACTOR * interval) + 0.2 - time.time()))
    node = ProxySQLNode.objects.get(admin_port=first.port)
    for value in ("OFFLINE_SOFT", "ONLINE", "OFFLINE_SOFT", "ONLINE"):
        demo.admin_sql(
            first.port,
            f"UPDATE mysql_servers SET status='{value}' WHERE hostgroup_id=101 AND port=3311",
            "LOAD MYSQL SERVERS TO RUNTIME",
            user=first.user,
            password=first.password,
        )
        tick(["proxysql"])
    deliver()
    [flap] = firing("backend_flapping")
    assert flap.node == node and "127.0.0.1:3311 changed status 4 times on proxysql-1" in flap.summary, flap.summary
    assert [a.rule for a in firing_all()] == ["backend_flapping"], described(open_alerts())
    [msg] = receiver.messages()
    assert msg["status"] == "firing" and [a["labels"]["alertname"] for a in msg["alerts"]] == ["backend_flapping"]


def test_a_flap_beside_planned_work_still_counts(
    adopted_lab, galera_healthy, live_redis, operator_user, receiver, settings
):
    """Two drains and restores of 3313 change its rows four times, which never count; 3312 flapping by hand right
    after the last restore ends (while the polls are still seeing its end) is not what that work changed: it
    fires, once, and 3313 does not, when the hold is over either."""
    cluster, (first, second) = adopted_lab
    settings.ALERTS_GROUP_INTERVAL_S = 0
    Channel.objects.create(name="on-call", kind="webhook", url=receiver.url)
    interval = cluster.poll_interval_s or settings.MONITOR_DEFAULT_INTERVAL_S
    settle = settings.ALERTS_HOLD_SETTLE_POLLS * max(
        interval, cluster.backend_poll_interval_s or settings.MONITOR_DEFAULT_INTERVAL_S
    )
    reader = Server.objects.get(port=3313)
    tick()
    for plan in (drain.plan_drain, drain.plan_restore, drain.plan_drain, drain.plan_restore):
        op = run_plan(
            plan(Server.objects.get(pk=reader.pk), **({"drain_timeout_ms": 2000} if plan is drain.plan_drain else {})),
            operator_user,
        )
        assert op.state == "done", op.error
        tick()
        deliver()
    for value in ("OFFLINE_SOFT", "ONLINE", "OFFLINE_SOFT", "ONLINE"):
        demo.admin_sql(
            first.port,
            f"UPDATE mysql_servers SET status='{value}' WHERE hostgroup_id=101 AND port=3312",
            "LOAD MYSQL SERVERS TO RUNTIME",
            user=first.user,
            password=first.password,
        )
        tick(["proxysql"])
    assert time.time() < op.finished_at.timestamp() + max(settle, status.STALE_FACTOR * interval)  # beside the work
    deliver()
    [flap] = firing("backend_flapping")
    assert flap.server.port == 3312 and "changed status 4 times on proxysql-1" in flap.summary, flap.summary
    time.sleep(max(0, op.finished_at.timestamp() + settle + 0.2 - time.time()))
    tick()  # the hold is over
    deliver()
    assert [(a.rule, a.server.port) for a in firing_all()] == [("backend_flapping", 3312)], described(open_alerts())
    [msg] = receiver.messages()
    assert [(a["labels"]["alertname"], a["labels"]["subject"]) for a in msg["alerts"]] == [
        ("backend_flapping", "127.0.0.1:3312 on proxysql-1")
    ], msg
