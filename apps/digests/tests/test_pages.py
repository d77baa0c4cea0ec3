"""The digest pages through Django's test client: windows, filters, search, sort, paging, the detail
and its chart data, htmx partials, and hostile query strings (a note or a default, never a 500)."""

import html
import re
import time

import pytest

from apps.digests.models import RAW, DigestStat

from .factories import digest, fleet, polls, source

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop():
    """Two clusters; 120 digests in the last hour on cluster "shop" (node 1 hostgroup 101, app@shop unless
    said otherwise), one 2 h ago, one 3 min ago on node 2 (report@archive, hostgroup 100)."""
    now = int(time.time())
    cluster, (n1, n2) = fleet(2, "shop")
    other, (n3,) = fleet(1, "billing")
    reader = source(n1)
    digests = []
    rows = []
    for i in range(120):
        d = digest(f"SELECT col{i} FROM orders WHERE id = ?", h=f"0x{i + 1:016X}")
        digests.append(d)
        # count rises with i, average time falls with i: the two sorts disagree
        rows.append(
            DigestStat(
                resolution=RAW,
                ts=now - 1200,
                source=reader,
                digest=d,
                count_star=10 + i,
                sum_time=(10 + i) * (5000 - 30 * i),
                max_time=(9000 + i if i % 2 else None),
            )
        )
    special = digest("UPDATE accounts SET balance = balance - ? WHERE id = ? /* 100% _sure_ */", h="0x00000000DEADBEEF")
    rows.append(
        DigestStat(
            resolution=RAW,
            ts=now - 180,
            source=source(n2, 100, "report", "archive"),
            digest=special,
            count_star=3,
            sum_time=3_000_000,
            max_time=2_500_000,
            min_time=100_000,
        )
    )
    old = digest("DELETE FROM sessions WHERE expires < ?", h="0x00000000000000AA")
    rows.append(DigestStat(resolution=RAW, ts=now - 7200, source=reader, digest=old, count_star=7, sum_time=70))
    billing = digest("SELECT * FROM invoices WHERE customer = ?", h="0x000000000000B111")
    rows.append(DigestStat(resolution=RAW, ts=now - 600, source=source(n3), digest=billing, count_star=1, sum_time=5))
    DigestStat.objects.bulk_create(rows)
    polls(n1, now - 3 * 3600, now, every=30, failed=set(range(now - 3 * 3600, now - 3 * 3600 + 1800)))
    polls(n2, now - 3600, now, every=30)
    return {
        "cluster": cluster,
        "other": other,
        "nodes": (n1, n2, n3),
        "digests": digests,
        "special": special,
        "old": old,
        "billing": billing,
    }


def shown(response):
    """The digest hashes listed, in order."""
    return re.findall(r'<tr data-digest="(0x[0-9A-F]+)"', response.content.decode())


def total(response):
    return int(re.search(r"<strong data-total>([\d,]+)</strong>", response.content.decode()).group(1).replace(",", ""))


def notes(response):
    return [
        html.unescape(n)
        for n in re.findall(
            r'<p class="flash flash-warning" role="status" data-note>(.*?)</p>', response.content.decode()
        )
    ]


def test_login_is_required(client, shop):
    response = client.get("/digests/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_windows(viewer_client, shop):
    hour = viewer_client.get("/digests/")
    assert hour.status_code == 200 and total(hour) == 122  # the 120, the UPDATE and billing; not the 2-hour-old one
    assert "Query digests" in hour.content.decode()
    assert total(viewer_client.get("/digests/?window=5m")) == 1
    assert total(viewer_client.get("/digests/?window=24h")) == 123
    since = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 3 * 3600))
    until = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 5400))
    custom = viewer_client.get(f"/digests/?window=custom&from={since}&to={until}")
    assert shown(custom) == [shop["old"].digest] and not notes(custom)


def test_sorts(viewer_client, shop):
    by_total = shown(viewer_client.get("/digests/"))
    assert by_total[0] == shop["special"].digest  # 3 s in all
    by_count = shown(viewer_client.get("/digests/?sort=count"))
    assert by_count[:2] == ["0x0000000000000078", "0x0000000000000077"]  # the highest counts
    fewest = shown(viewer_client.get("/digests/?sort=count&dir=asc"))
    assert fewest[0] == shop["billing"].digest
    by_avg = shown(viewer_client.get("/digests/?sort=avg"))
    assert by_avg[0] == shop["special"].digest and by_avg[1] == "0x0000000000000001"
    by_max = shown(viewer_client.get("/digests/?sort=max&dir=asc"))
    assert by_max[0] == "0x0000000000000002"  # i=1: the smallest known max
    assert "0x0000000000000001" not in by_max  # unknown max (None) sorts last either way: page 3
    every = [h for n in (1, 2, 3) for h in shown(viewer_client.get(f"/digests/?sort=max&dir=asc&page={n}"))]
    known = {f"0x{i + 1:016X}" for i in range(1, 120, 2)} | {shop["special"].digest}
    assert len(every) == 122 and set(every[:61]) == known  # the 61 known maxima first, the unknown ones last
    every_desc = [h for n in (1, 2, 3) for h in shown(viewer_client.get(f"/digests/?sort=max&page={n}"))]
    assert every_desc[0] == shop["special"].digest and set(every_desc[:61]) == known
    html = viewer_client.get("/digests/?sort=count").content.decode()
    assert 'aria-sort="descending"' in html and "sort=count&amp;dir=asc" in html  # clicking again flips


