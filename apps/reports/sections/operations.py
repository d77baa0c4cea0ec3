"""Operations of the period, writer changes (switchover, failover) with the writer interruption each
caused, and the read-pool rules' actions, dry runs and refusals."""

from apps.alerts import native_failover
from apps.audit.models import AuditEvent
from apps.audit.services import count_with_repeats
from apps.plans import registry
from apps.operations.choices import OperationKind, OperationState

from .. import fmt, history, measured
from ..history import as_dt
from .common import NONE, OUT, UNREACHABLE, backend_state


def _spec(op):
    """Its kind's spec; a kind no longer registered (an old row) is neither automatic nor a writer change."""
    return registry.KINDS.get(op.kind) or registry.OperationSpec(op.kind, op.kind, None, None)


def operation(ctx, op):
    return {
        "id": op.pk,
        "url": op.get_absolute_url(),
        "kind": op.kind,
        "kind_label": op.get_kind_display(),
        "state": op.state,
        "state_label": op.get_state_display(),
        "title": op.title,
        "actor": op.actor,
        "automatic": op.requested_by_id is None and _spec(op).run_by_rule,
        "start": op.started_at.timestamp(),
        "end": op.finished_at.timestamp() if op.finished_at else None,
        "total_ms": (op.timings or {}).get("total_ms", op.duration_ms),
        "error": op.error[:300],
    }


def writer_changes(ctx, ops, backends_tl, hostgroups_tl):
    writer_tl = hostgroups_tl.get(ctx.cluster.writer_hostgroup, [])
    out = []
    for op in ops:
        if not _spec(op).moves_writer:
            continue
        row = operation(ctx, op)
        steps = {s.key: s for s in op.steps.all()}
        old_id, new_id = _writer_pair(op)
        row["old"] = str(ctx.servers[old_id]) if old_id in ctx.servers else "?"
        row["new"] = str(ctx.servers[new_id]) if new_id in ctx.servers else "?"
        row["changed"] = op.state == OperationState.DONE or (
            op.state == OperationState.FAILED and op.point_of_no_return
        )
        ms, how = (
            _switchover_interruption(op, steps)
            if op.kind == OperationKind.SWITCHOVER
            else _failover_interruption(ctx, op, steps, old_id, backends_tl.get(old_id, []))
        )
        row["interruption_ms"] = None if ms is None else round(ms, 1)
        row["how"] = how
        lo = op.started_at.timestamp() - ctx.h.max_gap
        hi = (op.finished_at or op.started_at).timestamp() + ctx.h.max_gap
        row["polls_saw_none_s"] = round(
            sum(min(b, hi) - max(a, lo) for a, b, v in writer_tl if v[0] == NONE and b > lo and a < hi), 3
        )
        out.append(row)
    return out


def _failover_interruption(ctx, op, steps, old_id, old_tl):
    """From the last good poll of the old writer (the monitoring history: it failed at some moment after it)
    to the new writer ONLINE; where that poll is not known, from the first failed poll or the rollup bucket
    it lies in, else the operation's own time."""
    move = steps.get("move")
    end = (move.finished_at if move and move.finished_at else op.finished_at or op.started_at).timestamp()
    began = op.started_at.timestamp()
    first_bad = None
    for a, b, v in old_tl:
        if v[0] in (UNREACHABLE, OUT) and a <= began and b >= began - ctx.h.max_gap:
            first_bad = a
    # Walk back over adjacent bad segments (unreachable after "not Primary", say).
    if first_bad is not None:
        for a, b, v in reversed(old_tl):
            if v[0] in (UNREACHABLE, OUT) and b >= first_bad - 1e-6 and a < first_bad:
                first_bad = a
    last = max(
        (row for _, _, row in ctx.h.backends.get(old_id, []) if row[0] < (began if first_bad is None else first_bad)),
        default=None,
        key=lambda row: row[0],
    )
    if last is not None and last[1] == 0 and backend_state(last)[0] not in (UNREACHABLE, OUT):
        after = (
            f"its first failed poll at {fmt.clock(first_bad)}"
            if first_bad is not None
            else "no failed poll before the failover started"
        )
        return (
            (end - last[0]) * 1000,
            f"from the last good poll of the old writer ({fmt.clock(last[0])}; {after}) to the new writer "
            f"ONLINE ({fmt.clock(end)}): it failed at some moment after that poll, the polls cannot say when",
        )
    if first_bad is None:
        total = (op.timings or {}).get("total_ms")
        return total, "the failover operation itself (no poll of the old writer found before it)"
    resolution = next((r for r, lo, hi in sorted(ctx.h.backend_pieces) if lo <= first_bad < hi), 0)
    if resolution:
        return (
            (end - first_bad) * 1000,
            f"from the start of the first {history.RESOLUTION_NAMES[resolution][:-1]} bucket in which the old "
            f"writer failed a poll ({fmt.clock(first_bad)}) to the new writer ONLINE ({fmt.clock(end)}): an upper "
            f"bound, the raw polls of that time are no longer kept",
        )
    return (
        (end - first_bad) * 1000,
        f"from the first failed poll of the old writer ({fmt.clock(first_bad)}) to the new writer ONLINE "
        f"({fmt.clock(end)}); the failure itself came up to one poll interval "
        f"({fmt.duration(ctx.cluster.backend_poll_interval_s)}) before that poll",
    )


