"""Alert channels and report schedules through the API (issue 23 §5): the pages' forms and services, so the same
rules (the ALERT_CHANNEL_DESTINATIONS allow-list, one schedule per scope and period), roles and audit; a channel's
secret and URL are never answered."""

import pytest

from apps.alerts.models import Channel
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster
from apps.reports.models import ReportSchedule

from .conftest import error_of, token_client

pytestmark = pytest.mark.django_db
HOOK = {
    "name": "ops",
    "kind": "webhook",
    "url": "https://hooks.example.net/services/T0/B0/s3cr3t-path",
    "min_severity": "warning",
}


def expect(response, status):
    assert response.status_code == status, response.content[:600]
    return response.json() if response.content else None


def test_alert_channels_are_checked_as_on_the_page_and_never_show_a_secret(admin_user_role, viewer_user, settings):
    settings.ALERT_CHANNEL_DESTINATIONS = ["hooks.example.net:443"]
    cluster = Cluster.objects.create(name="c1", writer_hostgroup=100, reader_hostgroup=101)
    admin = token_client(admin_user_role)
    refused = error_of(admin.post("/api/v1/alert-channels/", {**HOOK, "url": "http://169.254.169.254/latest/"}), 400)
    assert "is not among the destinations" in refused["fields"]["url"][0]
    assert (
        "needs the routing key"
        in error_of(admin.post("/api/v1/alert-channels/", {**HOOK, "kind": "pagerduty"}), 400)["fields"]["new_secret"][
            0
        ]
    )
    assert (
        "at least one address"
        in error_of(
            admin.post("/api/v1/alert-channels/", {"name": "mail", "kind": "email", "min_severity": "warning"}), 400
        )["message"]
    )
    assert "kind" in error_of(admin.post("/api/v1/alert-channels/", {**HOOK, "kind": "carrier-pigeon"}), 400)["fields"]
    assert not Channel.objects.exists()

    made = expect(
        admin.post(
            "/api/v1/alert-channels/",
            {**HOOK, "kind": "pagerduty", "secret": "routing-key-1", "clusters": [cluster.pk]},
        ),
        201,
    )
    assert made["destination"] == "hooks.example.net:443" and made["secret_set"] and made["clusters"] == [cluster.pk]
    channel = Channel.objects.get(pk=made["id"])
    assert channel.secret == "routing-key-1"
    viewer = token_client(viewer_user)
    for answer in (viewer.get("/api/v1/alert-channels/"), viewer.get(f"/api/v1/alert-channels/{channel.pk}/")):
        text = answer.content.decode()
        assert answer.status_code == 200 and "routing-key-1" not in text and "s3cr3t-path" not in text
    error_of(viewer.request("patch", f"/api/v1/alert-channels/{channel.pk}/", {"enabled": False}), 403)

    changed = expect(admin.request("patch", f"/api/v1/alert-channels/{channel.pk}/", {"enabled": False}), 200)
    assert changed["enabled"] is False and changed["secret_set"]  # the fields not named keep their values
    channel.refresh_from_db()
    assert (
        channel.secret == "routing-key-1" and channel.url == HOOK["url"] and list(channel.clusters.all()) == [cluster]
    )
    error_of(admin.request("patch", f"/api/v1/alert-channels/{channel.pk}/", {"url": "http://10.0.0.1/x"}), 400)
    expect(admin.request("delete", f"/api/v1/alert-channels/{channel.pk}/"), 204)
    assert not Channel.objects.exists()
    events = list(
        AuditEvent.objects.filter(action__endswith="alert channel").order_by("id").values_list("action", "outcome")
    )
    assert events == [("add alert channel", "invalid")] * 4 + [
        ("add alert channel", "success"),
        ("change alert channel", "success"),
        ("change alert channel", "invalid"),
        ("delete alert channel", "success"),
    ]
    change = AuditEvent.objects.get(action="change alert channel", outcome="success").details
    assert change["before"]["enabled"] is True and change["after"]["enabled"] is False
    assert "routing-key-1" not in str(AuditEvent.objects.values_list("details", flat=True))


def test_report_schedules_through_the_api(admin_user_role, operator_user):
    cluster = Cluster.objects.create(name="c1", writer_hostgroup=100, reader_hostgroup=101)
    admin = token_client(admin_user_role)
    made = expect(
        admin.post(
            "/api/v1/report-schedules/",
            {"cluster": cluster.pk, "period": "weekly", "hour": 7, "recipients": "dba@example.com"},
        ),
        201,
    )
    assert (made["cluster"], made["period"], made["hour"], made["enabled"]) == (cluster.pk, "weekly", 7, True)
    again = error_of(admin.post("/api/v1/report-schedules/", {"cluster": cluster.pk, "period": "weekly"}), 400)
    assert "already a schedule for this scope and period" in again["message"]
    assert "hour" in error_of(admin.post("/api/v1/report-schedules/", {"period": "daily", "hour": 24}), 400)["fields"]
    assert (
        "recipients"
        in error_of(admin.post("/api/v1/report-schedules/", {"period": "daily", "recipients": "not an address"}), 400)[
            "fields"
        ]
    )
    fleet = expect(admin.post("/api/v1/report-schedules/", {"cluster": None, "period": "daily"}), 201)
    assert fleet["cluster"] is None

    operator = token_client(operator_user)
    error_of(operator.post("/api/v1/report-schedules/", {"period": "weekly"}), 403)
    assert [r["id"] for r in expect(operator.get("/api/v1/report-schedules/"), 200)["results"]] == [
        made["id"],
        fleet["id"],
    ]
    changed = expect(admin.request("patch", f"/api/v1/report-schedules/{made['id']}/", {"hour": 9}), 200)
    assert (changed["hour"], changed["period"], changed["recipients"]) == (9, "weekly", "dba@example.com")
    expect(admin.request("delete", f"/api/v1/report-schedules/{fleet['id']}/"), 204)
    assert list(ReportSchedule.objects.values_list("pk", flat=True)) == [made["id"]]
    events = list(
        AuditEvent.objects.filter(action__startswith="report schedule").order_by("id").values_list("action", "outcome")
    )
    assert events == [("report schedule added", "success")] + [("report schedule added", "invalid")] * 3 + [
        ("report schedule added", "success"),
        ("report schedule changed", "success"),
        ("report schedule deleted", "success"),
    ]
    assert AuditEvent.objects.get(action="report schedule changed").details["after"] == {"hour": "9"}
