"""Rollups (raw -> 5 min -> hour -> day), retention, and windows answered from them: the figures of any
window equal the raw rows' sums, whatever mix of resolutions answers it."""

import random

import pytest
from django.db import connection
from django.db.models import Max, Min, Sum

from apps.digests import selectors, services
from apps.digests.models import DAY, FIVE_MINUTES, HOUR, RAW, SPAN_S, DigestPoll, DigestSpan, DigestStat
from apps.digests.selectors import Filters, Window

from .factories import digest, fleet, polls, source

pytestmark = pytest.mark.django_db
DAY0 = 1_800_000_000 // DAY * DAY  # a UTC midnight


@pytest.fixture
def history():
    """Three days of raw polls of two nodes (every 10 min here, to stay quick) with random digests."""
    rng = random.Random(3)
    cluster, nodes = fleet(2)
    digests = [digest(f"SELECT {i} FROM t{i % 7} WHERE id = ?") for i in range(40)]
    sources = [source(n, hg, user) for n in nodes for hg, user in ((100, "app"), (101, "app"), (101, "report"))]
    start, end = DAY0 - DAY, DAY0 + 2 * DAY
    rows = []
    for ts in range(start, end, 600):
        for src in rng.sample(sources, 3):
            for dg in rng.sample(digests, 4):
                count = rng.randint(1, 50)
                rows.append(
                    DigestStat(
                        resolution=RAW,
                        ts=ts + src.node_id,
                        source=src,
                        digest=dg,
                        count_star=count,
                        sum_time=count * rng.randint(50, 5000),
                        max_time=rng.choice([None, rng.randint(5000, 90000)]),
                        min_time=rng.choice([None, rng.randint(1, 50)]),
                    )
                )
    DigestStat.objects.bulk_create(rows, batch_size=2000)
    for n in nodes:
        polls(n, start + n.pk, end, every=600)
    return cluster, nodes, start, end


def raw_truth(a, b, **source_filter):
    return {
        r["digest_id"]: (r["c"], r["s"], r["mx"], r["mn"])
        for r in DigestStat.objects.filter(resolution=RAW, ts__gte=a, ts__lt=b, **source_filter)
        .values("digest_id")
        .annotate(c=Sum("count_star"), s=Sum("sum_time"), mx=Max("max_time"), mn=Min("min_time"))
    }


def from_page(a, b, filters=Filters()):
    window = Window(a, b)
    window.pieces = selectors.plan_window(a, b)
    page = selectors.top_digests(window, filters, per_page=1000)
    return {r.digest_id: (r.count, r.total_us, r.max_us, r.min_us) for r in page.rows}, window.pieces


def test_rollups_keep_every_figure_and_windows_answer_exactly(history, settings):
    cluster, nodes, start, end = history
    settings.MONITOR_RETENTION_RAW_H = 1000  # keep the raw rows to compare with
    now = end + 600
    written = services.rollup_and_prune(now=now)["written"]  # bounded: 500 buckets per level and run
    assert written[FIVE_MINUTES] > 0 and written[HOUR] > 0
    for level in (FIVE_MINUTES, HOUR, DAY):
        assert (
            DigestStat.objects.filter(resolution=level).aggregate(n=Sum("count_star"))["n"]
            == DigestStat.objects.filter(resolution=RAW, ts__lt=services.rolled_until()[level]).aggregate(
                n=Sum("count_star")
            )["n"]
        )
    services.rollup_and_prune(now=now)  # catches up
    assert services.rolled_until() == {FIVE_MINUTES: end + 300, HOUR: end, DAY: end}
    # Once caught up, a run writes nothing more (each bucket once).
    assert services.rollup_and_prune(now=now)["written"] == {FIVE_MINUTES: 0, HOUR: 0, DAY: 0}

    rng = random.Random(9)
    windows = [(start + 17, end - 13), (DAY0 + 7 * 3600 + 41, DAY0 + 31 * 3600 + 5), (DAY0 + 125, DAY0 + 3500)]
    windows += [tuple(sorted(rng.sample(range(start, end), 2))) for _ in range(5)]
    for a, b in windows:
        got, pieces = from_page(a, b)
        assert got == raw_truth(a, b), (a, b, pieces)
    _, pieces = from_page(start + 17, end - 13)
    assert {p[0] for p in pieces} == {RAW, FIVE_MINUTES, HOUR, DAY}  # the middle comes from coarse rows
    assert sum(1 for p in pieces if p[0] == DAY) == 1

    node = nodes[0]
    got, _ = from_page(start, end, Filters(node=node.pk, hostgroup=101))
    assert got == raw_truth(start, end, source__node=node, source__hostgroup=101)
    got, _ = from_page(start, end, Filters(cluster=cluster.pk, username="report"))
    assert got == raw_truth(start, end, source__username="report")


