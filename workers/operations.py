"""Operation tasks. Not acks_late: re-running an operation is decided by the reaper, not redelivery."""

from celery import shared_task
from django.conf import settings

from apps.operations import executor, recheck, rollbacks, services


@shared_task(name="operations.execute", ignore_result=True)
def execute_operation(operation_id):
    return executor.run(operation_id)


@shared_task(name="operations.reap_stale", ignore_result=True, soft_time_limit=60)
def reap_stale_operations():
    recheck.expire_unstarted()
    services.expire_plans()
    return executor.reap_stale(settings.OPERATIONS_STALE_AFTER_S)


@shared_task(name="operations.retry_pending_rollbacks", ignore_result=True, soft_time_limit=60)
def retry_pending_rollbacks():
    return rollbacks.retry_due()
