"""A digest's detail page: first and last seen by the polls, its share of the window's time and executions, its
split by hostgroup; what ProxySQL does not keep (an example query) or the poll does not store yet is said."""

import re
import time

import pytest

from apps.digests.models import HOUR, RAW, DigestStat

from .factories import digest, fleet, source, stat

pytestmark = pytest.mark.django_db


def fact(html, name):
    return re.search(rf'data-fact="{name}">(.*?)</dd>', html).group(1).strip()


@pytest.fixture
def shop():
    now = int(time.time())
    cluster, (n1, n2) = fleet(2, "shop")
    d = digest("SELECT c FROM orders WHERE id = ?", h="0x00000000000000E1")
    d.first_polled_at = now - 3 * 86400
    d.save()
    other = digest("UPDATE orders SET c = ? WHERE id = ?", h="0x00000000000000E2")
    stat(source(n1, 101), d, now - 900, 30, 3_000_000)  # 3 s on the readers
    stat(source(n2, 100), d, now - 400, 10, 1_000_000)  # 1 s on the writer, the latest poll that saw it
    stat(source(n1, 101), d, (now - 2 * 86400) // HOUR * HOUR, 5, 50, resolution=HOUR)  # older history
    stat(source(n1, 100), other, now - 600, 60, 4_000_000)  # another digest: 4 s
    stat(source(n2, 100, "report", "archive"), other, now - 600, 1, 2_000_000)
    return {"digest": d, "now": now, "nodes": (n1, n2)}


def test_first_and_last_seen_share_and_hostgroups(viewer_client, shop):
    d, now = shop["digest"], shop["now"]
    html = viewer_client.get(f"/digests/{d.pk}/").content.decode()
    assert fact(html, "first-seen") == time.strftime("%Y-%m-%d %H:%M", time.gmtime(now - 3 * 86400)) + " UTC"
    assert fact(html, "last-seen") == time.strftime("%Y-%m-%d %H:%M", time.gmtime(now - 400)) + " UTC"
    assert fact(html, "total") == "4 s" and fact(html, "count") == "40"
    assert fact(html, "time-share") == "40.0 %"  # 4 s of 10 s in the last hour
    assert fact(html, "count-share") == "39.6 %"  # 40 of 101 executions
    shares = re.findall(r'<tr data-hostgroup="(\d+)">.*?data-col="share">(.*?)</td>', html, re.S)
    assert shares == [("101", "75.0 %"), ("100", "25.0 %")]
    assert fact(html, "rows") == "not polled in this window"  # the factory's rows carry none
    assert "keeps no example query" in html


def test_shares_follow_the_filters(viewer_client, shop):
    d, (n1, _) = shop["digest"], shop["nodes"]
    html = viewer_client.get(f"/digests/{d.pk}/", {"node": n1.pk}).content.decode()
    assert fact(html, "total") == "3 s" and fact(html, "time-share") == "42.9 %"  # 3 s of node 1's 7 s
    assert "Shares are of the digests that ran with the same filters." in html


def test_a_digest_that_did_not_run_in_the_window(viewer_client, shop):
    d = shop["digest"]
    html = viewer_client.get(f"/digests/{d.pk}/", {"window": "5m"}).content.decode()
    assert fact(html, "time-share") == "–" and fact(html, "count") == "0"
    assert "It did not run in this window." in html
    assert fact(html, "last-seen") != "(unknown)"


def test_rows_sent_and_affected(viewer_client, shop):
    d, now, (n1, _) = shop["digest"], shop["now"], shop["nodes"]
    DigestStat.objects.create(
        resolution=RAW,
        ts=now - 100,
        source=source(n1, 101),
        digest=d,
        count_star=20,
        sum_time=100,
        rows_sent=50,
        rows_affected=0,
    )
    html = viewer_client.get(f"/digests/{d.pk}/").content.decode()
    assert fact(html, "rows") == "50 / 0" and fact(html, "rows-each") == "2.5 sent / 0.0 affected"
    assert "Rows are counted for 20 of the 60 executions" in html


def test_the_rule_form_starts_on_the_cluster_the_digest_ran_on(operator_client, shop):
    """Issue 36 (the walk at 1366/1920): "Make a query rule from this digest" offered the first cluster by name (one
    where the digest never ran) unless the page was filtered by cluster."""
    fleet(1, "another-cluster-first-by-name")
    d = shop["digest"]
    html = operator_client.get(f"/digests/{d.pk}/").content.decode()
    chosen = re.search(
        r'<select name="cluster" id="id_rule_cluster"[^>]*>.*?<option value="\d+" selected>(.*?)</option>', html, re.S
    )
    assert chosen and chosen.group(1) == "shop", chosen


@pytest.mark.parametrize("cluster", ["9" * 5000, "²", "99999999999999999999", "-1"])
def test_explain_with_a_cluster_that_is_no_number_is_the_page_not_a_500(operator_client, shop, cluster):
    # int() refused 5,000 digits with a ValueError that str.isdigit() had let through; "²" is a digit to isdigit()
    response = operator_client.post(f"/digests/{shop['digest'].pk}/explain/", {"example": "0", "cluster": cluster})
    assert response.status_code == 200 and "data-explain-refused" in response.content.decode()
