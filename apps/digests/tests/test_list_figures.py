"""The digest list's figures against what ProxySQL says, over the wire (two adopted ProxySQL doubles, real Redis):
a max time where the window's own max is not derivable from cumulative counters is ProxySQL's max_time since it
first saw the digest, said as a bound ("≤"), never "–"; the executions of mirrored copies (a mirror hostgroup) are
not added into Count but shown apart."""

import re
import time

import pytest
from django.conf import settings
from django.db.models import Sum

from apps.digests import services
from apps.digests.models import Digest, DigestNodeState, DigestStat
from apps.digests.templatetags.digest_format import duration_us
from apps.fleet.models import MirrorRule
from apps.monitoring.tests.test_rule_regex import cpu_spent, within

from .conftest import add_queries, read_digest_table
from .test_mirror_loss import admin_sql, mirror_inserts, write_load

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


def test_copies_stay_apart_after_their_mirror_rule_is_removed(digest_lab, viewer_client):
    """Issue 36: the copies are marked when the poll stores them, from the rules it read then. Before, the list matched
    the node's current rules at each request: once the mirror rule was deleted, the copies it had made were counted
    as the application's executions again."""
    cluster, nodes, (first, _) = digest_lab
    mirror_inserts(first, saturated=False)
    write_load(first)
    polled(services.poll_round(nodes, now=time.time() - 10))
    time.sleep(1.5)
    polled(services.poll_round(nodes, now=time.time() - 4))
    first.traffic.set_sessions(hostgroup=100, count=0)
    stored = DigestStat.objects.filter(digest__digest_text__startswith="INSERT", source__hostgroup=101)
    copies = dict(stored.values_list("digest__digest").annotate(n=Sum("count_star")))  # made under the rule
    admin_sql(first, "DELETE FROM mysql_query_rules WHERE rule_id = 10", "LOAD MYSQL QUERY RULES TO RUNTIME")
    polled(services.poll_round(nodes, now=time.time() - 2))  # (copies still queued then ran: not marked, no rule)
    assert not MirrorRule.objects.filter(proxysql_node=nodes[0]).exists()  # the latest read: no mirror rule
    rows = rows_of(viewer_client.get(f"/digests/?cluster={cluster.pk}").content.decode())
    assert copies and set(copies) <= set(rows), (copies, rows)
    for digest, count in copies.items():
        assert f"+{count:,} mirrored" in rows[digest]["count"], rows[digest]


# The costly patterns of apps/monitoring/tests/test_rule_regex.py written without backslashes (\w is [a-zA-Z0-9_] on
# ASCII texts), so that they pass through an SQL string literal to the node's admin unchanged. PCRE's (*UTF) first:
# Python's re (the double's model of its traffic) refuses the pattern and leaves it out, instead of backtracking
# without end on each LOAD; PCRE reads it as before.
WORD = "[a-zA-Z0-9_]"
COSTLY = f"(*UTF)^((({WORD})+|({WORD})*)+|{WORD})+(;|=|$)"  # BELOW_THE_LIMIT
REACHES_THE_LIMIT = f"(*UTF)^({WORD}+[ ]?)*$"  # AT_THE_LIMIT


def node_mirror_rules(double, rules):
    """Load mirror rules into the node's runtime: [(rule_id, pattern, mirror hostgroup)]."""
    admin_sql(
        double,
        *[
            f"INSERT INTO mysql_query_rules (rule_id,active,match_digest,mirror_hostgroup,apply)"
            f" VALUES ({rule_id},1,'{pattern}',{hostgroup},0)"
            for rule_id, pattern, hostgroup in rules
        ],
        "LOAD MYSQL QUERY RULES TO RUNTIME",
    )