def test_paging(viewer_client, shop):
    first = viewer_client.get("/digests/?window=24h")
    assert len(shown(first)) == 50 and 'rel="next"' in first.content.decode()
    third = viewer_client.get("/digests/?window=24h&page=3")
    assert len(shown(third)) == 23 and "page 3 of 3" in third.content.decode()
    assert set(shown(first)).isdisjoint(shown(third))
    huge = viewer_client.get("/digests/?window=24h&page=99999999999")
    assert huge.status_code == 200 and shown(huge) == shown(third)


@pytest.mark.parametrize("inline", [500, 0])  # sources as a list of ids, or as a subquery (many sources)
def test_filters(viewer_client, shop, monkeypatch, inline):
    from apps.digests import selectors

    monkeypatch.setattr(selectors, "INLINE_IDS", inline)
    n1, n2, n3 = shop["nodes"]
    assert shown(viewer_client.get(f"/digests/?node={n2.pk}")) == [shop["special"].digest]
    assert total(viewer_client.get(f"/digests/?cluster={shop['other'].pk}")) == 1
    assert total(viewer_client.get(f"/digests/?cluster={shop['cluster'].pk}")) == 121
    assert shown(viewer_client.get("/digests/?hostgroup=100")) == [shop["special"].digest]
    assert shown(viewer_client.get("/digests/?user=report&schema=archive")) == [shop["special"].digest]
    assert total(viewer_client.get("/digests/?user=report&schema=shop")) == 0
    html = viewer_client.get("/digests/?hostgroup=101&user=app").content.decode()
    assert "hg 101 · app@shop" in html


def test_search(viewer_client, shop):
    assert total(viewer_client.get("/digests/?q=orders")) == 120
    assert shown(viewer_client.get("/digests/?q=orders&sort=count"))[0] == "0x0000000000000078"
    assert total(viewer_client.get(f"/digests/?q=orders&node={shop['nodes'][1].pk}")) == 0
    past = viewer_client.get("/digests/?q=orders&page=9")  # past the end: counted, then the last page
    assert total(past) == 120 and len(shown(past)) == 20 and 'data-page="3"' in past.content.decode()
    assert total(viewer_client.get("/digests/?q=ORDERS%20where")) == 120  # case-insensitive
    assert shown(viewer_client.get("/digests/?q=col7%20FROM")) == ["0x0000000000000008"]
    assert shown(viewer_client.get("/digests/?q=100%25%20_sure_")) == [shop["special"].digest]  # % and _ literal
    assert total(viewer_client.get("/digests/?q=100%25_")) == 0
    assert shown(viewer_client.get("/digests/?q=0x00000000deadbeef")) == [shop["special"].digest]  # by hash
    empty = viewer_client.get("/digests/?q=no%20such%20query")
    assert total(empty) == 0 and "No digest ran in this window with these filters" in empty.content.decode()


HOSTILE = [
    ("sort=drop%20table", "Unknown sort"),
    ("sort=count&dir=sideways", "Unknown direction"),
    ("window=forever", "Unknown window"),
    ("window=custom&from=yesterday", "'from' time is missing or not understood"),
    ("window=custom&from=2025-13-45T99:99&to=2025-01-01", "'from' time"),
    ("window=custom&from=2030-01-01T00:00&to=2020-01-01T00:00", "'from' must be before 'to'"),
    ("window=custom&from=0001-01-01T00:00&to=9999-12-31T23:59", None),
    ("window=custom&from=99999999999999999999", "'from' time"),
    ("cluster=abc", "Ignored cluster"),
    ("cluster=99999999", "No cluster #99999999"),
    ("node=-1", "Ignored node"),
    ("node=1e9", "Ignored node"),
    ("hostgroup=99999999999", "Ignored hostgroup"),
    ("hostgroup=%C2%B2", "Ignored hostgroup"),
    ("page=-5", "Ignored page"),
    ("page=abc", "Ignored page"),
    ("page=" + "9" * 40, "Ignored page"),
    ("q=" + "x" * 1_000_000, "search was cut to its first 200 characters"),
    ("q=%00%01select%0A", None),
    ("user=" + "u" * 5000, "user name was cut"),
    ("schema=%F0%9F%92%A5%00", None),
]


