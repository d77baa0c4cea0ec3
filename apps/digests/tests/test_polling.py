"""Digest polls over the real wire against two ProxySQL doubles, with real Redis: deltas per interval,
resets and restarts, one failing node, lost baselines, the shard lock."""

import os
import time

import pytest
from django.db.models import Sum

from apps.digests import services
from apps.digests.models import RAW, Digest, DigestNodeState, DigestPoll, DigestSource, DigestStat

from .conftest import add_queries, read_digest_table

pytestmark = pytest.mark.django_db


def stats_of(node, ts):
    """{(hostgroup, schema, user, client, digest): (count, sum_time)} written for one node at one poll."""
    rows = DigestStat.objects.filter(resolution=RAW, ts=ts, source__node=node).values_list(
        "source__hostgroup",
        "source__schemaname",
        "source__username",
        "source__client_address",
        "digest__digest",
        "count_star",
        "sum_time",
    )
    return {r[:5]: (r[5], r[6]) for r in rows}


def expected_deltas(before, after):
    out = {}
    for key, (count, total) in after.items():
        c0, s0 = before.get(key, (0, 0))
        if count != c0:
            out[key] = (count - c0, total - s0)
    return out


def test_two_polls_store_the_interval_deltas(digest_lab):
    cluster, nodes, doubles = digest_lab
    t0 = time.time()
    summary = services.poll_round(nodes, now=t0)
    assert summary["failed"] == 0 and summary["rows"] == 0  # a first poll is a baseline only
    assert DigestStat.objects.count() == 0
    assert DigestPoll.objects.filter(polls_ok=0, polls_failed=0).count() == 2  # polled, no figures yet
    before = read_digest_table(doubles[0])
    assert len(before) == 20  # sysbench oltp_read_write on two tables, as ProxySQL showed it

    add_queries(doubles[0], 5000)
    after = read_digest_table(doubles[0])
    summary = services.poll_round(nodes, now=t0 + 30)
    assert summary == {
        "polled": 2,
        "failed": 0,
        "rows": len(expected_deltas(before, after)),
        "seconds": summary["seconds"],
    }
    assert stats_of(nodes[0], int(t0) + 30) == expected_deltas(before, after)
    assert stats_of(nodes[1], int(t0) + 30) == {}  # nothing ran on the second node: no row at all
    assert Digest.objects.count() == len(expected_deltas(before, after))
    commit = Digest.objects.get(digest_text="COMMIT")
    assert commit.digest.startswith("0x") and len(commit.digest) == 18
    assert set(DigestSource.objects.values_list("hostgroup", flat=True)) == {100, 101}
    poll = DigestPoll.objects.get(node=nodes[0], ts=int(t0) + 30)
    assert poll.polls_ok == 1 and poll.interval_s == 30 and poll.stat_rows == summary["rows"]
    state = DigestNodeState.objects.get(node=nodes[0])
    assert state.digests == 20 and state.changed == summary["rows"] and not state.error

    # An idle interval writes no row but counts as covered (a quiet digest is a zero, not a gap).
    services.poll_round(nodes, now=t0 + 60)
    assert not DigestStat.objects.filter(ts=int(t0) + 60).exists()
    assert DigestPoll.objects.filter(ts=int(t0) + 60, polls_ok=1).count() == 2

    # Interval extremes: a single execution gives its own time as min and max.
    add_queries(doubles[0], 1)
    before, after = after, read_digest_table(doubles[0])
    services.poll_round(nodes, now=t0 + 90)
    single = [(k, d) for k, d in expected_deltas(before, after).items() if d[0] == 1]
    for key, (count, total) in single:
        row = DigestStat.objects.get(ts=int(t0) + 90, digest__digest=key[4], source__hostgroup=key[0])
        assert row.min_time == row.max_time == total


def test_rows_sent_and_affected_are_stored_per_interval(digest_lab):
    cluster, nodes, doubles = digest_lab
    t0 = time.time()
    services.poll_round(nodes, now=t0)
    figures = "count_star, sum_rows_sent, sum_rows_affected"
    before = read_digest_table(doubles[0], figures=figures)
    add_queries(doubles[0], 3000)
    after = read_digest_table(doubles[0], figures=figures)
    services.poll_round(nodes, now=t0 + 30)
    stored = DigestStat.objects.filter(resolution=RAW, ts=int(t0) + 30, source__node=nodes[0]).values_list(
        "source__hostgroup",
        "source__schemaname",
        "source__username",
        "source__client_address",
        "digest__digest",
        "rows_sent",
        "rows_affected",
    )
    expected = {
        k: (v[1] - before.get(k, (0, 0, 0))[1], v[2] - before.get(k, (0, 0, 0))[2])
        for k, v in after.items()
        if v[0] != before.get(k, (0,))[0]
    }
    assert {r[:5]: r[5:] for r in stored} == expected
    assert any(sent for sent, _ in expected.values()) and any(affected for _, affected in expected.values())