def test_many_costly_mirror_rules_leave_the_poll_and_the_list_in_time_and_say_the_copies_are_not_told_apart(
    digest_lab, viewer_client
):
    """Issue 34: a node's admin holding 300 mirror rules just under PCRE's match limit (2.4 ms a search) cost a viewer's
    page view 300 x the rule's searches; the searches got one budget (MIRROR_POLL_BUDGET_S). Issue 36: the poll marks
    the copies when it stores the rows (its searches held to that budget), the page runs no search at all and says on
    which digests the copies were not told apart."""
    cluster, nodes, (first, _) = digest_lab
    write_load(first)
    polled(services.poll_round(nodes, now=time.time() - 10))
    first.traffic.set_sessions(hostgroup=100, count=0)
    node_mirror_rules(first, [(5000 + i, COSTLY, 100) for i in range(300)])
    add_queries(first, 40)
    with within(
        2 * settings.MIRROR_POLL_BUDGET_S + 3
    ):  # the marks' and the loss measurement's budgets, the double's CPU
        polled(services.poll_round(nodes, now=time.time() - 2))
    with cpu_spent() as cpu, within(1.5):
        html = viewer_client.get(f"/digests/?cluster={cluster.pk}").content.decode()
    assert cpu.seconds < 1.0, cpu.seconds
    rows = rows_of(html)
    assert any("not measured" in cells["count"] for cells in rows.values()), rows
    assert "Mirrored copies are not told apart in full on this page: on " in html
    assert f"the poll&#x27;s search budget of {settings.MIRROR_POLL_BUDGET_S:g} s of CPU" in html
    assert DigestStat.objects.filter(source__node=nodes[0], source__hostgroup=100, mirrored__isnull=True).exists()


def test_a_mirror_rule_at_pcres_match_limit_leaves_its_copies_not_measured_not_counted_as_the_applications(
    digest_lab, viewer_client
):
    """Issue 34: a mirror rule whose pattern reaches PCRE's match limit on a digest text counted, on the list page, as
    not matching: its copies were the application's executions, said as such. Now they are said as not measured."""
    cluster, nodes, (first, _) = digest_lab
    polled(services.poll_round(nodes, now=time.time() - 10))
    node_mirror_rules(first, [(20, REACHES_THE_LIMIT, 101)])
    first.traffic.set_sessions(hostgroup=101, count=2, kind="read")
    time.sleep(1.0)
    first.traffic.set_sessions(hostgroup=101, count=0)
    polled(services.poll_round(nodes, now=time.time() - 2))
    in_mirror_hostgroup = DigestStat.objects.filter(source__node=nodes[0], source__hostgroup=101)
    html = viewer_client.get(f"/digests/?cluster={cluster.pk}").content.decode()
    rows = rows_of(html)
    said = {
        d.digest
        for d in Digest.objects.filter(pk__in=in_mirror_hostgroup.values("digest_id"))
        if "not measured" in rows[d.digest]["count"]
    }
    assert said, rows
    assert "PCRE&#x27;s match limit" in html
    # as stored: the rows of those digests are not known (NULL), never "not copies"; no rule copies to hostgroup 100
    assert {
        d.digest
        for d in Digest.objects.filter(pk__in=in_mirror_hostgroup.filter(mirrored__isnull=True).values("digest_id"))
    } == said
    assert not DigestStat.objects.filter(source__hostgroup=100, mirrored__isnull=True).exists()


def test_the_marks_and_the_loss_measurement_share_one_budget_a_poll(digest_lab, settings):
    """Issue 34: the poll's copy marking and its loss measurement each had MIRROR_POLL_BUDGET_S, so a node's costly
    mirror rules took twice the budget of every poll. One budget now, for both: what the marks spent is not spent
    again, and the loss measurement says it was not counted."""
    settings.MIRROR_POLL_BUDGET_S = 0.5
    cluster, nodes, (first, _) = digest_lab
    write_load(first)
    polled(services.poll_round(nodes[:1], now=time.time() - 10, threads=1))
    first.traffic.set_sessions(hostgroup=100, count=0)
    node_mirror_rules(first, [(5000 + i, COSTLY, 100) for i in range(300)])
    add_queries(first, 40)
    # the poll's thread: reads, marks, measurement, writes (the double runs in its own)
    with cpu_spent() as cpu, within(4):
        polled(services.poll_round(nodes[:1], now=time.time() - 2, threads=1))
    assert cpu.seconds < settings.MIRROR_POLL_BUDGET_S + 0.35, cpu.seconds