def test_hostile_query_strings_get_a_note_or_a_default(viewer_client, shop):
    for query, note in HOSTILE:
        response = viewer_client.get(f"/digests/?{query}")
        assert response.status_code == 200, query[:80]
        if note:
            assert any(note in n for n in notes(response)), (query[:80], notes(response))
        htmx = viewer_client.get(f"/digests/?{query}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="digest-results")
        assert htmx.status_code == 200, query[:80]
        assert viewer_client.get(f"/digests/{shop['special'].pk}/?{query}").status_code == 200, query[:80]
        assert viewer_client.get(f"/digests/{shop['special'].pk}/chart.json?{query}").status_code == 200, query[:80]


def test_htmx_requests_get_the_results_fragment_only(viewer_client, shop):
    response = viewer_client.get("/digests/?sort=count", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="digest-results")
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html and '<table class="digests"' in html
    assert '<input type="hidden" name="sort" value="count">' in html
    assert re.search(r'href="/digests/\?[^"]*page=2"[^>]*hx-get="/digests/\?[^"]*page=2"', html)  # real hrefs kept


def test_detail_and_chart(viewer_client, shop):
    special, d0 = shop["special"], shop["digests"][0]
    page = viewer_client.get(f"/digests/{special.pk}/?window=1h")
    html = page.content.decode()
    assert page.status_code == 200 and "UPDATE accounts SET balance" in html and "proxysql-2" in html
    assert "report" in html and "archive" in html and "2.5 s" in html  # its max
    assert viewer_client.get("/digests/999999/").status_code == 404
    assert viewer_client.get("/digests/999999/chart.json").status_code == 404

    n1 = shop["nodes"][0]
    data = viewer_client.get(f"/digests/{d0.pk}/chart.json?window=24h&node={n1.pk}").json()
    assert data["bucket_s"] == 300 and data["digest"] == d0.digest
    points = data["points"]
    assert all(p["x"] % 300_000 == 0 for p in points)
    hit = [p for p in points if p["rate"]]
    assert len(hit) == 1 and hit[0]["avg_ms"] == 5.0 and hit[0]["rate"] == pytest.approx(10 / 300, rel=0.2)
    now = time.time() * 1000
    quiet = [p for p in points if p["rate"] == 0]
    gaps = [p for p in points if p["rate"] is None]
    assert quiet and gaps  # polled but nothing ran: 0; no poll (or a failed one): a gap
    assert all(p["x"] < now - 2.4 * 3600 * 1000 or p["x"] > now - 2.6 * 3600 * 1000 for p in quiet)
    assert any(now - 2.9 * 3600 * 1000 < p["x"] < now - 2.6 * 3600 * 1000 for p in gaps)  # the failed half hour
    hour = viewer_client.get(f"/digests/{d0.pk}/chart.json?window=1h").json()
    assert hour["bucket_s"] == 60 and len(hour["points"]) in (60, 61)
    # The UPDATE ran on node 2 only, polled for the last hour only: before that its chart has gaps,
    # even though node 1 was polled then (node 1's polls say nothing about it).
    special_day = viewer_client.get(f"/digests/{special.pk}/chart.json?window=24h").json()
    assert special_day["nodes"] == 1 and special_day["partial"] == 0
    assert all(p["rate"] is None for p in special_day["points"] if p["x"] < now - 1.1 * 3600 * 1000)
    assert any(p["rate"] == 0 for p in special_day["points"] if p["x"] > now - 0.9 * 3600 * 1000)


def test_the_page_says_how_fresh_each_node_is_and_escapes_what_proxysql_sent(viewer_client, shop):
    from apps.digests.models import DigestNodeState

    n1, n2, n3 = shop["nodes"]
    now = time.time()
    DigestNodeState.objects.create(node=n1, last_ok_ts=now - 10, last_poll_ts=now - 10)
    DigestNodeState.objects.create(
        node=n2,
        last_ok_ts=now - 150,
        last_poll_ts=now - 5,
        error_kind="timeout",
        error="ProxySQL proxysql-2: read stats_mysql_query_digest: no answer within 10s",
        error_since=now - 120,
    )
    hostile = digest("SELECT '<script>alert(1)</script>' FROM dual", h="0x0000000000BADBAD")
    DigestStat.objects.create(
        resolution=RAW, ts=int(now) - 100, source=source(n1), digest=hostile, count_star=1, sum_time=1
    )
    html = viewer_client.get("/digests/").content.decode()
    assert 'data-polled="1/3"' in html and "Digests polled from 1 of 3 ProxySQL nodes" in html
    assert "digest poll failing for 2 min (timeout: ProxySQL proxysql-2: read stats_mysql_query_digest" in html
    assert "billing / proxysql-1:\n        not polled yet." in html
    found = viewer_client.get("/digests/?q=alert").content.decode()
    assert "<script>alert(1)" not in found and "&lt;script&gt;alert(1)&lt;/script&gt;" in found
    detail = viewer_client.get(f"/digests/{hostile.pk}/").content.decode()
    assert "<script>alert(1)" not in detail and "&lt;script&gt;alert(1)" in detail
    one = viewer_client.get(f"/digests/?node={n1.pk}").content.decode()
    assert 'data-polled="1/1"' in one and "poll-problems" not in one
