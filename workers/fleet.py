"""Inventory tasks."""
from celery import shared_task

from apps.fleet import drift


@shared_task(name="fleet.watch_drift", ignore_result=True, soft_time_limit=25)
def watch_drift():
    return drift.watch()
