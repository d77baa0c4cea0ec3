"""Alert notification tasks: flush a group when it is due, deliver a message with retries, and beat's sweep
for repeats and lost tasks. Thin: each calls one function of apps/alerts/notify.py."""

from celery import shared_task
from django.conf import settings

from apps.alerts import evaluate, notify


@shared_task(name="alerts.flush_group", ignore_result=True, soft_time_limit=30, time_limit=40)
def flush_group(group_pk):
    n = notify.flush(group_pk)
    if n:
        notify.deliver_first(n.pk)


# Not acks_late: a delivery that was half done is finished by the next try (receivers dedupe: PagerDuty by
# dedup_key, Alertmanager by labels); each try is logged.
@shared_task(name="alerts.deliver", bind=True, ignore_result=True, soft_time_limit=60, time_limit=75)
def deliver(self, notification_pk):
    delivered, retry = notify.attempt(notification_pk)
    if delivered:
        return
    if not retry or self.request.retries >= settings.ALERTS_DELIVERY_RETRIES:
        notify.give_up(
            notification_pk,
            f"gave up after {self.request.retries + 2} tries" + ("" if retry else ": the receiver refused the payload"),
        )
        return
    # The first try was made by the task that made the message, the first retry waited one base already.
    raise self.retry(
        countdown=notify.retry_delay(self.request.retries + 1), max_retries=settings.ALERTS_DELIVERY_RETRIES
    )


# Scheduled when the work that held a cluster's alerts is over (and, pending_due, for a pending alert's end of `for`
# when Redis did not answer, or queued before judge_due); a lost one costs at most a sweep (the rounds promote due
# alerts too).
@shared_task(name="alerts.judge_cluster", ignore_result=True, soft_time_limit=20, time_limit=25)
def judge_cluster(cluster_id, pending_due=False):
    return evaluate.judge_now(cluster_id, pending_due=pending_due)


# One per time slot in which pending alerts end their `for`: every cluster due by then, judged together. A lost or
# crashed one costs its clusters at most a sweep (the rounds promote due alerts).
@shared_task(name="alerts.judge_due", ignore_result=True, soft_time_limit=20, time_limit=25)
def judge_due(slot):
    return evaluate.judge_slot(slot)


@shared_task(name="alerts.flush_due", ignore_result=True, soft_time_limit=30, time_limit=40)
def flush_due():
    return {"sent": notify.flush_due(), "redelivered": notify.redeliver_stuck()}
