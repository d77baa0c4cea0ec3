"""Issue 39: beat lost while a rollback is pending. Nothing else retries a pending row (the worker's own path
ended with the operation rollback_pending), so while beat is down the operation stays rollback_pending, its
statements still to run, even once the node would take them: it never says rolled back before its undos ran.
When beat is back its retry task (every 2 s) runs them and the operation ends rolled back. Real Celery worker and
beat on the test's Redis."""

import pytest

from apps.audit.models import AuditEvent
from apps.operations.choices import OperationState, PendingState
from apps.operations.models import Operation, PendingRollback

from .conftest import fail_statements, runtime, servers, wait_for
from .test_pending_rollbacks import pending_switchover


@pytest.mark.django_db(transaction=True)
def test_a_rollback_pending_while_beat_is_lost_waits_for_beat_and_then_runs_its_undos(
    adopted_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory
):
    import time

    cluster, (first, second) = adopted_lab
    before = servers(first)
    op = pending_switchover(cluster, (first, second), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING, op.error
    celery_factory("worker", redis_server, OPERATIONS_STALE_AFTER_S=3)  # a worker, but no beat
    fail_statements(second, None)  # the node would take the statements now
    time.sleep(8)  # longer than the row's backoff (1 s), the heartbeat window and a reaper tick
    row = PendingRollback.objects.get(operation=op)
    assert (row.state, row.attempts, len(row.statements)) == (PendingState.PENDING, 0, 4)
    assert Operation.objects.get(pk=op.pk).state == OperationState.ROLLBACK_PENDING
    assert runtime(second, 100) == [("127.0.0.1", 3311, "OFFLINE_SOFT")]  # its undos have not run
    assert not AuditEvent.objects.filter(action="switchover rolled_back").exists()

    celery_factory("beat", redis_server, MONITOR_SHARDS=1)  # beat is back
    assert wait_for(lambda: Operation.objects.get(pk=op.pk).state == OperationState.ROLLED_BACK, 40), (
        Operation.objects.get(pk=op.pk).error
    )
    row.refresh_from_db()
    assert row.state == PendingState.DONE and row.statements == [] and len(row.ran) == 4
    assert servers(second) == servers(first) == before
    assert runtime(second, 100) == [("127.0.0.1", 3311, "ONLINE")]
    assert AuditEvent.objects.filter(action="rollback retry", outcome="success").count() == 1
