"""Every operation re-checks its plan when a worker starts it, because the world may have moved since
the operator read the preview (a worker that came back late, a second confirm of the same drain):

- a confirmed plan that has not started within its cluster's validity window (plan_validity_s, 10 s by
  default) expires: its guards are too old to trust;
- otherwise the same operation is planned again, now, with its stored options: a guard that fails now
  and was not overridden at confirm refuses it, and so do statements per node that differ from the
  stored plan (what the operator saw is what runs, or nothing does). When the console's own record moved on
  since the plan (the configuration's version, the writer, the inventory's rows: based_on(), stamped on the
  plan when it is saved), the refusal says that first, in those words; guards and statements follow as detail.

Rule-driven operations (read-pool rules, failover) pass through the same check right after planning;
their planners read the nodes in parallel, so it costs one round of reads.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.proxysql import reusing
from apps.plans.vocabulary import OLD_SHAPE, Plan
from apps.plans.registry import KINDS, step_handler
from apps.configuration.services import latest
from apps.fleet.models import HostgroupMembership

from . import locks
from .choices import OperationState, StepState
from .models import Operation, OperationStep
from .switchover import current_writer

log = logging.getLogger(__name__)


@dataclass
class Refusal:
    state: str  # OperationState.REFUSED or EXPIRED
    message: str
    details: dict = field(default_factory=dict)


def replan(op):
    """The same operation planned again now, from its stored options, by its kind's registered planner."""
    spec = KINDS.get(op.kind)
    if spec is None:
        raise ValueError(f"no planner registered for {op.kind!r}")
    return spec.replan(op.cluster, op.plan.get("options") or {})


def statements(plan):
    """What runs on each node, comparable between two plans: {"step on node": {"sql", "rollback"}}."""
    out = {"(steps)": [s.key for s in plan.steps]}
    for step in plan.steps:
        handler = step_handler(step.kind)
        if handler.statements:  # statements to backends, kept in the step's params
            out.update(handler.statements(step))
        parts = [("", step.nodes)]
        if handler.on_timeout:
            parts.append((" (OFFLINE_HARD on timeout)", handler.on_timeout(step)))
        for suffix, nodes in parts:
            for node_id, spec in nodes.items():
                out[f"{step.key}{suffix} on {spec.get('name', node_id)}"] = {
                    "sql": spec["sql"],
                    "rollback": spec["rollback"],
                }
    return out


def based_on(cluster):
    """What a plan is based on in the console: the configuration's current version, the inventory's writer and
    its rows (status per backend and hostgroup). Stamped on the plan when it is saved (services.save_plan)."""
    version, writer = latest(cluster), current_writer(cluster)
    return {
        "version": version.number if version else None,
        "writer": str(writer.server) if writer else None,
        "inventory": {
            f"{m.server} hostgroup {m.hostgroup_id}": m.status
            for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server")
        },
    }


def moved_on(was, now, limit=5):
    """What moved in the console between two based_on() records, in the operator's words (empty: nothing)."""
    out = []
    if was["version"] != now["version"]:
        out.append(f"version {now['version']} is now current (was {was['version']})")
    if was["writer"] != now["writer"]:
        out.append(f"the writer is now {now['writer'] or 'none'} (was {was['writer'] or 'none'})")
    rows = []
    for key in sorted(was["inventory"].keys() | now["inventory"].keys()):
        server, _, hostgroup = key.partition(" hostgroup ")
        before, after = was["inventory"].get(key), now["inventory"].get(key)
        if after is None:
            rows.append(f"{server} left hostgroup {hostgroup}")
        elif before is None:
            rows.append(f"{server} joined hostgroup {hostgroup} ({after})")
        elif before != after:
            rows.append(f"{server} in hostgroup {hostgroup}: {before} → {after}")
    if rows:
        more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
        out.append("in the inventory: " + "; ".join(rows[:limit]) + more)
    return out


