"""The issue's "done when", for real: a Celery worker and beat poll the adopted lab pair in front of the Galera
lab and evaluate the rules after every round; notifications go to a local webhook receiver.

- The writer killed with automatic failover off: one critical notification within seconds, and a resolve
  when the writer is back.
- The same kill during a planned switchover (the old writer crashes while the drain waits, and is back
  before the switchover ends): the alerts are held, none is notified.
- A switchover that fails (the old writer stays down: the catch-up cannot read it, the plan rolls back to
  it): the held alerts outlive it and are released: one notification.
The alert page and the health report show each."""

import re
import time

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.alerts.models import Alert, AlertState, Channel
from apps.audit.actor import Actor
from apps.fleet.models import Server
from apps.operations import services, switchover
from apps.operations.models import Operation
from apps.reports import periods
from apps.reports import services as reports

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout, step=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


@pytest.fixture
def console(adopted_lab, galera_healthy, redis_server, live_redis, celery_broker, celery_factory, receiver):
    """The adopted lab, a webhook channel to the local receiver, a worker (the operation runs in one of its
    processes, polls and notifications in the others) and beat."""
    cluster, doubles = adopted_lab
    Channel.objects.create(name="on-call", kind="webhook", url=receiver.url)
    env = {"MONITOR_SHARDS": 1}
    worker = celery_factory("worker", redis_server, concurrency=3, **env)
    beat = celery_factory("beat", redis_server, **env)
    assert wait_for(lambda: Alert.objects.count() == 0 and _polled(cluster), 30), "the worker does not poll the lab"
    time.sleep(3)  # a few rounds of a healthy cluster
    assert receiver.got == [] and not Alert.objects.exists(), [a.summary for a in Alert.objects.all()]
    yield cluster, doubles, galera_healthy, receiver
    for proc in (worker, beat):
        proc.log.seek(0)
        print(proc.log.read()[-2500:])


def _polled(cluster):
    from apps.monitoring import live

    docs = live.read_many(live.BACKEND, list(cluster.servers.values_list("pk", flat=True)))
    return docs and all(d and d.get("ok") and time.time() - d["ts"] < 5 for d in docs.values())


def alert_names(message, status):
    return {a["labels"]["alertname"] for a in message["alerts"] if a["status"] == status}


def described(messages):
    """Each message as its status and its alerts' (status, name, subject, summary): what a failed count saw."""
    return [
        (
            m["status"],
            [
                (a.get("status"), a["labels"]["alertname"], a["labels"].get("subject"), a["annotations"].get("summary"))
                for a in m["alerts"]
            ],
        )
        for m in messages
    ]


def firing(message):
    return [a for a in message["alerts"] if a["status"] == "firing"]


def assert_the_writer_paged_once(messages):
    """One page: writer_none fires in the first message, every later message that lists it firing lists the same
    alerts (same fingerprint: an alert row, one incident) and each of them resolves. A later message re-lists a
    group's alerts still firing: the two nodes' writer_none alerts can resolve a poll apart, and the first resolve
    (a critical alert's, sent at once) lists the other one, still firing: the same incident, not a new page.
    Any alert told firing for the first time after the page must be ProxySQL's SHUNNED rows of 3311: when the
    writer was down longer than backend_shunned's 30 s `for` (a slow rejoin on a loaded machine) they fire too
    and stay until ProxySQL unshuns it a few seconds after it answers, a distinct, true fact.
    Returns those later new alerts as (name, summary)."""
    paged = {a["fingerprint"] for a in firing(messages[0])}
    writer = {a["fingerprint"] for a in firing(messages[0]) if a["labels"]["alertname"] == "writer_none"}
    assert writer, described(messages)
    told_later = [a for m in messages[1:] for a in firing(m) if a["labels"]["alertname"] == "writer_none"]
    assert {a["fingerprint"] for a in told_later} <= writer, described(messages)
    resolved = {a["fingerprint"] for m in messages[1:] for a in m["alerts"] if a["status"] == "resolved"}
    assert writer <= resolved, described(messages)
    later = [
        (a["labels"]["alertname"], a["annotations"]["summary"])
        for m in messages[1:]
        for a in firing(m)
        if a["fingerprint"] not in paged
    ]
    assert all(name == "backend_shunned" and "127.0.0.1:3311 is SHUNNED" in summary for name, summary in later), (
        described(messages)
    )
    return later


def alerts_page(client, viewer_user):
    client.force_login(viewer_user)
    return client.get(reverse("alerts:list") + "?state=all").content.decode()


def report_of(cluster):
    report = reports.build_report(cluster, "daily", periods.rolling("daily", timezone.now()), actor=Actor.system())
    return report.data["clusters"][0]["alerts"], report


