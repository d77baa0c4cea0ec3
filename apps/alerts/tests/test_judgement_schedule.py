"""The judgements scheduled for pending alerts (issue 40, fleet scale): a flapping figure re-opens a pending alert at
every poll, each with its own end of `for`; the rounds schedule at most one judgement per cluster at a time (the
earliest), and a judgement that finds nothing due schedules the next one, so a pending alert still fires at its
`for` end. Rounds here are evaluate.after_poll_round() over synthetic documents (no lab); what they queue is read
in the broker's queue (a real Redis), and the chain is run by a real Celery worker."""

import base64
import json
import re
import time
from collections import Counter
from datetime import datetime, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.alerts import evaluate
from apps.alerts.models import Alert, AlertState
from apps.monitoring import live
from apps.monitoring.tests import synthetic
from conftest import free_port

from .conftest import set_rule


def queued_judgements(r):
    """[(cluster id, eta epoch)] of the alerts.judge_cluster tasks in the broker's queue (no worker takes them here)."""
    out = []
    for raw in r.lrange("default", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == "alerts.judge_cluster":
            args = json.loads(base64.b64decode(message["body"]))[0]
            out.append((args[0], datetime.fromisoformat(message["headers"]["eta"]).timestamp()))
    return out


def open_alert_reads(queries):
    """[the targets asked for, sorted] of each read of open alerts in these captured queries: the statement
    evaluate._open_alerts_sql writes ("... active_key IS NOT NULL AND target IN (...)"), its targets quoted."""
    active_key, target = (connection.ops.quote_name(Alert._meta.get_field(f).column) for f in ("active_key", "target"))
    shape = re.compile(rf"{re.escape(active_key)} IS NOT NULL AND {re.escape(target)} IN \(([^)]*)\)")
    return [sorted(re.findall(r"'([^']*)'", m.group(1))) for q in queries if (m := shape.search(q["sql"]))]


def one_round(docs, backends, now, errors, capture=None):
    """A ProxySQL poll round of these nodes at `now`, their figure conn_err_ps at `errors`, then the alert evaluation
    as the poll task runs it (the backends' documents are as fresh, untouched otherwise). Returns the new documents."""
    new = {pk: {**doc, "ts": now, "figures": {**doc["figures"], "conn_err_ps": errors}} for pk, doc in docs.items()}
    live.write_many(live.PROXYSQL, new)
    live.write_many(live.BACKEND, {pk: {**doc, "ts": now, "last_ok": now} for pk, doc in backends.items()})
    if capture is None:
        evaluate.after_poll_round(live.PROXYSQL, {pk: (docs[pk], new[pk]) for pk in new}, now=now)
    else:
        with capture(execute=True):  # the judgements are queued once the round's writes commit
            evaluate.after_poll_round(live.PROXYSQL, {pk: (docs[pk], new[pk]) for pk in new}, now=now)
    return new


@pytest.mark.django_db
def test_a_flapping_fleet_queues_one_judgement_per_cluster(
    live_redis, celery_broker, django_capture_on_commit_callbacks
):
    clusters, nodes, servers = synthetic.fleet(10, 1, 2)
    docs, backends = synthetic.publish(nodes, servers)
    start = time.time()
    for i in range(11):  # 2.5 s apart (conn_errors' `for` is 30 s): six openings of a pending alert per cluster
        docs = one_round(
            docs, backends, start + 2.5 * i, 5.0 if i % 2 == 0 else 0.0, django_capture_on_commit_callbacks
        )
    pending = Alert.objects.filter(rule="conn_errors", state=AlertState.PENDING)
    assert sorted(pending.values_list("cluster_id", flat=True)) == sorted(clusters)
    assert all(abs(a.since.timestamp() - (start + 25)) < 0.01 for a in pending)  # opened again by the last round

    queued = queued_judgements(live_redis)
    assert Counter(cid for cid, _ in queued) == Counter(clusters)  # was six per cluster: one per opening
    assert all(abs(eta - (start + 30)) < 0.1 for _, eta in queued)  # the first opening's end of `for`


@pytest.mark.django_db
def test_an_earlier_end_of_for_is_scheduled_and_held_alerts_keep_their_own(live_redis, celery_broker):
    [cluster], _, _ = synthetic.fleet(1, 1, 1)
    start = time.time()
    evaluate.judge_at(cluster, start + 60, pending_due=True)
    evaluate.judge_at(cluster, start + 60.5, pending_due=True)  # covered by the one at 60 (within the slack)
    evaluate.judge_at(cluster, start + 90, pending_due=True)
    evaluate.judge_at(cluster, start + 30, pending_due=True)  # earlier: scheduled too
    evaluate.judge_at(cluster, start + 45)  # a hold's end: always scheduled
    assert sorted(round(eta - start) for _, eta in queued_judgements(live_redis)) == [30, 45, 60]


@pytest.mark.django_db
def test_redis_down_schedules_every_judgement(live_redis, celery_broker, settings):
    """The record of what is scheduled is lost with Redis: every judgement asked for is queued, as before (here the
    broker is another Redis, still up)."""
    [cluster], _, _ = synthetic.fleet(1, 1, 1)
    broker = live_redis
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    start = time.time()
    for i in range(3):
        evaluate.judge_at(cluster, start + 30 + i, pending_due=True)
    assert len(queued_judgements(broker)) == 3


@pytest.mark.django_db(transaction=True)
def test_a_pending_alert_fires_at_its_end_of_for_through_the_chain(
    redis_server, live_redis, celery_broker, celery_factory
):
    """The first judgement scheduled (for the first opening) finds the alert opened again later not yet due: it
    schedules the next one at that alert's end of `for`, which fires it, with no poll round after the last opening."""
    clusters, nodes, servers = synthetic.fleet(1, 1, 1)
    set_rule("conn_errors", for_s=5)
    docs, backends = synthetic.publish(nodes, servers)
    # The drift watcher's result, as it stores one every 30 s: no drift (the full judgement reads it).
    no_drift = {"ts": time.time(), "version": None, "error": "", "findings": [], "runtime": [], "tables": {}}
    live.write_many(live.DRIFT, {pk: no_drift for pk in nodes})
    worker = celery_factory("worker", redis_server)
    try:
        start = time.time()
        docs = one_round(docs, backends, start, 5.0)  # opened: due at start + 5, a judgement scheduled then
        time.sleep(1)
        docs = one_round(docs, backends, time.time(), 0.0)  # dropped (never fired)
        time.sleep(1.5)
        docs = one_round(docs, backends, time.time(), 5.0)  # opened again, due 2.5 s after the first one's time
        [alert] = Alert.objects.filter(rule="conn_errors")
        assert alert.fires_at.timestamp() - (start + 5) >= 2, "the rounds were too slow for this test's timing"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Alert.objects.get(pk=alert.pk).state == AlertState.PENDING:
            time.sleep(0.2)
        alert.refresh_from_db()
        assert alert.state == AlertState.FIRING
        assert alert.fired_at.timestamp() - alert.fires_at.timestamp() < 1.5  # on time, not at a later poll
    finally:
        worker.log.seek(0)
        print(worker.log.read()[-3000:])


def open_elsewhere(cluster, servers, count):
    """`count` firing alerts on the cluster's backends, as rounds would have opened them (not the judged targets)."""
    now = datetime.now(tz=timezone.utc)
    Alert.objects.bulk_create(
        Alert(
            rule="backend_shunned",
            cluster_id=cluster,
            target=f"s{servers[i % len(servers)]}",
            subject=f"s{servers[i % len(servers)]}:{i}",
            subject_label="a backend",
            severity="warning",
            state=AlertState.FIRING,
            summary="SHUNNED",
            since=now,
            fires_at=now,
            fired_at=now,
            last_seen_at=now,
            active_key=f"backend_shunned|{i}",
        )
        for i in range(count)
    )


@pytest.mark.django_db
@pytest.mark.parametrize("elsewhere", [0, 40])
def test_a_due_judgement_reads_and_judges_only_the_targets_whose_alerts_are_due(
    live_redis, celery_broker, django_assert_num_queries, elsewhere
):
    """Issue 40: a judgement at a pending alert's end of `for` judged the whole cluster, reading every open alert of
    it (a cluster of a hundred open alerts read them all for one due). Now it judges the due alerts' targets, every
    rule of each: the open alerts it reads are theirs, however many the cluster has elsewhere, and those elsewhere
    are left to their own rounds. A judgement that finds nothing due is one query."""
    [cluster], nodes, servers = synthetic.fleet(1, 2, 6)
    set_rule("conn_errors", for_s=5)
    docs, backends = synthetic.publish(nodes, servers)
    no_drift = {"ts": time.time(), "version": None, "error": "", "findings": [], "runtime": [], "tables": {}}
    live.write_many(live.DRIFT, {pk: no_drift for pk in nodes})
    start = time.time()
    one_round(docs, backends, start, 5.0)  # conn_errors pending on both nodes, due at start + 5
    pending = list(Alert.objects.filter(rule="conn_errors", state=AlertState.PENDING))
    assert sorted(a.target for a in pending) == sorted(f"n{pk}" for pk in nodes)
    open_elsewhere(cluster, servers, elsewhere)

    with django_assert_num_queries(1):  # not due yet: what is pending and when, read once; the next one scheduled
        assert evaluate.judge_now(cluster, now=start + 2, pending_due=True) == {}

    with CaptureQueriesContext(connection) as captured:  # the SQL it runs says which targets' open alerts it read
        counts = evaluate.judge_now(cluster, now=start + 5.5, pending_due=True)

    # the due alerts' targets only, in one read: not the targets of the alerts open elsewhere
    assert open_alert_reads(captured.captured_queries) == [sorted(f"n{pk}" for pk in nodes)]
    assert counts["fired"] == 2
    assert set(Alert.objects.filter(rule="conn_errors").values_list("state", flat=True)) == {AlertState.FIRING}
    assert Alert.objects.filter(rule="backend_shunned", state=AlertState.FIRING).count() == elsewhere
