"""Query analysis of one digest, end to end: two adopted ProxySQL doubles in front of the real Galera lab (MariaDB),
real Redis. The digest poll samples example queries from the processlist; the digest page shows them (literals to
operators only), its latency per poll window and hostgroup with min and max, the rules that route it, and the EXPLAIN
of an example run on a real backend of the lab through a dedicated read-only user; the refusals say why."""

import re
import time
from contextlib import closing

import pytest
from django.db.models import Sum
from django.test import Client

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import services as config_services
from apps.configuration.rule_tester import normalise
from apps.configuration.tables import BY_NAME, typed_row
from apps.digests import examples, explain, services
from apps.digests.models import Digest, DigestStat
from apps.monitoring import live

pytestmark = pytest.mark.django_db

EXPLAIN_USER, EXPLAIN_PASSWORD = "console_explain", "explain-pw"
TABLE = "CREATE TABLE IF NOT EXISTS sbtest.sbtest{t} (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120), pad CHAR(60), KEY k_{t} (k))"

FILL = "INSERT IGNORE INTO sbtest.sbtest{t} SELECT seq, seq % 100, 'c', 'pad' FROM sbtest.seq_1_to_10000"  # ids the traffic uses


@pytest.fixture
def lab_schema(galera_lab):
    """The schema the doubles' traffic names (sbtest), on the real Galera lab, and a read-only user for EXPLAIN."""
    with closing(galera_lab.root_connection(1)) as conn:
        cur = conn.cursor()
        for sql in (
            "CREATE DATABASE IF NOT EXISTS sbtest",
            TABLE.format(t=1),
            TABLE.format(t=2),
            FILL.format(t=1),
            FILL.format(t=2),
            f"CREATE USER IF NOT EXISTS '{EXPLAIN_USER}'@'%' IDENTIFIED BY '{EXPLAIN_PASSWORD}'",
            f"GRANT SELECT ON sbtest.* TO '{EXPLAIN_USER}'@'%'",
        ):
            cur.execute(sql)
    return galera_lab


def with_read_rule(cluster):
    """The cluster's next configuration version with the usual read/write split rules (as an operator's change set
    would leave them): SELECT ... FOR UPDATE to the writers, other SELECTs to the readers."""
    latest = config_services.latest(cluster).content
    rules = [
        typed_row(
            BY_NAME["mysql_query_rules"],
            {
                "rule_id": 10,
                "active": 1,
                "match_digest": "^SELECT.*FOR UPDATE",
                "destination_hostgroup": 100,
                "apply": 1,
                "comment": "locking reads",
            },
            strict=False,
        ),
        typed_row(
            BY_NAME["mysql_query_rules"],
            {
                "rule_id": 20,
                "active": 1,
                "match_digest": "^SELECT",
                "destination_hostgroup": 101,
                "apply": 1,
                "comment": "reads",
            },
            strict=False,
        ),
    ]
    config_services.record_version(
        cluster, {**latest, "mysql_query_rules": rules}, actor=Actor.system(), reason="read/write split", source="adopt"
    )


def sampled(digest_lab, kind="read", hostgroup=101, prepared=0.0):
    """Busy client sessions on the first double, two digest polls (each samples the running queries)."""
    cluster, nodes, (first, _) = digest_lab
    first.traffic.set_sessions(
        hostgroup=hostgroup,
        count=30,
        kind=kind,
        busy=1.0,
        prepared_fraction=prepared,
        **({"pinned_reason": "auto_increment"} if kind == "write" else {}),
    )
    try:
        services.poll_round(nodes, now=time.time() - 10)
        time.sleep(0.5)
        services.poll_round(nodes, now=time.time() - 2)  # the page's window ends now: the poll's rows are inside it
    finally:
        first.traffic.set_sessions(hostgroup=hostgroup, count=0)
    return cluster


def digest_of(text):
    return Digest.objects.get(digest_text=text)


def page(client, digest, cluster):
    return client.get(f"/digests/{digest.pk}/?cluster={cluster.pk}").content.decode()


def examples_shown(html):
    return [
        re.sub(r"&#x27;", "'", t)
        for t in re.findall(r"<code class=\"example-text\" data-example-text>(.*?)</code>", html)
    ]


