"""Issue 25: save_plan, cancel and the executor's finish wrote their audit row after the write's transaction, so an
audit log that stopped answering left an operation planned, cancelled or ended that the log never heard of. The
audit row now commits with the write, or neither does (the outage: a trigger, apps/audit/tests/faults.py)."""

import pytest
from django.db import DatabaseError

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.audit.tests.faults import answer, audit_outage  # noqa: F401 (a fixture)
from apps.fleet.models import Server
from apps.operations import executor, locks, services, switchover
from apps.operations.choices import OperationState
from apps.operations.models import Operation

pytestmark = pytest.mark.django_db


def plan(cluster):
    return switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True, drain_timeout_ms=2000)


def test_no_operation_is_planned_without_its_audit_row(adopted_lab, operator_user, audit_outage):
    cluster, _ = adopted_lab
    audit_outage("switchover planned")
    with pytest.raises(DatabaseError, match="the audit log does not answer"):
        services.save_plan(plan(cluster), actor=Actor.command(operator_user))
    assert not Operation.objects.exists()


def test_a_cancel_is_requested_only_with_its_audit_row(adopted_lab, operator_user, audit_outage):
    cluster, _ = adopted_lab
    op = services.save_plan(plan(cluster), actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)  # pending: a worker would start it
    audit_outage("switchover cancel requested")
    with pytest.raises(DatabaseError):
        services.cancel(op, actor=Actor.command(operator_user))
    op.refresh_from_db()
    assert not op.cancel_requested  # the worker will not stop for a request the log does not hold


def test_an_operation_ends_only_with_its_audit_row(adopted_lab, operator_user, audit_outage):
    cluster, _ = adopted_lab
    op = services.save_plan(plan(cluster), actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    audit_outage("switchover done")
    with pytest.raises(DatabaseError):
        executor.run(op.pk)
    op.refresh_from_db()
    # Not "done" without its audit row: still running, the cluster still locked, visible as such ...
    assert op.state == OperationState.RUNNING and locks.current_holder(cluster) is not None
    assert not AuditEvent.objects.filter(action="switchover done").exists()
    # ... until the reaper ends it once the log answers: an ending it records. Every step was done (past the point
    # of no return): the reaper finishes it (issue 39), said in the audit row.
    answer()
    assert executor.reap_stale(stale_after_s=0) == [op.pk]
    op.refresh_from_db()
    assert op.state == OperationState.DONE, op.error
    done = AuditEvent.objects.get(action="switchover done", details__operation=op.pk)
    assert done.details["finished_by"] == "the reaper, after its worker stopped"
    assert locks.current_holder(cluster) is None