def manager_moves(ctx):
    """The writer moves of ProxySQL's own manager on a natively managed cluster (alerts/native_failover.py records
    them, measured from the writer's death to the new writer ONLINE on every node), oldest first."""
    if not ctx.cluster.native_manager:
        return []
    moves = native_failover.recent_moves(ctx.cluster.pk, as_dt(ctx.start), as_dt(ctx.end), limit=100)
    return [
        {
            "at": m["at"].timestamp(),
            "what": m["action"],
            "old": m.get("old_writer"),
            "new": m.get("new_writer"),
            "failover_ms": m.get("failover_ms"),
        }
        for m in reversed(moves)
    ]


def read_pool(ctx, ops):
    actions = [operation(ctx, op) for op in ops if op.kind == OperationKind.READ_POOL]
    events = AuditEvent.objects.filter(
        cluster_id=ctx.cluster.pk, created_at__gte=as_dt(ctx.start), created_at__lt=as_dt(ctx.end)
    )
    dry = list(events.filter(action="read-pool rules (dry run)").order_by("created_at")[:50])
    alerts = events.filter(action="read-pool alert").count()
    # repeated refusals are summarised in the log (apps/audit/services.py): count what each summary stands for
    refused = count_with_repeats(events.filter(action__in=["read_pool refused", "failover refused"]))
    return {
        "actions": actions,
        "done": sum(1 for a in actions if a["state"] == OperationState.DONE),
        "dry_runs": [{"at": e.created_at.timestamp(), "would": _would_change(e.details)} for e in dry],
        "dry_run_count": events.filter(action="read-pool rules (dry run)").count(),
        "alerts": alerts,
        "refused": refused,
    }


def _writer_pair(op):
    options = (op.plan or {}).get("options") or {}
    old, new = options.get("old_writer"), options.get("new_writer")
    if old is None or new is None:
        for step in (op.plan or {}).get("steps", []):
            if step.get("key") == "inventory":
                params = step.get("params") or {}
                old, new = params.get("old", old), params.get("new", new)
    return old, new


def _switchover_interruption(op, steps):
    """A planned switchover interrupts writes from the moment the old writer goes OFFLINE_SOFT (the drain
    step) until the new writer is ONLINE in the writer hostgroup (the end of the move step): ProxySQL holds
    new writes meanwhile. Measured on the steps' clocks; the steps' own timings when those are missing."""
    a, b, how = measured.switchover_window(op, steps)
    timings = op.timings or {}
    if how == measured.HOLD:
        return (b - a) * 1000, how
    if op.state == OperationState.DONE and any(k in timings for k in ("drain", "move")):
        return (
            sum(timings.get(k) or 0 for k in ("drain", "wait_drain", "catch_up", "promote", "move")),
            "sum of the drain, wait, catch-up, promote and move step timings",
        )
    return (None if a is None else (b - a) * 1000), how


def _would_change(details):
    would = (details or {}).get("would_change") or {}
    return "; ".join(f"{k} → {v[0] if isinstance(v, list) else v}" for k, v in list(would.items())[:5])
