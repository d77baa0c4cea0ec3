"""Schedules: when one is due, the beat task building and mailing its report once, the beat entry."""

from datetime import datetime, time, timedelta

import pytest
from django.utils import timezone

from apps.monitoring.models import HOUR
from apps.reports import periods, services
from apps.reports.models import Report, ReportSchedule
from workers.reports import run_due_reports

pytestmark = pytest.mark.django_db


def at(day, hour, minute=0):
    return datetime.combine(day, time(hour, minute), tzinfo=timezone.get_current_timezone())


def test_due_slots_daily_and_weekly():
    daily = ReportSchedule(period="daily", hour=6)
    send, span = periods.due_slot(daily, at(periods.date(2026, 3, 11), 6, 1))
    assert send == at(periods.date(2026, 3, 11), 6) and span == periods.ending_on("daily", periods.date(2026, 3, 11))
    send, span = periods.due_slot(daily, at(periods.date(2026, 3, 11), 5, 59))
    assert span == periods.ending_on("daily", periods.date(2026, 3, 10))
    weekly = ReportSchedule(period="weekly", hour=7, weekday=0)  # Mondays: the Monday-to-Sunday before
    send, span = periods.due_slot(weekly, at(periods.date(2026, 3, 12), 9))  # a Thursday
    assert send == at(periods.date(2026, 3, 9), 7)
    assert timezone.localtime(span.start).weekday() == 0 and span.seconds == 7 * 86400


def test_the_beat_task_builds_and_mails_a_due_schedule_once(report_cluster, history, mailoutbox, day):
    a, b = day.start.timestamp(), day.end.timestamp()
    history.healthy(a, b, step=3600, resolution=HOUR)
    schedule = ReportSchedule.objects.create(
        cluster=report_cluster, period="daily", hour=6, recipients="ops@example.org,\ncto@example.org"
    )
    ReportSchedule.objects.filter(pk=schedule.pk).update(created_at=day.end)  # created after the 10th's 06:00 slot
    fleet = ReportSchedule.objects.create(cluster=None, period="weekly", hour=6, weekday=2, enabled=False)
    now = day.end + timedelta(hours=6, minutes=1)
    assert services.run_due(now=now - timedelta(minutes=2)) == []  # 05:59: its first slot has not come
    [pk] = services.run_due(now=now)
    report = Report.objects.get(pk=pk)
    assert (report.schedule_id, report.period, report.start, report.end) == (schedule.pk, "daily", day.start, day.end)
    assert report.built_by == f"report schedule #{schedule.pk}"
    [mail] = mailoutbox
    assert mail.to == ["ops@example.org", "cto@example.org"] and "lab-east: 100 % available" in mail.subject
    assert services.run_due(now=now + timedelta(minutes=1)) == []  # claimed: not built twice
    schedule.refresh_from_db()
    assert schedule.last_period_end == day.end and not schedule.last_error
    assert not fleet.reports.exists()


def test_the_celery_task_runs_due_schedules(report_cluster, day, mailoutbox):
    schedule = ReportSchedule.objects.create(cluster=report_cluster, period="daily", hour=0)
    ReportSchedule.objects.filter(pk=schedule.pk).update(created_at=timezone.now() - timedelta(days=3))
    run_due_reports.apply()
    assert Report.objects.filter(schedule=schedule).count() == 1
    assert not mailoutbox  # no recipients: archived only
    run_due_reports.apply()
    assert Report.objects.filter(schedule=schedule).count() == 1


def test_beat_has_the_report_entry():
    from controlplane.celery import _beat_schedule, app

    entries = {v["task"]: v for v in _beat_schedule().values()}
    assert entries["reports.run_due"]["schedule"] == 60.0
    assert "workers.reports" in app.conf.imports
