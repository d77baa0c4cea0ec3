"""The alert pages over the adopted lab: the list with its filters, one alert with its evidence (a chart of the
figure around its start, the operation, the audit events), acknowledge and silence (audited), the rules
fleet-wide and per cluster, channels (the secret never shown back), the cluster page and the overview."""

import json
import time

import pytest
from django.urls import reverse

from apps.alerts import rulesettings
from apps.alerts.models import Alert, Channel, RuleSetting, Silence
from apps.audit.models import AuditEvent
from apps.fleet.models import Server
from lab import demo

from .conftest import firing, set_rule, tick, until

pytestmark = pytest.mark.django_db


@pytest.fixture
def a_firing_alert(adopted_lab, live_redis, galera_healthy):
    """The lab's writer killed: writer_none fires on both nodes (then healed by galera_healthy)."""
    cluster, doubles = adopted_lab
    set_rule("writer_none", for_s=0)
    tick()
    galera_healthy.kill(1)
    assert until(lambda: len(firing("writer_none")) == 2, 15)
    return cluster, firing("writer_none")[0]


def test_list_and_detail_with_evidence(a_firing_alert, viewer_client):
    cluster, alert = a_firing_alert
    page = viewer_client.get(reverse("alerts:list")).content.decode()
    assert page.count('data-rule="writer_none" data-state="firing"') == 2
    assert "2 firing" in page and "no usable ONLINE writer on proxysql-" in page
    filtered = viewer_client.get(reverse("alerts:list"), {"rule": "drift", "state": "open"}).content.decode()
    assert 'data-rule="writer_none"' not in filtered and 'data-open="none"' in filtered
    live = viewer_client.get(reverse("alerts:list_live"), {"cluster": cluster.pk}).content.decode()
    assert live.lstrip().startswith('<div id="alerts-live"') and 'data-rule="writer_none"' in live

    detail = viewer_client.get(alert.get_absolute_url()).content.decode()
    server = Server.objects.get(port=3311)
    chart_url = reverse("monitoring:server_chart", args=[server.pk, "wsrep_state"])
    assert chart_url in detail and "?end=" in detail  # the wsrep state of the dead writer, around the start
    end = int(detail.split(chart_url + "?end=")[1].split('"')[0])
    data = json.loads(viewer_client.get(chart_url, {"end": end, "range": "1h"}).content)
    assert data["end"] == end * 1000 and data["start"] == (end - 3600) * 1000
    assert reverse("pages:incident") + f"?cluster={cluster.pk}&amp;start=" in detail
    assert "What this rule watches" in detail and "alert-actions" not in detail  # a viewer cannot act


def test_a_dead_writer_that_proxysql_shunned_before_its_poll_keeps_its_evidence(
    adopted_lab, live_redis, galera_healthy, viewer_client
):
    """Which comes first after the kill is a race: the backend's poll (the ONLINE writer is unreachable) or the
    ProxySQL nodes' own SHUNNED verdict (their writer sessions failed on it; under load, often first). Either
    way the alert is about the dead writer, and its page shows that backend's chart."""
    cluster, doubles = adopted_lab
    set_rule("writer_none", for_s=0)
    tick()
    galera_healthy.kill(1)
    assert wait_for(lambda: all(shunned_writer(d) for d in doubles), 10), [runtime_writer(d) for d in doubles]
    assert until(lambda: len(firing("writer_none")) == 2, 15)
    server = Server.objects.get(port=3311)
    for alert in firing("writer_none"):
        assert "127.0.0.1:3311 SHUNNED" in alert.summary and alert.server_id == server.pk, (alert.summary, alert.server)
    detail = viewer_client.get(alert.get_absolute_url()).content.decode()
    assert reverse("monitoring:server_chart", args=[server.pk, "wsrep_state"]) + "?end=" in detail
    assert reverse("pages:server", args=[server.pk]) in detail