def test_the_digest_page_shows_examples_latency_per_window_and_routing(digest_lab, operator_client, viewer_user):
    viewer_client = Client()  # operator_client and viewer_client would be one client logged in twice
    viewer_client.force_login(viewer_user)
    cluster = sampled(digest_lab)
    digest = digest_of("SELECT c FROM sbtest1 WHERE id=?")
    html = page(operator_client, digest, cluster)
    shown = examples_shown(html)
    assert shown, "an example query sampled from the processlist"
    assert all(re.fullmatch(r"SELECT c FROM sbtest1 WHERE id=\d+", t) for t in shown), shown  # literals: operators
    viewer = examples_shown(page(viewer_client, digest, cluster))
    assert viewer and all(t == "SELECT c FROM sbtest1 WHERE id=?" for t in viewer)  # viewers: the digest form
    assert not re.search(r"WHERE id=\d", page(viewer_client, digest, cluster))

    # latency per poll window and hostgroup, equal to the stored window
    stored = DigestStat.objects.filter(digest=digest, source__hostgroup=101).order_by("-ts")
    ts = stored.first().ts
    count = stored.filter(ts=ts).aggregate(n=Sum("count_star"))["n"]
    row = re.search(rf'<tr data-window="{ts}" data-hostgroup="101">(.*?)</tr>', html, re.S)
    assert row, "the latest poll window of hostgroup 101"
    cells = dict(re.findall(r'data-col="(\w+)">(.*?)</td>', row.group(1), re.S))
    assert cells["count"] == f"{count:,}"
    assert re.search(r"\d", cells["max"]) and re.search(r"\d", cells["min"])  # min and max per window, never "–"

    # the rules that route it, from the cluster's current version: rule 20 sends it to the readers
    with_read_rule(cluster)
    html = page(operator_client, digest, cluster)
    route = re.search(r"<div data-route=\"galera-lab\">(.*?)</div>", html, re.S).group(1)
    assert "sent to hostgroup 101 (rule 20)" in route and "matched: rule 20 “reads”" in route, route


def test_explain_of_an_example_on_a_real_backend_and_the_refusals(digest_lab, lab_schema, operator_client, viewer_user):
    viewer_client = Client()
    viewer_client.force_login(viewer_user)
    cluster = sampled(digest_lab)
    digest = digest_of("SELECT c FROM sbtest1 WHERE id=?")
    url = f"/digests/{digest.pk}/explain/"

    # no EXPLAIN user yet: refused, saying what to set
    html = operator_client.post(url, {"example": 0, "cluster": cluster.pk}).content.decode()
    assert "has no EXPLAIN user" in re.search(r"data-explain-refused>(.*?)</p>", html, re.S).group(1)
    # the monitor user (SUPER, READ_ONLY ADMIN in the lab) is never taken
    cluster.explain_user, cluster.explain_password = cluster.monitor_user, cluster.monitor_password
    cluster.save()
    html = operator_client.post(url, {"example": 0, "cluster": cluster.pk}).content.decode()
    assert "monitor user" in re.search(r"data-explain-refused>(.*?)</p>", html, re.S).group(1)

    cluster.explain_user, cluster.explain_password = EXPLAIN_USER, EXPLAIN_PASSWORD
    cluster.save()
    html = operator_client.post(url, {"example": 0, "cluster": cluster.pk}).content.decode()
    assert "data-explain-refused" not in html, re.search(r"data-explain-refused>(.*?)</p>", html, re.S)
    head = re.findall(r"<th>(.*?)</th>", re.search(r"data-explain-rows>(.*?)</table>", html, re.S).group(1))
    assert head[:4] == ["id", "select_type", "table", "type"]  # MariaDB's EXPLAIN, from a real backend
    body = re.search(
        r"<tbody>(.*?)</tbody>", re.search(r"data-explain-rows>(.*?)</table>", html, re.S).group(1), re.S
    ).group(1)
    assert "<td>sbtest1</td>" in body and "<td>const</td>" in body and "PRIMARY" in body
    where = re.search(r"data-explain-where>(.*?)</p>", html, re.S).group(1)
    assert re.search(r"127\.0\.0\.1:33(11|12|13) \(hostgroup 101\) as console_explain", where), where
    event = AuditEvent.objects.filter(action="digests.explain").order_by("-pk").first()
    assert event.outcome == "success" and event.target == digest.digest

    # refusals: no example kept, not a SELECT (an UPDATE from write traffic), a prepared statement's text
    html = operator_client.post(url, {"example": 99, "cluster": cluster.pk}).content.decode()
    assert "no example query" in html
    sampled(digest_lab, kind="write", hostgroup=100)
    # an UPDATE digest with an example kept: the polls keep what the sessions ran at that moment, so the first UPDATE
    # digest by id may have none (CI once: "no example query" instead of the refusal under test)
    client = live.client()
    update = next(
        (
            d
            for d in Digest.objects.filter(digest_text__startswith="UPDATE sbtest").order_by("pk")
            if examples.of_digest(client, d.digest_text, cluster.pk)
        ),
        None,
    )
    assert update is not None, "the write traffic's polls kept no example of an UPDATE"
    html = operator_client.post(
        f"/digests/{update.pk}/explain/", {"example": 0, "cluster": cluster.pk}
    ).content.decode()
    assert "is not a SELECT (update statement)" in html
    assert viewer_client.post(url, {"example": 0}).status_code == 403
    assert AuditEvent.objects.filter(action="digests.explain", outcome="refused").exists()


