"""The judgements scheduled for pending alerts (issue 40, fleet scale): a flapping figure re-opens a pending alert at
every poll, each with its own end of `for`; the rounds schedule at most one judgement per cluster at a time (the
earliest), and a judgement that finds nothing due schedules the next one, so a pending alert still fires at its
`for` end. Rounds here are evaluate.after_poll_round() over synthetic documents (no lab); what they queue is read
in the broker's queue (a real Redis), and the chain is run by a real Celery worker."""

import base64
import json
import re
import time
from datetime import datetime, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.alerts import evaluate
from apps.alerts.models import Alert, AlertState
from apps.fleet.models import Cluster
from apps.monitoring import live
from apps.monitoring.tests import synthetic
from conftest import free_port

from .conftest import set_rule


def queued(r, task):
    """[(first argument, eta epoch or None)] of the tasks named `task` in the broker's queue (no worker takes them)."""
    out = []
    for raw in r.lrange("default", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == task:
            args = json.loads(base64.b64decode(message["body"]))[0]
            eta = message["headers"]["eta"]
            out.append((args[0], datetime.fromisoformat(eta).timestamp() if eta else None))
    return out


def queued_judgements(r):
    """[(cluster id, eta epoch)] of the alerts.judge_cluster tasks in the broker's queue (no worker takes them here)."""
    return queued(r, "alerts.judge_cluster")


def queued_slots(r):
    """[(slot, eta epoch)] of the alerts.judge_due tasks (one per slot: every cluster due by its end judged together)."""
    return queued(r, "alerts.judge_due")


def due_set(r):
    """{cluster id: when its pending alerts' judgement is due} as the due set holds it."""
    return {int(pk): score for pk, score in r.zrange(evaluate.DUE_KEY, 0, -1, withscores=True)}


def slot_eta(when):
    """The eta of the task of the slot that judges an end of `for` at `when`."""
    return evaluate.slot_end(evaluate._slot_of(when)) + 0.02


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

    # Each cluster is due once, at the first opening's end of `for` (was six tasks per cluster: one per opening), and
    # one task judges them all: their ends of `for` fall in one slot (was one task per cluster).
    assert sorted(due_set(live_redis)) == sorted(clusters)
    assert all(abs(when - (start + 30)) < 0.01 for when in due_set(live_redis).values())
    assert queued_judgements(live_redis) == []
    assert [eta for _, eta in queued_slots(live_redis)] == [pytest.approx(slot_eta(start + 30), abs=1e-3)]


@pytest.mark.django_db
def test_an_earlier_end_of_for_is_scheduled_and_held_alerts_keep_their_own(live_redis, celery_broker):
    [cluster], _, _ = synthetic.fleet(1, 1, 1)
    start = time.time()
    evaluate.judge_at(cluster, start + 60, pending_due=True)
    evaluate.judge_at(cluster, start + 60.5, pending_due=True)  # covered by the one at 60 (within the slack)
    evaluate.judge_at(cluster, start + 90, pending_due=True)
    evaluate.judge_at(cluster, start + 30, pending_due=True)  # earlier: scheduled too
    evaluate.judge_at(cluster, start + 45)  # a hold's end: always scheduled, a task of its own
    assert sorted(eta for _, eta in queued_slots(live_redis)) == [
        pytest.approx(slot_eta(start + 30), abs=1e-3),
        pytest.approx(slot_eta(start + 60), abs=1e-3),
    ]
    assert due_set(live_redis) == {cluster: pytest.approx(start + 30, abs=1e-3)}  # the earliest asked for
    assert [(pk, round(eta - start)) for pk, eta in queued_judgements(live_redis)] == [(cluster, 45)]


@pytest.mark.django_db
def test_a_judgement_lost_long_ago_stops_no_later_one(live_redis, celery_broker):
    """A time in the due set long past is a task lost (a worker killed with its eta tasks): a later end of `for` is
    scheduled all the same, after JUDGEMENT_GRACE_S (the sweeps promote what was due meanwhile)."""
    [cluster], _, _ = synthetic.fleet(1, 1, 1)
    start = time.time()
    live_redis.zadd(evaluate.DUE_KEY, {cluster: start - evaluate.JUDGEMENT_GRACE_S - 1})
    evaluate.judge_at(cluster, start + 30, pending_due=True)
    assert due_set(live_redis) == {cluster: pytest.approx(start + 30, abs=1e-3)}
    assert [eta for _, eta in queued_slots(live_redis)] == [pytest.approx(slot_eta(start + 30), abs=1e-3)]


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


def pending_fleet(count, for_s, capture, sooner=()):
    """`count` clusters of one node and one backend, each node's conn_errors pending after one round at `start` (due at
    start + for_s, or start + for_s / 2 on the clusters at these indexes in `sooner`; the judgements scheduled as the
    round's commit does). Returns (clusters, start, refresh): refresh(now) writes the documents again as polled at
    `now`, still erroring (a judgement reads a stale node on its reachability only)."""
    clusters, nodes, servers = synthetic.fleet(count, 1, 1)
    set_rule("conn_errors", for_s=for_s)
    for i in sooner:
        set_rule("conn_errors", Cluster.objects.get(pk=clusters[i]), for_s=for_s / 2)
    docs, backends = synthetic.publish(nodes, servers)
    no_drift = {"ts": time.time(), "version": None, "error": "", "findings": [], "runtime": [], "tables": {}}
    live.write_many(live.DRIFT, {pk: no_drift for pk in nodes})
    start = time.time()
    docs = one_round(docs, backends, start, 5.0, capture)
    assert Alert.objects.filter(rule="conn_errors", state=AlertState.PENDING).count() == count

    def refresh(now):
        live.write_many(live.PROXYSQL, {pk: {**doc, "ts": now} for pk, doc in docs.items()})
        live.write_many(live.BACKEND, {pk: {**doc, "ts": now, "last_ok": now} for pk, doc in backends.items()})

    return clusters, start, refresh


@pytest.mark.django_db
def test_clusters_whose_pending_alerts_end_together_are_judged_by_one_task_in_a_few_queries(
    live_redis, celery_broker, django_capture_on_commit_callbacks
):
    """Issue 40: 1,000 pending alerts ending their `for` together queued 1,000 alerts.judge_cluster tasks, each paying
    a task and its own inventory, situation and open alerts read for ~2 ms of judging. Now one task per slot judges
    every cluster due by then, with the reads shared: 198 clusters judged together cost no more SQL than 2."""
    # `for` 10 and 20 s: the round over 200 clusters (seconds on a loaded machine) ends before either
    clusters, start, refresh = pending_fleet(200, 20, django_capture_on_commit_callbacks, sooner=(0, 1))
    assert queued_judgements(live_redis) == []  # was 200, one per cluster
    slots = sorted(queued_slots(live_redis), key=lambda slot: slot[1])
    assert [eta for _, eta in slots] == [
        pytest.approx(slot_eta(start + 10), abs=1e-3),
        pytest.approx(slot_eta(start + 20), abs=1e-3),
    ]
    assert sorted(due_set(live_redis)) == sorted(clusters)

    refresh(start + 10)
    with CaptureQueriesContext(connection) as two:
        assert evaluate.judge_slot(slots[0][0], now=start + 10.5)["fired"] == 2
    refresh(start + 20)
    with CaptureQueriesContext(connection) as many:
        counts = evaluate.judge_slot(slots[1][0], now=start + 20.5)

    assert counts["fired"] == 198 and counts["clusters"] == 198
    assert set(Alert.objects.filter(rule="conn_errors").values_list("state", flat=True)) == {AlertState.FIRING}
    assert due_set(live_redis) == {}
    # the open alerts of the 198 due nodes read in one statement (was one per cluster)
    assert [len(targets) for targets in open_alert_reads(many.captured_queries)] == [198]
    # pending times, inventory, situation, rule settings, open alerts, the fires' UPDATE, channels: the same few
    # statements however many clusters (one cluster at a time took ~10 each, ~2,000 here; this test's caches are
    # off, a worker's spare the inventory's and the situation's most of the time)
    assert len(many.captured_queries) <= len(two.captured_queries) <= 20, [
        q["sql"][:100] for q in many.captured_queries
    ]


@pytest.mark.django_db
def test_a_slot_with_more_clusters_due_than_a_batch_queues_a_task_for_the_rest(
    live_redis, celery_broker, django_capture_on_commit_callbacks, monkeypatch
):
    monkeypatch.setattr(evaluate, "JUDGEMENT_BATCH_MAX", 3)
    clusters, start, _ = pending_fleet(7, 5, django_capture_on_commit_callbacks)
    [(slot, eta)] = queued_slots(live_redis)
    assert evaluate.judge_slot(slot, now=start + 5.5)["fired"] == 3
    assert len(due_set(live_redis)) == 4
    assert sorted(queued_slots(live_redis), key=str) == sorted(
        [(slot, eta), (slot, None)], key=str
    )  # the rest: at once
    assert evaluate.judge_slot(slot, now=start + 5.6)["fired"] == 3
    assert evaluate.judge_slot(slot, now=start + 5.7)["fired"] == 1
    assert Alert.objects.filter(rule="conn_errors", state=AlertState.FIRING).count() == 7


@pytest.mark.django_db
def test_a_batch_that_dies_leaves_its_clusters_to_the_sweeps(
    live_redis, celery_broker, django_capture_on_commit_callbacks, monkeypatch
):
    """A slot's task takes its clusters out of the due set before judging them (a round opening an alert meanwhile
    schedules its own judgement): if it dies on its way, the rounds' sweeps still promote every due alert."""
    clusters, start, _ = pending_fleet(5, 5, django_capture_on_commit_callbacks)
    [(slot, _)] = queued_slots(live_redis)

    def dies(*args, **kwargs):
        raise RuntimeError("the worker died")

    with monkeypatch.context() as patch:
        patch.setattr(evaluate, "judge_clusters", dies)
        with pytest.raises(RuntimeError):
            evaluate.judge_slot(slot, now=start + 5.5)
    assert due_set(live_redis) == {}
    assert Alert.objects.filter(rule="conn_errors", state=AlertState.PENDING).count() == 5

    evaluate.after_poll_round(live.PROXYSQL, {}, now=start + 6)  # a tick with nothing polled: the sweep
    assert Alert.objects.filter(rule="conn_errors", state=AlertState.FIRING).count() == 5
