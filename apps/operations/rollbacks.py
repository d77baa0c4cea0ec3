"""Statements a ProxySQL node did not take: kept per node (PendingRollback) and retried until it answers.

Two cases, one machinery; only the words and the end state differ (Operation.finish_or_rollback):
- a rollback pending: when an operation rolls back and a node stops answering part-way, the statements that
  node did not take are stored, in order, and the operation stays `rollback_pending`; it ends `rolled_back`
  when every node has taken its statements.
- a finish pending: a node that stops answering past the point of no return misses the operation's last
  statements while the other nodes and the inventory go on; they are stored the same way, the operation stays
  `finish_pending` (done everywhere else, nothing rolled back) and ends `done` when every node has taken them.
A banner on the fleet and cluster pages names them. retry_due() (beat, every 2 s) retries a node as soon as
its last poll says it answers again, otherwise with backoff (1, 2, 4 ... 30 s); run_now() is the operator's
button. Every try is audited, success or failure with the node's error. While either is pending, manual
operations on the cluster are refused (guard()); automatic failover and repair still run.

The ProxySQL Cluster sync hold (sync_hold.py): while a node has not taken its undo, the nodes that did keep their
hold, each as a row that only restores it (executor.keep_held), run only once every other row of the operation ran
(waits_for): a paused node runs its in-flight LOAD when it resumes, and a peer whose sync was back on would pull it
and save it to its disk. Such a row is never superseded (restoring the sync undoes no later change; a repair would
leave the sync held).

Superseded: if another operation changed the cluster after the statements became pending (say automatic
failover moved the writer while the node was paused), replaying the old statements on that node would
undo the later change there only. They are never replayed: the row is marked superseded (audited) and the
node is repaired from the inventory, which holds the later change, as soon as it answers.
"""

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import msgspec
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import ClientError
from apps.monitoring import live
from apps.plans.vocabulary import SECRET_MARK, Plan, fill
from apps.configuration.secrets import values_for

from . import executor, locks, repair, services
from .choices import OperationKind, OperationState, PendingState
from .models import Operation, PendingRollback
from .pending_rows import finish_if_resolved, holds_only, open_rows, waits_for
from .restarts import restarted_during

RETRY_RULE = "pending rollback retry"
BACKOFF_CAP_S = 30
LEASE_S = 60
KEEP_TRIES = 20


# -- retries -----------------------------------------------------------------------------------------
def due(now=None):
    """Open rows to try now: their backoff has passed, or their node's poll saw it answer since the last try; a row
    that only restores a ProxySQL Cluster sync hold once its operation's other rows ran is not due before (waits_for)."""
    now = now or timezone.now()
    rows = list(
        open_rows()
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .select_related("node", "operation__cluster")
    )
    answering = _answering_since([r.node_id for r in rows])
    return [
        r
        for r in rows
        if (
            r.next_try_at <= now
            or (r.node_id in answering and (r.last_try_at is None or answering[r.node_id] > r.last_try_at))
        )
        and not waits_for(r)
    ]


class PollOutcome(msgspec.Struct):
    """What a retry reads of a ProxySQL node's latest-state document (live_doc.ProxySQLNodeDoc)."""

    ts: float
    ok: bool = True


def _answering_since(node_ids):
    """{node_id: time of its last successful poll} from the latest-state documents (no connection opened)."""
    try:
        docs = live.read_typed(live.PROXYSQL, set(node_ids), PollOutcome)
    except live.LiveUnavailable:
        return {}
    return {pk: datetime.fromtimestamp(doc.ts, tz=dt_timezone.utc) for pk, doc in docs.items() if doc and doc.ok}


def retry_due():
    """Beat: one try for every row that is due, then for the sync restores those tries released (waits_for). Returns
    the outcomes."""
    tried = due()
    outcomes = [attempt(row, actor=Actor.rule(RETRY_RULE)) for row in tried]
    released = [row for row in due() if row.pk not in {r.pk for r in tried}]
    return outcomes + [attempt(row, actor=Actor.rule(RETRY_RULE)) for row in released]


def run_now(op, *, actor):
    """The operator's "run the pending rollback now" ("finish on the node now"): one try per open node, whatever
    the backoff says."""
    rows = list(open_rows().filter(operation=op).select_related("node", "operation__cluster"))
    return [attempt(row, actor=actor) for row in rows]


