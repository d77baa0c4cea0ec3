"""Writes for operations: save a plan as an Operation, confirm it (lock, steps, audit, enqueue), cancel.
Every one audits, in the same short transaction."""

from django.db import transaction
from django.utils import timezone
from django.conf import settings
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractUser

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.models import Cluster
from apps.plans.registry import kind_spec
from controlplane import tasks
from apps.accounts.roles import ADMIN, has_role
from apps.plans.vocabulary import Plan

from . import locks
from .choices import OperationState
from .models import Operation, OperationStep
from .recheck import based_on


class NotAllowed(Exception):
    pass


def save_plan(plan: Plan, *, actor: Actor) -> Operation:
    """The previewed plan, stored as PLANNED for `actor` (apps/audit/actor.py): what the operator saw is what will
    run."""
    stored = plan.to_json()
    # what the plan was based on, for the re-check at start to say what moved (a new dict: to_json shares the facts)
    stored["facts"] = {**stored["facts"], "based_on": based_on(Cluster.objects.get(pk=plan.cluster_id))}
    with transaction.atomic():  # no operation without its "planned" audit row
        op = Operation.objects.create(
            cluster_id=plan.cluster_id,
            kind=plan.kind,
            title=plan.title[:300],
            requested_by=actor.user,
            actor=actor.who,
            plan=stored,
        )
        record(
            f"{plan.kind} planned",
            actor=actor,
            cluster=op.cluster,
            target=op.title,
            details={
                "operation": op.pk,
                "guards": [g.__dict__ for g in plan.guards],
                "facts": _bounded(plan.facts, op),
                "options": plan.options,
            },
        )
    return op


AUDIT_LIST_ITEMS = 100  # a list in the facts of a "planned" audit event: at most this many items


def _bounded(value: Any, op: Operation) -> Any:
    """Facts as the "planned" audit event holds them: a list longer than AUDIT_LIST_ITEMS keeps its first items
    and says how many more the operation's plan holds (a configuration file of 10,000 query rules made a 16 MB
    event of its diffs)."""
    if isinstance(value, dict):
        return {k: _bounded(v, op) for k, v in value.items()}
    if isinstance(value, list):
        kept = [_bounded(v, op) for v in value[:AUDIT_LIST_ITEMS]]
        more = len(value) - AUDIT_LIST_ITEMS
        return kept + [f"... {more:,} more in operation #{op.pk}'s plan"] if more > 0 else kept
    return value


def confirm(op: Operation, *, actor: Actor, override_reason: str = "", enqueue: bool = True) -> Operation:
    """Lock the cluster and hand the operation to a worker. Failed guards need an admin's typed reason; with
    the cluster's two-person rule, the confirmer must not be the planner. Who confirmed is recorded."""
    plan = Plan.from_json(op.plan)
    failed = plan.failed_guards
    actor_user, rule = actor.user, actor.is_rule

    def refused(message: str, **details: Any) -> NotAllowed:
        record(
            f"{op.kind} refused",
            actor=actor,
            cluster=op.cluster,
            target=op.title,
            outcome="refused",
            details={"operation": op.pk, "reason": message, **details},
        )
        return NotAllowed(message)

    late = plan_expired(op)
    if late:
        _expire(op, late, actor=actor)
        raise NotAllowed(late)
    if failed:
        hard = [g for g in failed if not g.overridable]
        can_override = (
            not hard and bool(override_reason.strip()) and actor_user is not None and has_role(actor_user, ADMIN)
        )
        if not can_override:
            details = {"failed_guards": [g.__dict__ for g in failed], "override_reason": override_reason}
            if hard:
                raise refused(
                    "These guards cannot be overridden: " + "; ".join(f"{g.label} ({g.value})" for g in hard), **details
                )
            raise refused(
                "Guards failed: "
                + "; ".join(f"{g.label} ({g.value})" for g in failed)
                + ". Only an admin can override them, with a reason.",
                **details,
            )
    policy = kind_spec(op.kind).confirm  # registered by the kind's app (kinds.py)
    needed = policy(op) if policy and not rule else None
    if needed and not (actor_user and has_role(actor_user, needed[0])):
        raise refused(needed[1], needed_role=needed[0])
    if not rule and op.cluster.two_person_rule and is_planner(op, actor_user):
        raise refused(
            f"This cluster requires two people: {op.actor} planned this operation, so someone else must confirm it.",
            two_person_rule=True,
            planned_by=op.actor,
        )
    confirmer = actor.who
    with transaction.atomic():
        claimed = Operation.objects.filter(pk=op.pk, state=OperationState.PLANNED).update(
            state=OperationState.PENDING,
            override_reason=override_reason,
            heartbeat_at=timezone.now(),
            confirmed_by=None if rule else actor_user,
            confirmer=confirmer,
            confirmed_at=timezone.now(),
        )
        if claimed:
            try:
                locks.acquire(op, ttl_s=120)
            except locks.LockHeld as exc:
                holder = exc.holder  # the plan stays planned: it may be confirmed once the cluster is free
                transaction.set_rollback(True)
            else:
                holder = None
                OperationStep.objects.bulk_create(
                    [
                        OperationStep(operation=op, index=i, key=s.key, title=s.title[:300])
                        for i, s in enumerate(plan.steps)
                    ]
                )
                record(
                    f"{op.kind} confirmed",
                    actor=actor,
                    cluster=op.cluster,
                    target=op.title,
                    details={
                        "operation": op.pk,
                        "plan": op.plan,
                        "override_reason": override_reason,
                        "overridden_guards": [g.key for g in failed],
                        "planned_by": op.actor,
                        "confirmed_by": confirmer,
                    },
                )
                if enqueue:
                    transaction.on_commit(lambda: tasks.enqueue("operations.execute", (op.pk,)))
    # Refusals are recorded after the transaction: an exception inside it would roll their audit back.
    if not claimed:
        state = Operation.objects.filter(pk=op.pk).values_list("state", flat=True).first()
        raise refused(f"This plan was already confirmed or discarded (it is {state}).", lost_race=True, state=state)
    if holder:
        raise refused(f"Another operation holds the cluster: {holder}", lock_holder=holder)
    op.refresh_from_db()
    return op