def test_reset_and_restart_give_no_negative_or_doubled_figures(digest_lab):
    cluster, nodes, (first, second) = digest_lab
    t0 = int(time.time())
    services.poll_round(nodes, now=t0)
    add_queries(first, 3000)
    services.poll_round(nodes, now=t0 + 30)

    # Another tool reads stats_mysql_query_digest_reset: every counter back to zero, rows gone.
    read_digest_table(first, "stats_mysql_query_digest_reset")
    assert read_digest_table(first) == {}
    services.poll_round(nodes, now=t0 + 60)
    assert not DigestStat.objects.filter(ts=t0 + 60).exists()  # rows disappeared: nothing ran, nothing written
    add_queries(first, 200)  # fewer than before the reset: every count went down
    since_reset = read_digest_table(first)
    services.poll_round(nodes, now=t0 + 90)
    assert stats_of(nodes[0], t0 + 90) == since_reset  # what ran since the reset, exactly

    # A restart of ProxySQL: counters start again (first_seen changes), some counts even higher than
    # before, so only the uptime (or first_seen) tells.
    time.sleep(1.1)  # polls are 30 s apart in life: the restart comes at least a second after the last one
    first.restart()
    first.traffic.set_sessions(hostgroup=100, count=0, kind="write")
    first.traffic.set_sessions(hostgroup=101, count=0, kind="read")
    add_queries(first, 900)
    since_restart = read_digest_table(first)
    services.poll_round(nodes, now=t0 + 120)
    assert stats_of(nodes[0], t0 + 120) == since_restart
    assert DigestNodeState.objects.get(node=nodes[0]).resets > 0

    assert not DigestStat.objects.filter(count_star__lt=0).exists()
    assert not DigestStat.objects.filter(sum_time__lt=0).exists()
    # The whole history adds up to what ran in the intervals we saw, never more.
    total = DigestStat.objects.filter(source__node=nodes[0]).aggregate(n=Sum("count_star"))["n"]
    assert (
        total
        == sum(c for c, _ in since_reset.values())
        + sum(c for c, _ in since_restart.values())
        + DigestStat.objects.filter(source__node=nodes[0], ts=t0 + 30).aggregate(n=Sum("count_star"))["n"]
    )


def test_one_failing_node_is_recorded_for_that_node_only(digest_lab):
    cluster, nodes, (first, second) = digest_lab
    t0 = int(time.time())
    services.poll_round(nodes, now=t0)
    before = read_digest_table(second)
    second.set_mode("hang")
    add_queries(first, 1000)
    add_queries(second, 1000)
    started = time.monotonic()
    summary = services.poll_round(nodes, now=t0 + 30)
    assert summary["failed"] == 1 and time.monotonic() - started < 12  # bounded by one read timeout
    ok, bad = (DigestNodeState.objects.get(node=n) for n in nodes)
    assert not ok.error and ok.last_ok_ts == t0 + 30 and ok.changed > 0
    assert bad.error_kind == "timeout" and bad.error_since == t0 + 30 and bad.last_ok_ts == t0
    assert "no answer within" in bad.error and "proxysql-2" in bad.error
    assert DigestPoll.objects.get(node=nodes[1], ts=t0 + 30).polls_failed == 1
    assert DigestPoll.objects.get(node=nodes[0], ts=t0 + 30).polls_ok == 1
    assert not DigestStat.objects.filter(source__node=nodes[1]).exists()

    second.set_mode("refuse")
    services.poll_round([nodes[1]], now=t0 + 60)
    bad.refresh_from_db()
    assert bad.error_kind == "unreachable" and bad.error_since == t0 + 30  # failing since the first failure

    # Back: the next good poll covers both missed intervals, once.
    second.set_mode("normal")
    after = read_digest_table(second)
    services.poll_round([nodes[1]], now=t0 + 90)
    assert stats_of(nodes[1], t0 + 90) == expected_deltas(before, after)
    assert DigestPoll.objects.get(node=nodes[1], ts=t0 + 90).interval_s == 90
    bad.refresh_from_db()
    assert not bad.error and bad.error_since is None


def test_a_lost_or_unconfirmed_baseline_costs_an_interval_never_doubles(digest_lab, digest_redis):
    cluster, nodes, (first, second) = digest_lab
    t0 = int(time.time())
    services.poll_round(nodes[:1], now=t0)
    digest_redis.flushdb()  # Redis restarted empty
    add_queries(first, 1000)
    services.poll_round(nodes[:1], now=t0 + 30)
    assert not DigestStat.objects.exists()  # no baseline: a new one, not 1000s of "new" queries
    add_queries(first, 100)
    services.poll_round(nodes[:1], now=t0 + 60)
    assert DigestStat.objects.filter(ts=t0 + 60).exists()

    # The database missed a poll that Redis has (a crash between the two writes): start again.
    DigestNodeState.objects.filter(node=nodes[0]).update(baseline_ts=t0 + 45)
    add_queries(first, 100)
    services.poll_round(nodes[:1], now=t0 + 90)
    assert not DigestStat.objects.filter(ts=t0 + 90).exists()


