"""The query-digest rules. The window's digests come from real digest polls of a ProxySQL double; the
cluster's older history (a week of polls, one digest's baseline) is written into the digest tables as the
poller and rollups would have, since a test cannot wait a week."""

import time

import pytest

from apps.alerts import digest_rules
from apps.digests import selectors as ds
from apps.digests import services as digests
from apps.digests.models import RAW, Digest, DigestPoll, DigestSource, DigestStat
from apps.fleet.models import ProxySQLNode

from .conftest import firing, open_alerts, set_rule

pytestmark = pytest.mark.django_db
DAY = 86400


@pytest.fixture
def polled(adopted_lab, live_redis, settings):
    """Two digest polls of the lab pair with queries between them: the window's digests, all first seen now."""
    settings.ALERTS_DIGEST_EVERY_S = 0
    digests.forget_caches()
    cluster, (first, second) = adopted_lab
    for double in (first, second):
        double.traffic.clear_sessions()
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    now = time.time()
    digests.poll_round(nodes, now=now - 60)
    first.traffic.set_digests(queries=20000)
    digests.poll_round(nodes, now=now - 30)
    yield cluster, nodes
    digests.forget_caches()


def judge(nodes):
    digest_rules.after_digest_round([n.pk for n in nodes], 0, 1)


def top(cluster):
    now = int(time.time())
    w = ds.effective_window(now - 3600, now)
    w.pieces = ds.plan_window(w.start, w.end)
    return ds.top_digests(w, ds.Filters(cluster=cluster.pk), sort="total", per_page=10).rows


def test_a_new_query_among_the_top_ten(polled):
    cluster, nodes = polled
    set_rule("digest_new_top", p_top=3)
    judge(nodes)
    assert not open_alerts("digest_new_top")  # right after adoption everything is new: nothing said
    old = int(time.time()) - 3 * DAY
    DigestPoll.objects.create(resolution=RAW, ts=old, node=nodes[0], polls_ok=1, interval_s=30)  # history from before
    judge(nodes)
    got = firing("digest_new_top")
    assert len(got) == 3 and {a.details["digest"] for a in got} == {r.digest for r in top(cluster)[:3]}
    assert all(a.severity == "info" and "a new query is number" in a.summary for a in got)
    Digest.objects.update(first_polled_at=old)  # a day later they are no longer new
    judge(nodes)
    assert not open_alerts("digest_new_top")


def test_a_query_slower_than_its_seven_day_baseline(polled):
    cluster, nodes = polled
    set_rule("digest_slower", p_factor=3, p_min_ms=0, p_min_count=10, p_window_min=60)
    heavy = top(cluster)[0]
    judge(nodes)
    assert not open_alerts("digest_slower")  # no baseline: nothing to compare with
    source = DigestSource.objects.filter(node=nodes[0]).first()
    now = int(time.time())
    for day in range(2, 8):  # a week at a fifth of today's average time
        DigestStat.objects.create(
            resolution=RAW,
            ts=now - day * DAY,
            source=source,
            digest_id=heavy.digest_id,
            count_star=1000,
            sum_time=int(1000 * heavy.avg_us / 5),
        )
    judge(nodes)
    [a] = firing("digest_slower")
    assert a.details["digest"] == heavy.digest and a.value == pytest.approx(5, rel=0.05)
    assert "its 7-day average" in a.summary
    # The query is fast again: the window's executions now average at the baseline.
    DigestStat.objects.create(
        resolution=RAW,
        ts=now - 5,
        source=source,
        digest_id=heavy.digest_id,
        count_star=heavy.count * 50,
        sum_time=int(heavy.count * 50 * heavy.avg_us / 5),
    )
    judge(nodes)
    assert not open_alerts("digest_slower")