def expired(op, now=None):
    """A Refusal when the operation was confirmed longer ago than its cluster's validity window, else None."""
    now = now or timezone.now()
    validity = op.cluster.plan_validity_s
    if not op.confirmed_at or now - op.confirmed_at <= timedelta(seconds=validity):
        return None
    waited = (now - op.confirmed_at).total_seconds()
    return Refusal(
        OperationState.EXPIRED,
        f"expired: confirmed {waited:.1f} s before a worker started it, more than "
        f"the cluster's validity window of {validity} s; its guards are stale. Plan it again.",
        {"confirmed_at": op.confirmed_at.isoformat(), "waited_s": round(waited, 2), "validity_s": validity},
    )


def changed(op, connections=None):
    """A Refusal when the operation planned again now fails a guard that was not overridden at confirm, or
    would send other statements; else None. `connections`: open admin connections to read through."""
    stored = Plan.from_json(op.plan)
    if stored.unplaced_markers():
        return Refusal(OperationState.REFUSED, f"refused at start, nothing was changed: {OLD_SHAPE}")
    try:
        with locks.rechecking(op), reusing(connections or {}):
            fresh = replan(op)
    except Exception as exc:  # the inventory changed under it (a server removed...): nothing ran yet
        log.exception("operation %s could not be planned again", op.pk)
        return Refusal(
            OperationState.REFUSED, f"refused at start: it cannot be planned again ({exc!r})", {"error": repr(exc)}
        )
    overridden = {g.key for g in stored.failed_guards}  # confirm let these through with an admin's reason
    failed = [g for g in fresh.failed_guards if g.key not in overridden]
    confirmed_sql, now_sql = statements(stored), statements(fresh)
    differ = {
        k: {"confirmed": confirmed_sql.get(k), "now": now_sql.get(k)}
        for k in sorted(confirmed_sql.keys() | now_sql.keys())
        if confirmed_sql.get(k) != now_sql.get(k)
    }
    if not failed and not differ:
        return None
    reasons = []
    if failed:
        reasons.append("these guards fail now: " + "; ".join(f"{g.label} (now: {g.value})" for g in failed))
    if differ:
        reasons.append("the statements differ from the confirmed plan for " + ", ".join(differ))
    moved = moved_on(stored.facts["based_on"], based_on(op.cluster)) if stored.facts.get("based_on") else []
    message = "refused at start, nothing was changed: " + "; ".join(reasons) + ". Plan it again."
    if moved:
        message = (
            "refused at start, nothing was changed: the configuration moved on since this plan: "
            + "; ".join(moved)
            + ". Plan it again. In detail: "
            + "; ".join(reasons)
            + "."
        )
    return Refusal(
        OperationState.REFUSED,
        message,
        {
            "moved_on": moved,
            "failed_guards": [g.__dict__ for g in failed],
            "guards_now": [g.__dict__ for g in fresh.guards],
            "statements_differ": differ,
        },
    )


def refuse(op, refusal, recheck_ms):
    """The operation does not run: its steps are skipped, the lock released, the refusal audited."""
    with transaction.atomic():
        Operation.objects.filter(pk=op.pk).update(
            state=refusal.state, error=refusal.message, finished_at=timezone.now(), timings={"recheck_ms": recheck_ms}
        )
        OperationStep.objects.filter(operation=op).update(state=StepState.SKIPPED)
        record(
            f"{op.kind} {refusal.state}",
            actor=Actor.of_operation(op),
            cluster=op.cluster,
            target=op.title,
            outcome="refused",
            details={"operation": op.pk, "state": refusal.state, "reason": refusal.message, **refusal.details},
        )
    locks.release(op)


def expire_unstarted(now=None):
    """Confirmed operations that no worker started within their validity window: expired (audited) and their
    cluster lock released, so a lost task does not hold the cluster. A worker that comes later finds them
    no longer pending. Called by the reaper's beat task."""
    now = now or timezone.now()
    done = []
    for op in Operation.objects.filter(state=OperationState.PENDING, confirmed_at__isnull=False).select_related(
        "cluster"
    ):
        refusal = expired(op, now)
        if refusal and Operation.objects.filter(pk=op.pk, state=OperationState.PENDING).update(
            state=OperationState.RUNNING
        ):
            refuse(op, refusal, 0)
            done.append(op.pk)
    return done