def attempt(row, *, actor):
    """One try for one node, under a lease (a beat tick and a button never run the same row at once).
    Returns a sentence for the operator."""
    now = timezone.now()
    leased = (
        PendingRollback.objects.filter(pk=row.pk, state__in=PendingState.open())
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + timedelta(seconds=LEASE_S))
    )
    if not leased:
        return f"{row.node.name}: another try is running, or it is no longer pending"
    try:
        row.refresh_from_db()
        if waiting := waits_for(row):  # the operator's button too: the order is what keeps the pair from pulling
            return (
                f"{row.node.name}: not tried, its ProxySQL Cluster sync stays held until "
                f"{', '.join(r.node.name for r in waiting)} took the undo"
            )
        if row.state == PendingState.PENDING and not holds_only(row) and (later := superseding(row)):
            _supersede(row, later, actor=actor)
        if row.state == PendingState.SUPERSEDED:
            return _repair_instead(row, actor=actor)
        return _replay(row, actor=actor)
    finally:
        PendingRollback.objects.filter(pk=row.pk).update(claimed_until=None)


def superseding(row):
    """The first operation that changed this cluster after the statements became pending: done, failed past its
    point of no return, or left finishing on a node (repairs excepted: they write the inventory's intent and
    resolve the rows of the nodes they repair)."""
    return (
        Operation.objects.filter(cluster_id=row.operation.cluster_id, finished_at__gt=row.created_at)
        .exclude(pk=row.operation_id)
        .exclude(kind=OperationKind.REPAIR)
        .filter(
            Q(state__in=(OperationState.DONE, OperationState.FINISH_PENDING))
            | Q(state=OperationState.FAILED, point_of_no_return=True)
        )
        .order_by("finished_at")
        .first()
    )


def _supersede(row, later, *, actor):
    with transaction.atomic():
        if PendingRollback.objects.filter(pk=row.pk, state=PendingState.PENDING).update(
            state=PendingState.SUPERSEDED, superseded_by=later
        ):
            record(
                f"{row.operation.finish_or_rollback} superseded",
                actor=actor,
                cluster=row.operation.cluster,
                outcome="failure",
                target=f"#{row.operation_id} on {row.node.name}",
                details={
                    "operation": row.operation_id,
                    "node": row.node.name,
                    "superseded_by": later.pk,
                    "superseded_by_title": later.title,
                    "statements_not_replayed": row.statements,
                    "why": "replaying them would undo the later operation on this node only; the node is "
                    "repaired from the inventory instead",
                },
            )
    row.state, row.superseded_by = PendingState.SUPERSEDED, later


def _replay(row, *, actor):
    """Run the statements still to run, in order, each removed from the row once the node took it. The
    cluster lock is held meanwhile (taken only once the node answers): nothing else changes it under us."""
    op = row.operation
    admin = ProxySQLAdmin.for_node(row.node)
    try:
        admin.ping()
    except ClientError as exc:
        admin.close()
        return _tried(row, [], str(exc), actor=actor)
    try:
        locks.acquire(op, ttl_s=LEASE_S)
    except locks.LockHeld as exc:
        admin.close()
        return f"{row.node.name}: not tried, the cluster is busy ({exc.holder})"
    ran = []
    try:
        if not holds_only(row) and (later := superseding(row)):  # finished while we waited for the node: do not replay
            _supersede(row, later, actor=actor)
            return f"{row.node.name}: superseded by operation #{later.pk}; it is repaired from the inventory next"
        plan = Plan.from_json(op.plan)
        if plan.secrets is None and any(SECRET_MARK in s["sql"] for s in row.statements):
            return _tried(
                row,
                [],
                "these statements were stored before secrets were placed by position (issue 22) "
                "and hold a secret marker: they are not run on a guess. Repair the node from the inventory.",
                actor=actor,
            )
        secrets = _secrets(op, plan, row.statements)
        while row.statements:
            statement = row.statements[0]
            sql = fill(statement["sql"], plan.placed(statement["sql"]), secrets, admin.render)
            admin.run(sql, action=f"{op.finish_or_rollback} {statement['step']} (retry)")
            ran.append({**statement, "at": timezone.now().isoformat()})
            row.statements = row.statements[1:]
            PendingRollback.objects.filter(pk=row.pk).update(statements=row.statements, ran=row.ran + ran)
        restarted = restarted_during(op, admin)
    except ClientError as exc:
        return _tried(row, ran, str(exc), actor=actor)
    finally:
        locks.release(op)
        admin.close()
    if restarted:  # after the lock: a repair takes it
        return _recheck(row, ran, actor=actor)
    return _tried(row, ran, "", actor=actor)


