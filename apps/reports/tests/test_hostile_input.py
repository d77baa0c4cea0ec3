"""Hostile input against the report forms (their number fields: cluster, hour, weekday): a validation
message or a saved schedule, never a 500, nothing saved from a refused form."""

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings

from apps.accounts.tests.hostile import hostile_number, hostile_text
from apps.reports.models import Report, ReportSchedule

pytestmark = pytest.mark.django_db
FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FAST
@given(cluster=hostile_number, hour=hostile_number, weekday=hostile_number, period=hostile_text)
def test_schedule_form(client, admin_user_role, cluster, hour, weekday, period):
    client.force_login(admin_user_role)
    before = ReportSchedule.objects.count()
    response = client.post(
        reverse("reports:schedule_new"),
        {"cluster": cluster, "period": period, "hour": hour, "weekday": weekday, "recipients": "ops@example.org"},
    )
    assert response.status_code in (302, 400)
    assert ReportSchedule.objects.count() == before + (response.status_code == 302)
    ReportSchedule.objects.all().delete()  # examples share the test's database


@FAST
@given(cluster=hostile_number)
def test_build_form_refuses_clusters_that_do_not_exist(client, operator_user, cluster):
    client.force_login(operator_user)
    response = client.post(reverse("reports:build"), {"cluster": cluster, "period": "nope", "when": "last"})
    assert response.status_code == 400 and not Report.objects.exists()
