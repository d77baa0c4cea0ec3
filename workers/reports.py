"""Report tasks. run_due is idempotent (each schedule's period is claimed by a conditional UPDATE), so a
lost or repeated tick neither skips nor doubles a report."""

from celery import shared_task

from apps.reports import services


@shared_task(name="reports.run_due", ignore_result=True, soft_time_limit=600, time_limit=660)
def run_due_reports():
    return services.run_due()
