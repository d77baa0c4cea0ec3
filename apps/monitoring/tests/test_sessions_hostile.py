"""Issue 34: viewers read live client SQL in its digest form only (literals are values, sometimes secrets; an
operator sees them to decide a kill); the kill page for session id 0 describes no session (it described session 1)."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from apps.fleet.models import ProxySQLNode
from apps.monitoring.tests.test_pages import html
from apps.monitoring.views import digest_form

LITERAL = re.compile(r"(?<![\w.])\d+(?![\w])|'[^']*'")


def queries(page):
    return re.findall(r"<td><code>(.*?)</code></td>", page)


def test_viewers_read_client_sql_as_digests_and_operators_with_its_values(adopted_lab, viewer_user, operator_user):
    cluster, (first, _) = adopted_lab
    node = ProxySQLNode.objects.get(admin_port=first.port)
    first.traffic.set_sessions(hostgroup=101, count=8, kind="read", busy=1.0, prepared_fraction=0.0, reconnect=False)
    url = reverse("monitoring:proxysql_sessions", args=[node.pk])
    viewer, operator = Client(), Client()
    viewer.force_login(viewer_user)
    operator.force_login(operator_user)
    seen = queries(html(operator, url))
    assert seen and any(LITERAL.search(q) for q in seen), seen  # the operator reads the values
    shown = [q for q in queries(html(viewer, url)) if q]
    assert any("?" in q for q in shown) and not any(LITERAL.search(q) for q in shown), shown


def test_a_viewers_filter_matches_the_digest_not_the_literals(adopted_lab, viewer_user, operator_user):
    """The session filter (?q=) runs on what the caller is shown: a viewer cannot find a session by a literal value
    it may not read (whether a row stays would tell the value)."""
    cluster, (first, _) = adopted_lab
    node = ProxySQLNode.objects.get(admin_port=first.port)
    first.traffic.set_sessions(hostgroup=101, count=8, kind="read", busy=1.0, prepared_fraction=0.0, reconnect=False)
    url = reverse("monitoring:proxysql_sessions", args=[node.pk])
    viewer, operator = Client(), Client()
    viewer.force_login(viewer_user)
    operator.force_login(operator_user)
    literal = next(m.group(0) for q in queries(html(operator, url)) for m in [LITERAL.search(q)] if m)
    assert not [q for q in queries(html(viewer, url + "?q=" + literal)) if q]  # no session found by a value
    # The filter runs on the text shown: a viewer's digests hold "?", an operator's SQL its values.
    found = [q for q in queries(html(viewer, url + "?q=%3F")) if q]
    assert found and all("?" in q for q in found), found
    assert not [q for q in queries(html(operator, url + "?q=%3F")) if q]


@pytest.mark.parametrize(
    "sql, digest",
    [
        ("SELECT * FROM users WHERE password='hunter2' AND id=42", "SELECT * FROM users WHERE password=? AND id=?"),
        ('UPDATE t SET token="s3cr3t" WHERE id IN (1,2,3,4,5)', "UPDATE t SET token=? WHERE id IN (?,?,?,...)"),
        ("INSERT INTO t VALUES ('open string cut sho", "INSERT INTO t VALUES (?…"),
        ("SELECT 0x41424344, -1.5e3", "SELECT ?, ?"),
        (None, None),
    ],
)
def test_the_digest_form_keeps_no_literal(sql, digest):
    assert digest_form(sql) == digest


def test_the_kill_page_for_session_id_0_describes_no_session(adopted_lab, operator_user):
    cluster, (first, _) = adopted_lab
    node = ProxySQLNode.objects.get(admin_port=first.port)
    first.traffic.set_sessions(hostgroup=101, count=8, kind="read", reconnect=False)
    assert 1 in {r[1] for r in first.traffic.processlist_rows(0)}  # session 1 is open
    operator = Client()
    operator.force_login(operator_user)
    page = html(operator, reverse("monitoring:proxysql_kill_session", args=[node.pk, 0]))
    assert "is not open on" in page and 'data-field="user"' not in page
    killed = operator.post(
        reverse("monitoring:proxysql_kill_session", args=[node.pk, 0]),
        {"user": "app", "cli_host": "127.0.0.1", "cli_port": "1", "confirm": "yes"},
        follow=True,
    )
    assert b"was not killed: it is not open any more" in killed.content
    assert not any(s.startswith("KILL CONNECTION") for s in first.statements())


def test_a_kill_is_audited_with_the_sessions_sql_as_its_digest(adopted_lab, operator_user):
    from apps.audit.models import AuditEvent

    cluster, (first, _) = adopted_lab
    node = ProxySQLNode.objects.get(admin_port=first.port)
    first.traffic.set_sessions(hostgroup=101, count=8, kind="read", busy=1.0, prepared_fraction=0.0, reconnect=False)
    victim = next(r for r in first.traffic.processlist_rows(0) if r[6] == 101)
    operator = Client()
    operator.force_login(operator_user)
    form = {"user": victim[2], "cli_host": "127.0.0.1", "cli_port": str(victim[5]), "confirm": "yes"}
    operator.post(reverse("monitoring:proxysql_kill_session", args=[node.pk, victim[1]]), form)
    event = AuditEvent.objects.get(action="proxysql.kill_session", outcome="success")
    assert event.details["info"] and not LITERAL.search(event.details["info"]), event.details["info"]
