"""Roles: viewers read reports, operators build and send them, admins edit schedules; below that, 403."""

import pytest
from django.urls import reverse

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.monitoring.models import HOUR
from apps.reports.models import Report, ReportSchedule
from apps.reports import services

pytestmark = pytest.mark.django_db


@pytest.fixture
def report(report_cluster, history, day):
    history.healthy(day.start.timestamp(), day.end.timestamp(), step=3600, resolution=HOUR)
    return services.build_report(report_cluster, "daily", day, actor=Actor.system())


@pytest.fixture
def roleless_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_user(username="nobody", password="x"))
    return client


def test_viewer_reads_but_does_not_build_send_or_edit(viewer_client, report, report_cluster):
    for url in (
        reverse("reports:list"),
        report.get_absolute_url(),
        reverse("reports:pdf", args=[report.pk]),
        reverse("reports:schedules"),
    ):
        assert viewer_client.get(url).status_code == 200, url
    page = viewer_client.get(report.get_absolute_url()).content.decode()
    assert report.headline in page and f"/reports/{report.pk}/charts/c{report_cluster.pk}-timeline.png" in page
    assert 'action="/reports/build/"' not in viewer_client.get(reverse("reports:list")).content.decode()
    assert viewer_client.post(reverse("reports:build"), {"period": "daily", "when": "last"}).status_code == 403
    assert viewer_client.post(reverse("reports:send", args=[report.pk]), {"recipients": "a@b.org"}).status_code == 403
    assert viewer_client.get(reverse("reports:schedule_new")).status_code == 403
    assert AuditEvent.objects.filter(action="refused report_build", outcome="refused").exists()


def test_no_role_no_report(roleless_client, report):
    assert roleless_client.get(reverse("reports:list")).status_code == 403
    assert roleless_client.get(report.get_absolute_url()).status_code == 403
    assert roleless_client.get(reverse("reports:chart", args=[report.pk, "x"])).status_code == 403


def test_operator_builds_on_demand_and_sends(operator_client, report_cluster, report, mailoutbox):
    response = operator_client.post(
        reverse("reports:build"), {"cluster": report_cluster.pk, "period": "daily", "when": "rolling"}
    )
    new = Report.objects.exclude(pk=report.pk).get()
    assert response.status_code == 302 and response["Location"] == new.get_absolute_url()
    assert new.data["rolling"] and new.built_by == "otto-operator"
    assert operator_client.post(reverse("reports:build"), {"period": "hourly"}).status_code == 400
    response = operator_client.post(reverse("reports:send", args=[report.pk]), {"recipients": "ops@example.org"})
    assert response.status_code == 302 and mailoutbox[0].to == ["ops@example.org"]
    operator_client.post(reverse("reports:send", args=[report.pk]), {"recipients": "not an address"})
    assert len(mailoutbox) == 1
    assert operator_client.get(reverse("reports:schedule_new")).status_code == 403
    assert operator_client.post(reverse("reports:schedule_new"), {"period": "daily", "hour": 6}).status_code == 403


def test_admin_edits_schedules(client, admin_user_role, report_cluster):
    client.force_login(admin_user_role)
    response = client.post(
        reverse("reports:schedule_new"),
        {
            "cluster": report_cluster.pk,
            "period": "weekly",
            "hour": 7,
            "weekday": 0,
            "recipients": "ops@example.org, cto@example.org",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    schedule = ReportSchedule.objects.get()
    assert schedule.recipient_list == ["ops@example.org", "cto@example.org"] and schedule.weekday == 0
    bad = client.post(
        reverse("reports:schedule_edit", args=[schedule.pk]),
        {"period": "daily", "hour": 25, "weekday": 0, "recipients": "x@y.org, 'OR 1=1 --"},
    )
    assert bad.status_code == 400
    schedule.refresh_from_db()
    assert schedule.period == "weekly"
    assert client.get(reverse("reports:schedules")).status_code == 200
    assert client.post(reverse("reports:schedule_delete", args=[schedule.pk])).status_code == 302
    assert not ReportSchedule.objects.exists()
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"report schedule added", "report schedule deleted"} <= actions