def test_a_failed_database_write_is_recorded_and_the_next_poll_covers_the_interval(digest_lab):
    cluster, nodes, (first, second) = digest_lab
    t0 = int(time.time())
    services.poll_round(nodes, now=t0)
    add_queries(first, 1000)
    services.poll_round(nodes, now=t0 + 30)
    before = read_digest_table(first)
    add_queries(first, 1000)
    add_queries(second, 1000)
    # A row already where this poll will write one: the node's transaction fails on a real constraint.
    row = DigestStat.objects.filter(ts=t0 + 30, source__node=nodes[0]).first()
    DigestStat.objects.create(
        resolution=RAW, ts=t0 + 60, source_id=row.source_id, digest_id=row.digest_id, count_star=-1, sum_time=-1
    )
    summary = services.poll_round(nodes, now=t0 + 60)
    assert summary["failed"] == 1
    state = DigestNodeState.objects.get(node=nodes[0])
    assert state.error and state.error_since == t0 + 60 and state.baseline_ts == t0 + 30
    assert DigestPoll.objects.get(node=nodes[0], ts=t0 + 60).polls_failed == 1
    assert DigestStat.objects.filter(ts=t0 + 60, source__node=nodes[0]).count() == 1  # only the planted row
    assert DigestStat.objects.filter(ts=t0 + 60, source__node=nodes[1]).exists()  # the other node wrote its own
    after = read_digest_table(first)
    services.poll_round(nodes, now=t0 + 90)
    assert stats_of(nodes[0], t0 + 90) == expected_deltas(before, after)  # both intervals, once
    assert not DigestNodeState.objects.get(node=nodes[0]).error


def test_garbage_from_a_node_fails_that_node_only(digest_lab):
    cluster, nodes, (first, second) = digest_lab
    second.query("DROP VIEW stats.stats_mysql_query_digest")
    second.query(
        "CREATE VIEW stats.stats_mysql_query_digest AS SELECT 'x' AS hostgroup, 'a' AS schemaname,"
        " 'b' AS username, '' AS client_address, '0x1' AS digest, 'q' AS digest_text, 'many' AS count_star,"
        " '1' AS first_seen, '1' AS last_seen, '1' AS sum_time, '1' AS min_time, '1' AS max_time,"
        " '1' AS sum_rows_affected, '1' AS sum_rows_sent"
    )  # every column of ProxySQL 2.7.1's table
    summary = services.poll_round(nodes, now=time.time())
    assert summary["failed"] == 1
    bad = DigestNodeState.objects.get(node=nodes[1])
    assert bad.error_kind == "unexpected" and "not a digest row" in bad.error
    assert not DigestNodeState.objects.get(node=nodes[0]).error


def test_shard_round_polls_due_nodes_once_and_skips_while_locked(digest_lab, digest_redis, settings):
    cluster, nodes, doubles = digest_lab
    settings.MONITOR_DIGEST_INTERVAL_S = 30
    now = time.time()
    polled = sum(services.run_shard(shard, 2, now=now).get("polled", 0) for shard in range(2))
    assert polled == 2
    assert all(services.run_shard(shard, 2, now=now + 5).get("polled") == 0 for shard in range(2))  # not due
    digest_redis.set("poll-lease:digest:0", "7 someone else", ex=5)
    assert services.run_shard(0, 2, now=now + 31)["skipped"] is True
    assert services.run_shard(1, 2, now=now + 31)["polled"] == 1


def test_many_digests_poll_within_the_interval(digest_lab, settings):
    """20,000 digests by default (the suite stays quick); DIGESTS_SCALE=100000 for the full size
    (docs/benchmarks.md gives its figures)."""
    scale = int(os.environ.get("DIGESTS_SCALE", "20000"))
    cluster, nodes, (first, second) = digest_lab
    first.traffic.set_digests(count=scale, queries=100 * scale)
    t0 = int(time.time())
    started = time.monotonic()
    services.poll_round(nodes[:1], now=t0)
    baseline_s = time.monotonic() - started
    add_queries(first, 20 * scale)  # every digest moves: the worst case, all texts new
    started = time.monotonic()
    summary = services.poll_round(nodes[:1], now=t0 + 30)
    all_new_s = time.monotonic() - started
    add_queries(first, scale // 2)  # then only part of them
    started = time.monotonic()
    later = services.poll_round(nodes[:1], now=t0 + 60)
    later_s = time.monotonic() - started
    print(
        f"\n{scale:,} digests: baseline poll {baseline_s:.1f} s, all {summary['rows']:,} new {all_new_s:.1f} s,"
        f" {later['rows']:,} changed {later_s:.1f} s"
    )
    assert summary["failed"] == 0 and summary["rows"] == scale
    assert all_new_s < settings.MONITOR_DIGEST_INTERVAL_S  # done before the next poll is due
    assert Digest.objects.count() == scale and DigestStat.objects.filter(ts=t0 + 30).count() == scale
    assert DigestNodeState.objects.get(node=nodes[0]).digests == scale