def test_killing_the_writer_pages_once_and_resolves_when_it_is_back(console, client, viewer_user):
    cluster, doubles, lab, receiver = console
    killed = time.monotonic()
    lab.kill(1)
    assert wait_for(lambda: receiver.got, 20), [a.summary for a in Alert.objects.all()]
    seconds = time.monotonic() - killed
    print(f"writer killed -> first notification at the webhook: {seconds:.1f} s")
    assert seconds < 12
    [msg] = receiver.messages()
    assert msg["status"] == "firing" and msg["commonLabels"]["severity"] == "critical"
    assert {a["labels"]["alertname"] for a in msg["alerts"]} == {"writer_none"}
    assert {a["labels"]["subject"] for a in msg["alerts"]} == {
        "writer hostgroup 100 on proxysql-1",
        "writer hostgroup 100 on proxysql-2",
    }
    # The page names the dead writer: unreachable as its poll says, or SHUNNED when the node's sessions made
    # ProxySQL shun it first (a real ProxySQL does so under traffic; the doubles' traffic model too).
    summaries = [a["annotations"]["summary"] for a in msg["alerts"]]
    assert all(re.search(r"127\.0\.0\.1:3311 (SHUNNED|unreachable)", s) for s in summaries), summaries

    lab.start(1)
    lab.wait_synced(1)
    assert wait_for(lambda: len(receiver.got) >= 2 and receiver.messages()[-1]["status"] == "resolved", 20)
    time.sleep(3)
    messages = receiver.messages()
    later = assert_the_writer_paged_once(messages)
    if not later:  # the usual case: the writer's resolve (or the two nodes' resolves) are the only other messages
        assert messages[-1]["status"] == "resolved", described(messages)
        assert all({a["labels"]["alertname"] for a in m["alerts"]} == {"writer_none"} for m in messages[1:]), described(
            messages
        )

    page = alerts_page(client, viewer_user)
    assert page.count('data-rule="writer_none" data-state="resolved"') == 2
    section, report = report_of(cluster)
    assert section["by_severity"].get("critical", 0) >= 2 and section["notified"] >= 2 and section["held_cleared"] == 0
    assert "Writer hostgroup without a usable ONLINE server" in report.html


def _switchover_waiting_on_its_drain(cluster, doubles, operator_user):
    """A switchover 3311 -> 3312 run by the worker, held in its drain: a connection stays in use on the old
    writer (on both nodes) until the test lets it go."""
    for d in doubles:
        d.traffic.set_server(100, "127.0.0.1", 3311, conn_used=2)
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), drain_timeout_ms=60_000)
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user))  # enqueued: a worker process runs it
    assert wait_for(
        lambda: Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists(), 20
    )
    return op


def _let_the_drain_finish(doubles):
    for d in doubles:
        d.traffic.set_server(100, "127.0.0.1", 3311, conn_used=0)


def test_the_same_kill_during_a_planned_switchover_pages_nobody(console, operator_user, client, viewer_user):
    cluster, doubles, lab, receiver = console
    op = _switchover_waiting_on_its_drain(cluster, doubles, operator_user)
    lab.kill(1)  # the old writer crashes while the switchover drains it...
    assert wait_for(lambda: Alert.objects.filter(rule="writer_none", held=True).count() == 2, 15)
    assert wait_for(lambda: Alert.objects.filter(rule="backend_unreachable", held=True).exists(), 15)
    assert "held: operation #" in alerts_page(client, viewer_user)
    lab.start(1)  # ...and is back before the switchover ends
    lab.wait_synced(1)
    _let_the_drain_finish(doubles)
    assert wait_for(lambda: Operation.objects.get(pk=op.pk).finished, 30)
    op.refresh_from_db()
    assert op.state == "done", op.error
    time.sleep(8)  # the hold's settling polls, and more
    assert receiver.got == [], receiver.messages()
    held = list(Alert.objects.filter(was_held=True))
    assert {a.rule for a in held} >= {"writer_none", "backend_unreachable"}
    assert all(a.state == AlertState.RESOLVED and a.fired_at is None and not a.notified for a in held), [
        (a.rule, a.subject_label, a.state, a.held, a.fired_at, a.summary) for a in held
    ]
    assert not Alert.objects.filter(fired_at__isnull=False).exists()

    page = alerts_page(client, viewer_user)
    assert "held during planned work, cleared before it ended (never notified)" in page
    section, report = report_of(cluster)
    assert section["fired"] == 0 and section["held_cleared"] >= 3
    assert (
        'data-alert-row="held"' in report.html and "held during planned work and cleared before it ended" in report.html
    )


def test_a_failed_switchover_pages_once(console, operator_user, client, viewer_user):
    cluster, doubles, lab, receiver = console
    op = _switchover_waiting_on_its_drain(cluster, doubles, operator_user)
    lab.kill(1)  # the old writer crashes and stays down
    assert wait_for(lambda: Alert.objects.filter(rule="writer_none", held=True).count() == 2, 15)
    time.sleep(2)
    assert receiver.got == []
    _let_the_drain_finish(doubles)
    assert wait_for(lambda: Operation.objects.get(pk=op.pk).finished, 30)
    op.refresh_from_db()
    assert op.state == "rolled_back" and op.point_of_no_return is False  # back to the (dead) old writer
    assert wait_for(lambda: receiver.got, 15), [a.summary for a in Alert.objects.all()]
    time.sleep(4)
    [msg] = receiver.messages()
    assert msg["status"] == "firing"
    assert "writer_none" in {a["labels"]["alertname"] for a in msg["alerts"]}
    assert Alert.objects.filter(rule="writer_none", was_held=True, notified=True).count() == 2  # released
    lab.start(1)
    lab.wait_synced(1)
    assert wait_for(lambda: len(receiver.got) >= 2 and receiver.messages()[-1]["status"] == "resolved", 20)
    messages = receiver.messages()
    # The failed switchover's page, once (the switchover held 3311's backend_shunned too, if it fired, and
    # released it with writer_none).
    assert_the_writer_paged_once(messages)
    assert all(a.was_held for a in Alert.objects.filter(rule="backend_shunned", notified=True))

    page = alerts_page(client, viewer_user)
    assert "held during planned work, released when it outlived it" in page
    section, _ = report_of(cluster)
    assert section["released"] >= 2 and section["notified"] >= 2
