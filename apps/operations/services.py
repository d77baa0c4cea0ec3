"""Writes for operations: save a plan as an Operation, confirm it (lock, steps, audit, enqueue), cancel.
Every one audits, in the same short transaction."""
from django.db import transaction
from django.utils import timezone

from apps.audit.services import record

from . import locks
from .choices import OperationState
from .models import Operation, OperationStep


class NotAllowed(Exception):
    pass


def save_plan(plan, *, request=None, user=None, rule=None):
    """The previewed plan, stored as PLANNED: what the operator saw is what will run."""
    actor = rule or (user or request.user).get_username()
    op = Operation.objects.create(cluster_id=plan.cluster_id, kind=plan.kind, title=plan.title[:300],
                                  requested_by=None if rule else (user or request.user), actor=actor,
                                  plan=plan.to_json())
    record(f"{plan.kind} planned", request=request, user=user, rule=rule, cluster=op.cluster, target=op.title,
           details={"operation": op.pk, "guards": [g.__dict__ for g in plan.guards], "facts": plan.facts,
                    "options": plan.options})
    return op


def confirm(op, *, request=None, user=None, rule=None, override_reason="", enqueue=True):
    """Lock the cluster and hand the operation to a worker. Failed guards need an admin's typed reason."""
    from apps.accounts.roles import ADMIN, has_role

    from .plans import Plan

    plan = Plan.from_json(op.plan)
    failed = plan.failed_guards
    actor_user = user or (request.user if request else None)
    if failed:
        hard = [g for g in failed if not g.overridable]
        can_override = (not hard and bool(override_reason.strip()) and actor_user is not None
                        and has_role(actor_user, ADMIN))
        if not can_override:
            record(f"{op.kind} refused", request=request, user=user, rule=rule, cluster=op.cluster, target=op.title,
                   outcome="refused", details={"operation": op.pk, "failed_guards": [g.__dict__ for g in failed],
                                               "override_reason": override_reason})
            if hard:
                raise NotAllowed("These guards cannot be overridden: " + "; ".join(f"{g.label} ({g.value})" for g in hard))
            raise NotAllowed("Guards failed: " + "; ".join(f"{g.label} ({g.value})" for g in failed)
                             + ". Only an admin can override them, with a reason.")
    with transaction.atomic():
        if not Operation.objects.filter(pk=op.pk, state=OperationState.PLANNED).update(
                state=OperationState.PENDING, override_reason=override_reason, heartbeat_at=timezone.now()):
            raise NotAllowed("This plan was already confirmed or discarded.")
        try:
            locks.acquire(op, ttl_s=120)
        except locks.LockHeld as exc:
            Operation.objects.filter(pk=op.pk).update(state=OperationState.CANCELLED, error=str(exc))
            record(f"{op.kind} refused", request=request, user=user, rule=rule, cluster=op.cluster, target=op.title,
                   outcome="refused", details={"operation": op.pk, "lock_holder": exc.holder})
            raise NotAllowed(f"Another operation holds the cluster: {exc.holder}") from None
        OperationStep.objects.bulk_create([OperationStep(operation=op, index=i, key=s.key, title=s.title[:300])
                                           for i, s in enumerate(plan.steps)])
        record(f"{op.kind} confirmed", request=request, user=user, rule=rule, cluster=op.cluster, target=op.title,
               details={"operation": op.pk, "plan": op.plan, "override_reason": override_reason,
                        "overridden_guards": [g.key for g in failed]})
        if enqueue:
            from workers.operations import execute_operation

            transaction.on_commit(lambda: execute_operation.delay(op.pk))
    op.refresh_from_db()
    return op


def cancel(op, *, request):
    updated = Operation.objects.filter(pk=op.pk, point_of_no_return=False,
                                       state__in=[OperationState.PENDING, OperationState.RUNNING]).update(cancel_requested=True)
    record(f"{op.kind} cancel requested", request=request, cluster=op.cluster, target=op.title,
           outcome="success" if updated else "refused", details={"operation": op.pk})
    if not updated:
        raise NotAllowed("Too late to cancel: the operation finished or passed its point of no return.")