def test_a_user_that_can_write_is_refused_before_any_explain(digest_lab, lab_schema, operator_client):
    cluster = sampled(digest_lab)
    digest = digest_of("SELECT c FROM sbtest1 WHERE id=?")
    with closing(lab_schema.root_connection(1)) as conn:
        conn.cursor().execute("CREATE USER IF NOT EXISTS 'console_rw'@'%' IDENTIFIED BY 'rw-pw'")
        conn.cursor().execute("GRANT SELECT, INSERT ON sbtest.* TO 'console_rw'@'%'")
    cluster.explain_user, cluster.explain_password = "console_rw", "rw-pw"
    cluster.save()
    html = operator_client.post(
        f"/digests/{digest.pk}/explain/", {"example": 0, "cluster": cluster.pk}
    ).content.decode()
    refused = re.search(r"data-explain-refused>(.*?)</p>", html, re.S).group(1)
    assert "is not read-only" in refused and "INSERT ON `sbtest`.*" in refused


@pytest.mark.parametrize(
    "text, reason",
    [
        ("SELECT 1; DROP TABLE sbtest.sbtest1", "2 statements"),
        ("DELETE FROM sbtest1 WHERE id=3", "not a SELECT (delete statement)"),
        ("SELECT c FROM sbtest1 WHERE id=?", "placeholders"),
        ("SELECT c INTO OUTFILE '/tmp/x' FROM sbtest1", "SELECT ... INTO"),
        ("  ", "empty"),
    ],
)
def test_only_one_plain_select_with_values_is_explained(text, reason):
    with pytest.raises(explain.Refused, match=re.escape(reason)):
        explain.check_statement(text)
    assert explain.check_statement("SELECT c FROM sbtest1 WHERE id=42;") == "SELECT c FROM sbtest1 WHERE id=42"
    assert normalise("SELECT c FROM sbtest1 WHERE id=42") == "SELECT c FROM sbtest1 WHERE id=?"


def test_an_explain_past_its_time_limit_is_cut_by_the_backend(lab_schema):
    """MariaDB runs a constant subquery while it EXPLAINs (measured: this EXPLAIN takes the 3 s of its SLEEP): the
    server's max_statement_time cuts it at the limit, and the operator is told why."""
    from apps.clients.backend import BackendClient
    from apps.clients.wire import ClientError

    slow = "SELECT id FROM sbtest1 WHERE id = (SELECT 1 FROM DUAL WHERE SLEEP(3) = 0)"
    with BackendClient("127.0.0.1", 3311, EXPLAIN_USER, EXPLAIN_PASSWORD, read_timeout=10) as client:
        started = time.monotonic()
        with pytest.raises(ClientError, match="max_statement_time"):
            client.explain(slow, "sbtest", 0.5)
        assert time.monotonic() - started < 2.0
