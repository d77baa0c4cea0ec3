"""What the transitions read of the open alerts after every poll round (issue 40: about a thousand rows a round): one
query for every open alert of the round's targets; a pending alert's hold and due time as stored, a firing one's not
read (no transition of a firing alert reads them), a resolved one not at all."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.alerts import evaluate
from apps.alerts.models import Alert
from apps.fleet.models import Cluster

pytestmark = pytest.mark.django_db


def test_open_alerts_are_read_in_one_query_with_the_pending_ones_hold_and_time(django_assert_num_queries):
    cluster = Cluster.objects.create(name="alpha", writer_hostgroup=10, reader_hostgroup=20)
    now = timezone.now().replace(microsecond=0)
    common = dict(
        rule="conn_errors",
        cluster=cluster,
        severity="warning",
        subject_label="proxysql-1",
        since=now - timedelta(minutes=5),
        last_seen_at=now,
    )
    Alert.objects.create(
        target="n1",
        subject="firing",
        state="firing",
        fired_at=now,
        summary="3 errors/s",
        fires_at=now - timedelta(minutes=4),
        active_key="f",
        was_held=True,
        **common,
    )
    Alert.objects.create(
        target="n1",
        subject="pending",
        state="pending",
        summary="2 errors/s",
        fires_at=now + timedelta(seconds=30),
        active_key="p",
        **common,
    )
    held = Alert.objects.create(
        target="n2",
        subject="held",
        state="pending",
        held=True,
        was_held=True,
        summary="1/s",
        fires_at=now + timedelta(seconds=60),
        active_key="h",
        **common,
    )
    Alert.objects.create(
        target="n2",
        subject="resolved",
        state="resolved",
        fired_at=now,
        resolved_at=now,
        summary="0/s",
        fires_at=now,
        **common,
    )

    with django_assert_num_queries(1):
        active, by_target = evaluate._open_alerts(["n1", "n2", "n3"])

    assert sorted(active) == [("conn_errors", "firing"), ("conn_errors", "held"), ("conn_errors", "pending")]
    assert {t: sorted(r.subject for r in rows) for t, rows in by_target.items()} == {
        "n1": ["firing", "pending"],
        "n2": ["held"],
    }
    firing, pending, held_row = (active[("conn_errors", s)] for s in ("firing", "pending", "held"))
    assert (firing.state, firing.summary, firing.cluster_id, firing.severity) == (
        "firing",
        "3 errors/s",
        cluster.pk,
        "warning",
    )
    assert (firing.held, firing.was_held, firing.fires_at) == (None, None, None)
    assert (pending.held, pending.was_held, pending.fires_at) == (False, False, now + timedelta(seconds=30))
    assert (held_row.id, held_row.held, held_row.was_held, held_row.fires_at) == (
        held.pk,
        True,
        True,
        now + timedelta(seconds=60),
    )


def test_the_pending_times_read_are_the_clusters_pending_alerts_not_held():
    """What a judgement at a pending alert's end of `for` reads first (evaluate.judge_now): which targets have one due
    and when the next is; a held one waits for its work's end, a firing one and another cluster's are not read."""
    alpha, beta = (Cluster.objects.create(name=n, writer_hostgroup=10, reader_hostgroup=20) for n in ("a", "b"))
    now = timezone.now().replace(microsecond=0)

    def alert(cluster, target, state, held=False, key=None):
        Alert.objects.create(
            rule="conn_errors",
            cluster=cluster,
            target=target,
            subject=key,
            subject_label=key,
            state=state,
            held=held,
            severity="warning",
            summary="",
            since=now,
            fires_at=now + timedelta(seconds=len(key)),
            last_seen_at=now,
            active_key=key,
        )

    alert(alpha, "n1", "pending", key="p")
    alert(alpha, "c1", "pending", key="pp")
    alert(alpha, "n2", "pending", held=True, key="held")
    alert(alpha, "n3", "firing", key="firing")
    alert(beta, "n4", "pending", key="other")
    assert sorted(evaluate._pending_times(alpha.pk)) == [
        ("c1", (now + timedelta(seconds=2)).timestamp()),
        ("n1", (now + timedelta(seconds=1)).timestamp()),
    ]


def plan(sql, params):
    """The indexes the database means to use for this statement (SQLite: its query plan; MariaDB: possible_keys)."""
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("EXPLAIN QUERY PLAN " + sql, params)
            return " ".join(str(row[-1]) for row in cur.fetchall())
        cur.execute("EXPLAIN " + sql, params)
        columns = [c[0] for c in cur.description]
        return " ".join(str(dict(zip(columns, row))["possible_keys"]) for row in cur.fetchall())


def test_the_rules_reads_find_open_and_pending_alerts_without_reading_resolved_history():
    """Resolved alerts are kept (the history pages); a node whose figure flaps through firing leaves one a flap. The
    reads at every round and judgement go through an index whose second column skips them: (target, active_key),
    (cluster, state); on the indexes before (target alone, cluster alone) a read of one target or cluster read all of
    its history (20,000 resolved rows: 3.2-3.7 ms a read on SQLite, against 0.006-0.017 ms with these)."""
    assert "alert_target_open" in plan(evaluate._open_alerts_sql(2), ["pending"] * 3 + ["n1", "n2"])
    assert "alert_cluster_state" in plan(evaluate._pending_times_sql(), [1, "pending", False])
    # the judgement of the clusters due together (evaluate.judge_due) reads theirs in one statement, as well indexed
    assert "alert_cluster_state" in plan(evaluate._pending_times_sql(3), [1, 2, 3, "pending", False])
