"""Configuration drift found and fixed in the period, from the audit log."""

from apps.audit.models import AuditEvent

from ..history import as_dt


def drift(ctx):
    events = AuditEvent.objects.filter(
        cluster_id=ctx.cluster.pk,
        created_at__gte=as_dt(ctx.start),
        created_at__lt=as_dt(ctx.end),
        action__icontains="drift",
    ).order_by("created_at")
    rows = []
    for e in events[:100]:
        fixed = any(w in e.action.lower() for w in ("fixed", "resolved", "repaired", "corrected"))
        rows.append(
            {
                "at": e.created_at.timestamp(),
                "action": e.action,
                "fixed": fixed,
                "target": e.target,
                "actor": e.actor,
                "outcome": e.outcome,
                "what": _drift_what(e.details),
                "url": f"/audit/{e.pk}/",
            }
        )
    return {
        "found": sum(1 for r in rows if not r["fixed"]),
        "fixed": sum(1 for r in rows if r["fixed"]),
        "events": rows,
    }


def _drift_what(details):
    details = details or {}
    for key in ("summary", "what", "differences", "diff"):
        if key in details:
            value = details[key]
            if isinstance(value, list):
                return "; ".join(str(v) for v in value[:3])[:300]
            return str(value)[:300]
    return ""