def is_planner(op: Operation, user: AbstractUser | None) -> bool:
    if user is None:
        return False
    if op.requested_by_id is not None:
        return op.requested_by_id == user.pk
    return op.actor == user.get_username()  # the planner's account is gone: compare the name as written


def plan_expired(op: Operation, now: datetime | None = None) -> str | None:
    """Why a planned operation can no longer be confirmed (nobody confirmed it within OPERATIONS_PLAN_CONFIRM_S of
    its planning: its guards are stale), or None."""
    window = settings.OPERATIONS_PLAN_CONFIRM_S
    age = ((now or timezone.now()) - op.created_at).total_seconds()
    if op.state != OperationState.PLANNED or age <= window:
        return None
    return (
        f"expired: planned {age / 60:.0f} min ago and not confirmed within {window / 60:g} min; its guards are "
        "stale. Plan it again."
    )


def expire_plans(now: datetime | None = None) -> list[int]:
    """Planned operations past their window (plan_expired): expired, audited. The beat's reaper calls it."""
    now = now or timezone.now()
    done = []
    late = Operation.objects.filter(
        state=OperationState.PLANNED, created_at__lt=now - timedelta(seconds=settings.OPERATIONS_PLAN_CONFIRM_S)
    )
    for op in late.select_related("cluster"):
        reason = plan_expired(op, now)
        if reason and _expire(op, reason):
            done.append(op.pk)
    return done


def _expire(op: Operation, reason: str, *, actor: Actor | None = None) -> int:
    actor = actor or Actor.rule("plan expiry")
    with transaction.atomic():
        updated = Operation.objects.filter(pk=op.pk, state=OperationState.PLANNED).update(
            state=OperationState.EXPIRED, error=reason, finished_at=timezone.now()
        )
        if updated:
            record(
                f"{op.kind} expired",
                actor=actor,
                cluster=op.cluster,
                target=op.title,
                outcome="refused",
                details={
                    "operation": op.pk,
                    "state": OperationState.EXPIRED,
                    "reason": reason,
                    "planned_at": op.created_at.isoformat(),
                },
            )
    return updated


def discard(op: Operation, *, actor: Actor, reason: str = "") -> None:
    """A planned operation nobody will confirm goes away (state cancelled, "discarded"), audited; a planned
    operation keeps no lock and sent nothing, so nothing else is undone. `reason`: why, when not a click."""
    with transaction.atomic():
        updated = Operation.objects.filter(pk=op.pk, state=OperationState.PLANNED).update(
            state=OperationState.CANCELLED,
            error=f"discarded before it was confirmed, by {actor.who}" + (f": {reason}" if reason else ""),
            finished_at=timezone.now(),
        )
        record(
            f"{op.kind} discarded",
            actor=actor,
            cluster=op.cluster,
            target=op.title,
            outcome="success" if updated else "refused",
            details={"operation": op.pk, "reason": reason},
        )
    if not updated:
        raise NotAllowed("Only a planned operation (not yet confirmed) can be discarded.")


def cancel(op: Operation, *, actor: Actor) -> None:
    with transaction.atomic():  # the worker stops at its next step only if the request is on record
        updated = Operation.objects.filter(
            pk=op.pk, point_of_no_return=False, state__in=[OperationState.PENDING, OperationState.RUNNING]
        ).update(cancel_requested=True)
        record(
            f"{op.kind} cancel requested",
            actor=actor,
            cluster=op.cluster,
            target=op.title,
            outcome="success" if updated else "refused",
            details={"operation": op.pk},
        )
    if not updated:
        raise NotAllowed("Too late to cancel: the operation finished or passed its point of no return.")
