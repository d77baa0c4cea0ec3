"""The digest list's figures against what ProxySQL says, over the wire (two adopted ProxySQL doubles, real Redis):
a max time where the window's own max is not derivable from cumulative counters is ProxySQL's max_time since it
first saw the digest, said as a bound ("≤"), never "–"; the executions of mirrored copies (a mirror hostgroup) are
not added into Count but shown apart."""
import re
import time

import pytest
from django.db.models import Sum

from apps.digests import services
from apps.digests.models import Digest, DigestNodeState, DigestStat
from apps.digests.templatetags.digest_format import duration_us
from apps.fleet.models import MirrorRule
from apps.monitoring import mirror
from apps.monitoring.tests.test_rule_regex import BELOW_THE_LIMIT, within

from .conftest import add_queries, read_digest_table
from .test_mirror_loss import mirror_inserts, write_load

pytestmark = pytest.mark.django_db


def rows_of(html):
    """{digest hash: {column: cell text}} of the list page."""
    out = {}
    for digest, body in re.findall(r'<tr data-digest="(0x[0-9A-F]+)">(.*?)</tr>', html, re.S):
        cells = dict(re.findall(r'<td class="num" data-col="(\w+)">(.*?)</td>', body, re.S))
        out[digest] = {k: re.sub(r"<[^>]+>", "", v).strip() for k, v in cells.items()}
    return out


def polled(summary):
    """Every node's digest poll of this round went through (else the stored errors say why: a failed poll leaves the
    next one a baseline only, and the window nothing to show)."""
    assert not summary["failed"], list(DigestNodeState.objects.exclude(error="").values_list("node_id", "error"))


def test_max_time_unknown_in_the_window_is_proxysqls_max_as_a_bound(digest_lab, viewer_client):
    cluster, nodes, doubles = digest_lab
    t0 = int(time.time()) - 60
    services.poll_round(nodes, now=t0)
    for double in doubles:
        add_queries(double, 40)
    services.poll_round(nodes, now=t0 + 30)
    rows = rows_of(viewer_client.get("/digests/").content.decode())
    assert rows
    truth = {}
    for double in doubles:
        for key, (most, least) in read_digest_table(double, figures="max_time, min_time").items():
            have = truth.get(key[4], (0, None))
            truth[key[4]] = (max(have[0], most), least if have[1] is None else min(have[1], least))
    bounded = 0
    for digest, cells in rows.items():
        assert cells["max"] != "–", f"{digest}: max time unknown although ProxySQL knows it"
        if cells["max"].startswith("≤"):
            bounded += 1
            assert cells["max"] == f"≤ {duration_us(truth[digest][0])}"
        if cells["min"].startswith("≥"):
            assert cells["min"] == f"≥ {duration_us(truth[digest][1])}"
    assert bounded  # steady digests: ProxySQL's max did not rise in the window


def test_mirrored_executions_are_not_counted_but_shown_apart(digest_lab, viewer_client):
    cluster, nodes, (first, _) = digest_lab
    mirror_inserts(first, saturated=False)
    write_load(first)
    polled(services.poll_round(nodes, now=time.time() - 10))
    time.sleep(1.5)
    polled(services.poll_round(nodes, now=time.time() - 2))  # the window ends now: the poll's row is inside it
    first.traffic.set_sessions(hostgroup=100, count=0)
    html = viewer_client.get(f"/digests/?cluster={cluster.pk}").content.decode()
    rows = rows_of(html)
    inserts = Digest.objects.filter(digest_text__startswith="INSERT", digest__in=list(rows))
    assert inserts, rows
    for d in inserts:
        stored = DigestStat.objects.filter(digest=d)
        own = stored.filter(source__hostgroup=100).aggregate(n=Sum("count_star"))["n"]
        copies = stored.filter(source__hostgroup=101).aggregate(n=Sum("count_star"))["n"]
        assert copies, "the mirror executed copies of the INSERTs in hostgroup 101"
        count = rows[d.digest]["count"]
        assert count.split()[0].replace(",", "") == str(own), count
        assert f"+{copies:,} mirrored" in count


def test_many_costly_mirror_rules_leave_the_list_in_time_and_say_the_copies_are_not_told_apart(digest_lab,
                                                                                              viewer_client):
    """Issue 34: the list page tells mirrored copies apart with each node's mirror rules, each rule with its own
    200 ms budget, so a node's admin holding 300 rules just under PCRE's match limit (2.4 ms a search) cost a
    viewer's page view 300 x the rule's searches. Now the page's searches share one budget (mirror.POLL_BUDGET_S)
    and the page says the copies were not told apart in full."""
    cluster, nodes, (first, _) = digest_lab
    write_load(first)
    services.poll_round(nodes, now=time.time() - 10)
    time.sleep(1.5)
    services.poll_round(nodes, now=time.time() - 2)
    MirrorRule.objects.bulk_create([MirrorRule(proxysql_node=nodes[0], rule_id=5000 + i, match_digest=BELOW_THE_LIMIT,
                                               mirror_hostgroup=100) for i in range(300)])
    cpu = time.thread_time()
    with within(mirror.POLL_BUDGET_S + 1.5):
        html = viewer_client.get(f"/digests/?cluster={cluster.pk}").content.decode()
    assert time.thread_time() - cpu < mirror.POLL_BUDGET_S + 1.0
    assert rows_of(html)
    assert ("Mirrored copies are not told apart in full on this page: the nodes&#x27; 300 mirror rules&#x27; "
            f"searches passed their budget of {mirror.POLL_BUDGET_S:g} s of CPU") in html