def test_windows_use_raw_rows_where_rollups_have_not_run(history):
    cluster, nodes, start, end = history
    services.rollup(FIVE_MINUTES, now=DAY0 + 3600 + services.rollup_margin_s())  # 5-minute rows up to 01:00 only
    got, pieces = from_page(start, end)
    assert got == raw_truth(start, end)
    assert pieces[-1][0] == RAW and pieces[-1][1] == DAY0 + 3600


def test_retention_deletes_only_what_a_coarser_level_holds(history, settings):
    cluster, nodes, start, end = history
    settings.MONITOR_RETENTION_RAW_H = 24
    settings.MONITOR_RETENTION_MINUTE_D = 1
    now = end + 600
    services.rollup(FIVE_MINUTES, now=now, max_buckets=10**6)  # 5-minute rows exist, hours do not yet
    services.prune(now=now)
    assert DigestStat.objects.filter(resolution=RAW).order_by("ts").first().ts >= start + 3600 - 300
    for _ in range(60):
        services.prune(now=now)  # each run deletes one bounded slice (an hour of raw rows)
    assert DigestStat.objects.filter(resolution=RAW).order_by("ts").first().ts >= now - 86400
    assert DigestStat.objects.filter(resolution=FIVE_MINUTES, ts__lt=now - 86400).exists()  # no hour rows yet: kept
    services.rollup(HOUR, now=now, max_buckets=10**6)
    for _ in range(10):
        services.prune(now=now)
    assert not DigestStat.objects.filter(resolution=FIVE_MINUTES, ts__lt=now - 86400 - 6 * 3600).exists()
    assert DigestPoll.objects.filter(resolution=RAW).order_by("ts").first().ts >= now - 86400


def test_old_windows_snap_to_the_buckets_still_kept(settings):
    settings.MONITOR_RETENTION_RAW_H = 24
    now = DAY0 + 10 * DAY + 1234
    w = selectors.effective_window(now - 5 * DAY + 77, now - 4 * DAY - 50, now=now)
    assert w.snapped and w.start % FIVE_MINUTES == 0 and w.end % FIVE_MINUTES == 0
    w = selectors.effective_window(now - 3600, now, now=now)
    assert not w.snapped and (w.start, w.end) == (now - 3600, now)


def test_a_window_older_than_every_level_kept_charts_from_the_oldest_day_kept(settings):
    """Found by mypy (issue 35 item 6): a window beginning before the hourly rows' retention snapped its start to a
    float (the retention settings are floats), and the digest's chart, whose buckets are a range() from it, failed
    (TypeError: a 500 on the chart's JSON)."""
    settings.MONITOR_RETENTION_HOUR_D = 30.0  # envfloat's
    now = DAY0 + 10 * DAY + 1234
    window = selectors.window_for(now - 60 * DAY, now, now=now)
    assert window.snapped and window.start == (now - 30 * DAY) // DAY * DAY and isinstance(window.start, int)
    series = selectors.chart_series(digest("SELECT 1"), window, Filters())
    assert series["start"] == window.start * 1000 and len(series["points"]) == 31


