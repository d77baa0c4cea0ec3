"""Inventory tasks."""

from celery import shared_task

from apps.configuration import drift


@shared_task(name="fleet.watch_drift", ignore_result=True, soft_time_limit=25)
def watch_drift():
    """Every node's three layers against its cluster's configuration version: stored for the alert rules, audited."""
    return drift.watch()
