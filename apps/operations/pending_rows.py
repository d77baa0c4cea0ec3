"""The rows of statements a ProxySQL node did not take (PendingRollback), low in this app: stored by the executor
(keep), read by the planners' hard guard (guard) and the pages' banner, resolved by a repair (resolve_by_repair) and
ended with their operation (finish_if_resolved). Retrying them is rollbacks.py's work, above the executor and the
planners; the sync hold's rows wait for the others (waits_for)."""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.plans.vocabulary import Guard

from .choices import OperationState, PendingState
from .models import Operation, PendingRollback
from .sync_hold import HOLD_KEY

FIRST_RETRY_S = 1


def open_rows(cluster=None):
    rows = PendingRollback.objects.filter(state__in=PendingState.open())
    return rows if cluster is None else rows.filter(operation__cluster=cluster)


def describe(row):
    return f"operation #{row.operation_id} ({row.operation.title}): {row.what_is_pending}" + (
        " (superseded)" if row.state == PendingState.SUPERSEDED else ""
    )


def guard(cluster):
    """The hard guard of manual operations: none while a rollback or a finish is pending on the cluster."""
    rows = list(open_rows(cluster).select_related("node", "operation"))
    pending = " or ".join(sorted({r.operation.finish_or_rollback for r in rows})) or "rollback or finish"
    return Guard(
        "no_pending_rollback",
        f"No {pending} is pending on this cluster (it completes when the node answers, "
        "or repair the node from the inventory)",
        not rows,
        "; ".join(describe(r) for r in rows) or "none",
        False,
    )


def keep(op, pending):
    """Store, per node, the statements it did not take (the executor calls this in its transaction).
    `pending`: {node_id: {"statements": [{"step", "sql"}], "error": ...}}."""
    first = timezone.now() + timedelta(seconds=FIRST_RETRY_S)
    PendingRollback.objects.bulk_create(
        [
            PendingRollback(
                operation=op, node_id=int(node_id), statements=p["statements"], last_error=p["error"], next_try_at=first
            )
            for node_id, p in pending.items()
        ]
    )


def holds_only(row):
    """The row only restores its node's ProxySQL Cluster sync hold (executor.keep_held; or what is left of a row once
    its undo ran)."""
    return bool(row.statements) and all(s["step"] == HOLD_KEY for s in row.statements)


def waits_for(row):
    """The operation's other open rows whose node has not taken its undo yet, when this row only restores a sync
    hold: restored before, the node would pull what a paused peer runs as it resumes (its in-flight LOAD)."""
    if not holds_only(row):
        return []
    return [
        r
        for r in open_rows().filter(operation_id=row.operation_id).exclude(pk=row.pk).select_related("node")
        if not holds_only(r)
    ]


def resolve_by_repair(repair_op, node_ids):
    """A repair wrote the inventory's intent to these nodes: what was pending there (rollback or finish) is over
    (replaying it would undo the repair). Called by the repair's last step."""
    rows = list(open_rows(repair_op.cluster).filter(node_id__in=node_ids).select_related("node", "operation"))
    now = timezone.now()
    for row in rows:
        with transaction.atomic():
            if PendingRollback.objects.filter(pk=row.pk, state__in=PendingState.open()).update(
                state=PendingState.REPAIRED,
                resolved_at=now,
                resolution=f"repaired from the inventory by operation #{repair_op.pk}",
            ):
                record(
                    f"{row.operation.finish_or_rollback} resolved by repair",
                    actor=Actor.of_operation(repair_op),
                    cluster=repair_op.cluster,
                    target=f"#{row.operation_id} on {row.node.name}",
                    details={
                        "operation": row.operation_id,
                        "node": row.node.name,
                        "repair": repair_op.pk,
                        "statements_not_replayed": row.statements,
                    },
                )
    for op in {row.operation for row in rows}:
        finish_if_resolved(op)


def finish_if_resolved(op):
    """Once none of its nodes has anything pending, a finish-pending operation ends done, a rollback-pending one
    rolled_back."""
    if open_rows().filter(operation=op).exists():
        return
    resolution = "; ".join(f"{r.node.name}: {r.resolution}" for r in op.pending_rollbacks.select_related("node"))
    op.refresh_from_db()
    forward = op.finish_or_rollback == "finish"
    pending, state = (
        (OperationState.FINISH_PENDING, OperationState.DONE)
        if forward
        else (OperationState.ROLLBACK_PENDING, OperationState.ROLLED_BACK)
    )
    ended = "finished on every node" if forward else "rollback completed"
    with transaction.atomic():
        if not Operation.objects.filter(pk=op.pk, state=pending).update(
            state=state, finished_at=timezone.now(), error=f"{op.error}; {ended} ({resolution})"
        ):
            return
        record(
            f"{op.kind} {state}",
            actor=Actor.of_operation(op),
            cluster=op.cluster,
            target=op.title,
            outcome="success" if forward else "failure",
            details={"operation": op.pk, "state": state, "resolution": resolution},
        )


def banner(cluster=None):
    """The open rows, for the banners of the fleet and cluster pages: the finishes pending, then the rollbacks
    pending, each oldest first."""
    rows = open_rows(cluster).select_related("node", "operation__cluster", "superseded_by").order_by("created_at", "pk")
    return sorted(rows, key=lambda r: r.operation.finish_or_rollback)