def runtime_writer(double):
    return demo.admin_sql(
        double.port,
        "SELECT hostname, port, status FROM runtime_mysql_servers WHERE hostgroup_id=100",
        user=double.user,
        password=double.password,
    )


def shunned_writer(double):
    return [(h, int(p), s) for h, p, s in runtime_writer(double)] == [("127.0.0.1", 3311, "SHUNNED")]


def wait_for(predicate, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def test_acknowledge_and_silence_from_the_alert(a_firing_alert, operator_client):
    cluster, alert = a_firing_alert
    response = operator_client.post(reverse("alerts:acknowledge", args=[alert.pk]), {"note": "restarting node 1"})
    assert response.status_code == 302
    alert.refresh_from_db()
    assert alert.acked_by == "otto-operator" and alert.ack_note == "restarting node 1"
    assert AuditEvent.objects.filter(
        action="acknowledge alert", actor="otto-operator", details__alert=alert.pk
    ).exists()
    response = operator_client.post(
        reverse("alerts:silence_create"),
        {
            "from_alert": alert.pk,
            "cluster": cluster.pk,
            "rule": alert.rule,
            "subject": alert.subject,
            "subject_label": alert.subject_label,
            "minutes": 60,
            "reason": "node 1 is being rebuilt",
        },
    )
    assert response.status_code == 302 and response.url == alert.get_absolute_url()
    s = Silence.objects.get()
    assert (s.cluster, s.rule, s.subject, s.created_by) == (cluster, "writer_none", alert.subject, "otto-operator")
    page = operator_client.get(reverse("alerts:list")).content.decode()
    assert page.count(">silenced<") == 1  # this subject only; the other node's alert is not silenced
    assert AuditEvent.objects.filter(action="silence alerts", details__silence=s.pk).exists()
    operator_client.post(reverse("alerts:silence_end", args=[s.pk]))
    assert Silence.objects.get().expired_by == "otto-operator"


def test_a_silence_of_everything_is_refused(db, operator_client):
    response = operator_client.post(reverse("alerts:silence_create"), {"minutes": 60, "reason": "quiet please"})
    assert response.status_code == 400 and "a silence of everything" in response.content.decode()
    assert not Silence.objects.exists()
    assert AuditEvent.objects.filter(action="silence alerts", outcome="invalid").exists()


def test_rules_fleet_wide_by_admins_and_per_cluster_by_operators(adopted_lab, operator_client, admin_user_role, client):
    cluster, _ = adopted_lab
    page = operator_client.get(reverse("alerts:cluster_rules", args=[cluster.pk])).content.decode()
    assert 'id="rule-readers_low"' in page and "minimum usable readers: 1 readers" in page  # the cluster's policy
    response = operator_client.post(
        reverse("alerts:cluster_rule_edit", args=[cluster.pk, "galera_recv_queue"]),
        {"severity": "critical", "for_s": "20", "p_threshold": "500"},
    )
    assert response.status_code == 302
    eff = rulesettings.effective(cluster, "galera_recv_queue")
    assert (eff.severity, eff.for_s, eff.params["threshold"]) == ("critical", 20.0, 500)
    event = AuditEvent.objects.get(action="change alert rule")
    assert event.details["after"]["params"] == {"threshold": 500.0} and event.details["scope"] == "galera-lab"
    response = operator_client.post(
        reverse("alerts:cluster_rule_edit", args=[cluster.pk, "galera_recv_queue"]), {"for_s": "-3"}
    )
    assert response.status_code == 302 and RuleSetting.objects.get().for_s == 20  # refused, nothing lost
    assert operator_client.post(reverse("alerts:rule_edit", args=["drift"]), {"for_s": "60"}).status_code == 403

    client.force_login(admin_user_role)
    client.post(reverse("alerts:rule_edit", args=["drift"]), {"for_s": "60", "enabled": "off"})
    rulesettings.forget()
    assert rulesettings.effective(cluster, "drift").enabled is False
    page = client.get(reverse("alerts:rules")).content.decode()
    assert 'id="rule-drift" data-rule="drift" class="overridden"' in page


def test_channels_keep_their_secret_and_pagerduty_needs_one(db, client, admin_user_role):
    client.force_login(admin_user_role)
    response = client.post(
        reverse("alerts:channel_create"),
        {
            "name": "pd",
            "kind": "pagerduty",
            "url": "https://events.example.org/v2/enqueue",
            "min_severity": "critical",
            "send_resolved": "on",
            "enabled": "on",
        },
    )
    assert response.status_code == 400 and "routing key" in response.content.decode()
    response = client.post(
        reverse("alerts:channel_create"),
        {
            "name": "pd",
            "kind": "pagerduty",
            "url": "https://events.example.org/v2/enqueue",
            "new_secret": "ROUTING-KEY-123",
            "min_severity": "critical",
            "send_resolved": "on",
            "enabled": "on",
        },
    )
    ch = Channel.objects.get()
    assert response.status_code == 302 and ch.secret == "ROUTING-KEY-123"
    page = client.get(ch.get_absolute_url()).content.decode()
    assert "ROUTING-KEY-123" not in page
    client.post(
        reverse("alerts:channel_edit", args=[ch.pk]),
        {
            "name": "pd",
            "kind": "pagerduty",
            "url": "https://events.example.org/v2/enqueue",
            "min_severity": "warning",
            "enabled": "on",
        },
    )
    ch.refresh_from_db()
    assert ch.secret == "ROUTING-KEY-123" and ch.min_severity == "warning" and not ch.send_resolved
    events = AuditEvent.objects.filter(action__in=["add alert channel", "change alert channel"], outcome="success")
    assert events.count() == 2 and all("ROUTING-KEY-123" not in json.dumps(e.details) for e in events)
    client.post(
        reverse("alerts:channel_create"),
        {"name": "mail", "kind": "email", "recipients": "not-an-address", "min_severity": "warning"},
    )
    assert not Channel.objects.filter(name="mail").exists()


def test_cluster_page_and_overview_show_firing_alerts(a_firing_alert, viewer_client):
    cluster, alert = a_firing_alert
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    assert 'id="cluster-alerts"' in page and page.count('data-rule="writer_none"') == 2
    assert reverse("alerts:cluster_rules", args=[cluster.pk]) in page
    overview = viewer_client.get(reverse("pages:overview")).content.decode()
    assert 'data-alerts-firing="2"' in overview and "2 critical" in overview


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_alert_page_refreshes_live_and_acknowledges(
    page, live_server, browser_login, operator_user, adopted_lab, live_redis
):
    cluster, (first, second) = adopted_lab
    set_rule("proxysql_unreachable", for_s=0)
    tick(["proxysql"])
    browser_login(operator_user)
    page.goto(f"{live_server.url}{reverse('alerts:list')}")
    assert page.locator("[data-open=none]").count() == 1
    second.set_mode("hang")
    try:
        assert until(lambda: firing("proxysql_unreachable"), 10, kinds=["proxysql"])
        # No reload: the htmx refresh (every 3 s) brings it in.
        row = page.wait_for_selector("tr[data-rule=proxysql_unreachable][data-state=firing]", timeout=8000)
        assert "does not answer (timeout)" in row.inner_text()
        page.click("tr[data-rule=proxysql_unreachable] a")
        page.fill("input[name=note]", "on it")
        page.click("#alert-actions form[action$='/acknowledge/'] button")
        page.wait_for_selector("text=acknowledged.")
        assert "by otto-operator" in page.inner_text("#alert-state") and "on it" in page.inner_text("#alert-state")
    finally:
        second.set_mode("normal")
    assert until(lambda: not firing("proxysql_unreachable"), 10, kinds=["proxysql"])
    page.wait_for_selector("#alert-state [data-state=resolved]", timeout=8000)  # the state refreshes by itself
    assert Alert.objects.get().acked_by == "otto-operator"