def _recheck(row, ran, *, actor):
    """Every statement ran on a node that restarted during the operation: its memory, runtime and disk are read against
    the inventory (what a rollback returns to, what a finish recorded). Equal: the try ends as usual. Otherwise the
    node is repaired from the inventory (a repair operation, as for a superseded row), and while that is refused or
    fails the row stays open, said: never "rolled back" or "done" while a layer holds something else."""
    plan = repair.plan_repair(row.operation.cluster, [row.node_id])
    node = plan.facts["nodes"].get(str(row.node_id))
    if node is None:
        unread = "; ".join(g.value for g in plan.failed_guards if g.key == "proxysql_reachable")
        return _tried(
            row,
            ran,
            f"restarted during the operation; its layers could not be read to check them: {unread}",
            actor=actor,
        )
    if node["nothing_to_do"]:
        return _tried(
            row, ran, "", actor=actor, checked=["restarted during the operation: every layer equal to the inventory"]
        )
    why = "restarted during the operation, its layers differ from the inventory (" + "; ".join(node["changes"]) + ")"
    return _repair_instead(row, actor=actor, why=why, ran=ran, plan=plan)


def _secrets(op, plan, statements):
    """Values for the secrets the planner placed in these statements (a configuration change's undo of a password)."""
    refs = {ref for statement in statements for _, ref in plan.placed(statement["sql"])}
    if not refs:
        return {}

    return values_for(op.cluster_id, refs)


def _repair_instead(row, *, actor, why="superseded", ran=(), plan=None):
    """A superseded row (or, `why`, a node found unlike the inventory by _recheck, `plan` its repair): repair its node
    from the inventory (a repair operation of its own, run here) once the node answers. The repair resolves the row."""
    ran = list(ran)
    if plan is None:
        try:
            with ProxySQLAdmin.for_node(row.node) as admin:
                admin.ping()
        except ClientError as exc:
            return _tried(row, ran, f"{why}; waiting for the node to answer to repair it: {exc}", actor=actor)
        plan = repair.plan_repair(row.operation.cluster, [row.node_id])
    if not plan.guards_passed:
        failed = "; ".join(f"{g.label} ({g.value})" for g in plan.failed_guards)
        return _tried(row, ran, f"{why}; the repair is refused: {failed}", actor=actor)
    op = services.save_plan(
        plan, actor=Actor.rule(RETRY_RULE)
    )  # automatic: it follows from the rule above, whoever asked
    try:
        services.confirm(op, actor=Actor.rule(RETRY_RULE), enqueue=False)
    except services.NotAllowed as exc:
        return _tried(row, ran, f"{why}; the repair is refused: {exc}", actor=actor)
    executor.run(op.pk)
    op.refresh_from_db()
    error = "" if op.state == OperationState.DONE else f"{why}; repair #{op.pk} ended {op.state}: {op.error}"
    row.refresh_from_db()  # resolved by the repair (repaired): the try must not end it otherwise
    return _tried(row, ran, error, actor=actor, repair=op, checked=[why] if why != "superseded" else None)


def _tried(row, ran, error, *, actor, repair=None, checked=None):
    """Record one try (row and audit), set the next one by backoff, and end the operation when it was the last.
    `checked`: what a check of the node after its statements found (_recheck)."""
    now = timezone.now()
    attempts = row.attempts + 1
    backoff_s = min(BACKOFF_CAP_S, 2 ** (attempts - 1))
    fields = {
        "attempts": attempts,
        "last_try_at": now,
        "last_error": error,
        "tries": (
            row.tries
            + [{"at": now.isoformat(), "outcome": "failure" if error else "success", "error": error, "ran": len(ran)}]
        )[-KEEP_TRIES:],
        "next_try_at": now + timedelta(seconds=backoff_s),
    }
    if not error and row.state == PendingState.PENDING and not row.statements:
        fields.update(
            state=PendingState.DONE, resolved_at=now, resolution=f"{len(row.ran) + len(ran)} statement(s) ran on retry"
        )
    op = row.operation
    with transaction.atomic():
        PendingRollback.objects.filter(pk=row.pk).update(**fields)
        record(
            f"{op.finish_or_rollback} retry",
            actor=actor,
            cluster=op.cluster,
            outcome="failure" if error else "success",
            target=f"#{op.pk} on {row.node.name}",
            details={
                "operation": op.pk,
                "node": row.node.name,
                "attempt": attempts,
                "ran": ran,
                "error": error,
                "still_to_run": row.statements,
                "repair": repair.pk if repair else None,
                "next_try_in_s": backoff_s if error else None,
                **({"checked": checked} if checked else {}),
            },
        )
    finish_if_resolved(op)
    if error:
        return f"{row.node.name}: {error}"
    if repair:
        return f"{row.node.name}: repaired from the inventory by operation #{repair.pk}"
    if op.finish_or_rollback == "finish":
        return f"{row.node.name}: {len(ran)} statement(s) ran; the operation is finished there"
    return f"{row.node.name}: {len(ran)} statement(s) ran; its rollback is complete"