@pytest.mark.parametrize("hit_ids_max", [5000, 0])  # MariaDB: a search as a list of ids, or matched in the query
def test_the_span_gives_the_same_pages_as_summing_every_row(history, settings, monkeypatch, hit_ids_max):
    """The unfiltered 24 h list reads the hourly span plus two edges: same rows, same order, same count,
    for every sort, both directions, first, middle and last pages."""
    cluster, nodes, start, end = history
    settings.MONITOR_RETENTION_RAW_H = 1000
    monkeypatch.setattr(selectors, "HIT_IDS_MAX", hit_ids_max)
    now = end - 2 * 3600 + 1234
    rng = random.Random(5)
    src = source(nodes[1], 100, "batch")
    for i in range(30):  # digests that ran once, inside the span only: they come from its indexes
        DigestStat.objects.create(
            resolution=RAW,
            ts=rng.randrange(now - 80000, now - 8000),
            source=src,
            digest=digest(f"SELECT once_{i}"),
            count_star=rng.randint(1, 500),
            sum_time=rng.randint(1, 10**6),
            max_time=rng.choice([None, rng.randint(1, 10**6)]),
        )
    services.rollup_and_prune(now=now)
    services.rollup_and_prune(now=now)
    span_end = services.refresh_span(now)
    assert span_end is not None and DigestSpan.objects.filter(end_ts=span_end).exists()
    window = Window(now - 86400, now)
    window.pieces = selectors.plan_window(window.start, window.end)
    assert selectors.usable_span(window, Filters()) == span_end
    assert selectors.usable_span(window, Filters(hostgroup=101)) is None
    assert selectors.usable_span(window, Filters(search="x")) == span_end
    edges = selectors.plan_window(window.start, span_end - SPAN_S) + selectors.plan_window(span_end, window.end)
    in_edges = set(DigestStat.objects.filter(selectors._pieces_q(edges)).values_list("digest_id", flat=True))
    in_span = set(DigestSpan.objects.filter(end_ts=span_end).values_list("digest_id", flat=True))
    assert in_span - in_edges and in_span & in_edges  # both kinds, for the test to mean something
    monkeypatch.setattr(selectors, "COUNT_CAP", 10)  # the page's count of a broad search stops early
    capped = False
    searches = [("total", "once"), ("max", "FROM t3"), ("count", "none"), ("count", "select"), ("avg", "SELECT 1")]
    for sort, search in [(key, "") for key in selectors.SORTS] + searches:
        for descending in (True, False):
            for page in (1, 2, 4):
                filters = Filters(search=search)
                fast = selectors.top_digests(window, filters, sort, descending, page, per_page=7)
                slow = selectors.top_digests(window, filters, sort, descending, page, per_page=7, use_span=False)
                assert [(r.digest_id, r.count, r.total_us, r.max_us, r.min_us) for r in fast.rows] == [
                    (r.digest_id, r.count, r.total_us, r.max_us, r.min_us) for r in slow.rows
                ], (sort, search, page)
                assert (fast.total, fast.number) == (slow.total, slow.number)
                shown = selectors.top_digests(window, filters, sort, descending, page, per_page=7, exact_total=False)
                assert shown.rows == fast.rows and shown.number == fast.number, (sort, search, page)
                if shown.more:  # counted up to the cap: a lower bound, never past the truth, and a next page
                    assert connection.vendor != "sqlite" and hit_ids_max == 0 and search
                    assert max(10, page * 7) <= shown.total < slow.total and shown.has_next
                    capped = True
                else:
                    assert shown.total == slow.total
    # On MariaDB a search matched in the query (no list of ids) is counted up to the cap on the page.
    assert capped == (connection.vendor != "sqlite" and hit_ids_max == 0)
    everything = selectors.top_digests(window, Filters(), per_page=7, use_span=False)
    assert selectors.top_digests(window, Filters(), page=99, per_page=7).number == everything.pages > 2
