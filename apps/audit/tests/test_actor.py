"""One service, every door: report schedules saved from the page, from the API with a session and with a token,
and run by their schedule; each audit row names the person (or schedule) and the door (actor_kind), and a
command's Actor names its user (issue 25 §1)."""

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.api.tests.conftest import token_client
from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster
from apps.reports import periods, services
from apps.reports.models import ReportSchedule

pytestmark = pytest.mark.django_db


def last(action):
    return AuditEvent.objects.filter(action=action).order_by("-id").first()


def test_the_audit_row_says_who_and_through_which_door(admin_user_role):
    cluster = Cluster.objects.create(name="c1", writer_hostgroup=100, reader_hostgroup=101)
    page = Client(REMOTE_ADDR="192.0.2.7")
    page.force_login(admin_user_role)
    assert (
        page.post(
            reverse("reports:schedule_new"),
            {"cluster": cluster.pk, "period": "weekly", "hour": 7, "weekday": 0, "enabled": "on"},
        ).status_code
        == 302
    )
    event = last("report schedule added")
    assert (event.actor, event.actor_kind, event.source_address) == ("ada-admin", "user", "192.0.2.7")

    response = page.post(
        "/api/v1/report-schedules/", {"cluster": cluster.pk, "period": "daily"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content[:300]
    event = last("report schedule added")
    assert (event.actor, event.actor_kind) == ("ada-admin", "api")  # the API door, signed in by the session

    response = token_client(admin_user_role, "ci-runner").post(
        "/api/v1/report-schedules/", {"cluster": None, "period": "daily"}
    )
    assert response.status_code == 201, response.content[:300]
    event = last("report schedule added")
    assert (event.actor, event.actor_kind) == ("ada-admin (token ci-runner)", "api")

    schedule = ReportSchedule.objects.get(cluster=cluster, period="weekly")
    report = services.run_schedule(schedule, periods.last_complete("weekly", timezone.now()))
    event = last("report built")
    assert (event.actor, event.actor_kind, event.actor_user_id) == (f"report schedule #{schedule.pk}", "schedule", None)
    assert services.Report.objects.get(pk=report).built_by == event.actor


def test_an_actor_names_itself_as_the_audit_log_shows_it(operator_user):
    assert (Actor.command(operator_user).name, Actor.command(operator_user).kind) == ("otto-operator", "command")
    assert (Actor.rule("automatic failover").name, Actor.system().name) == ("automatic failover", "system")
    assert Actor.schedule("report schedule #3").kind == "schedule"
