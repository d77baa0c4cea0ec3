"""Audit tasks. Thin: retention and the summaries of repeated refusals each call one service in apps/audit."""

from celery import shared_task

from apps.audit import services


# Idempotent (a run with nothing due does nothing, a half-done removal is finished by the next run),
# so a lost or doubled tick is harmless; no retries.
@shared_task(name="audit.archive_old_events", ignore_result=True, soft_time_limit=3000, time_limit=3300)
def archive_old_events():
    archive = services.archive_old_events()
    return None if archive is None else {"archive": archive.pk, "count": archive.count, "last_id": archive.last_id}


# Idempotent: a window already summarised is not summarised again; a lost tick waits for the next one.
@shared_task(name="audit.flush_refusal_bursts", ignore_result=True, soft_time_limit=50, time_limit=60)
def flush_refusal_bursts():
    return services.flush_refusal_bursts()
