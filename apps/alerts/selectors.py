"""Reads for the alert pages: the list (open alerts first, then history, filtered), one alert with its
evidence, and the counts other pages show."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.db.models import Count, Max, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from apps.fleet.models import Cluster

from .catalogue import BY_KEY, FAMILIES, RULES, SEVERITY_RANK, RuleSpec
from .models import Alert, AlertState, Channel, Notification, Silence

HISTORY_PAGE = 50
STATES = ("open", "firing", "pending", "held", "resolved", "all")


@dataclass
class ListFilters:
    cluster: int | None = None
    state: str = "all"
    severity: str = ""
    rule: str = ""
    page: int = 1


def parse_filters(params: Mapping[str, str]) -> ListFilters:
    """Query-string filters, each checked; anything unknown is ignored, never an error."""

    def as_int(name: str, default: int | None = None, lo: int = 1, hi: int = 10**9) -> int | None:
        try:
            value = int(params.get(name, ""))
        except (TypeError, ValueError):
            return default
        return value if lo <= value <= hi else default

    state = params.get("state", "all")
    severity = params.get("severity", "")
    rule = params.get("rule", "")
    return ListFilters(
        cluster=as_int("cluster"),
        state=state if state in STATES else "all",
        severity=severity if severity in SEVERITY_RANK else "",
        rule=rule if rule in BY_KEY else "",
        page=as_int("page", 1, 1, 10**6) or 1,
    )


def _filtered(f: ListFilters) -> QuerySet[Alert]:
    return matching(cluster=f.cluster, severity=f.severity, rule=f.rule).select_related(
        "cluster", "hold_operation", "operation"
    )


def matching(*, cluster: int | None = None, severity: str = "", rule: str = "", state: str = "all") -> QuerySet[Alert]:
    """Alerts matching the list's filters, for every reader (the page, the API). One meaning per state: open =
    pending or firing; pending = waiting for its `for`, not held by planned work; held = held now, or resolved
    after being held; resolved = history."""
    qs = Alert.objects.all()
    if cluster:
        qs = qs.filter(cluster_id=cluster)
    if severity:
        qs = qs.filter(severity=severity)
    if rule:
        qs = qs.filter(rule=rule)
    return qs.filter(in_state(state))


def in_state(state: str) -> Q:
    """The condition of one state filter (STATES)."""
    active = Q(active_key__isnull=False)
    return {
        "all": Q(),
        "open": active,
        "firing": active & Q(state=AlertState.FIRING),
        "pending": active & Q(state=AlertState.PENDING, held=False),
        "held": (active & Q(held=True)) | Q(state=AlertState.RESOLVED, was_held=True),
        "resolved": Q(state=AlertState.RESOLVED),
    }[state]


def alert_list(f: ListFilters, now: datetime | None = None) -> dict[str, Any]:
    """Open alerts (firing, then pending; the most severe first) and one page of history."""
    now = now or timezone.now()
    qs = _filtered(f)
    open_alerts = []
    if f.state != AlertState.RESOLVED:
        open_qs = qs.filter(Q(active_key__isnull=False) & in_state(f.state))
        open_alerts = sorted(
            open_qs[:500],
            key=lambda a: (
                a.state != AlertState.FIRING,
                a.held,
                -SEVERITY_RANK.get(a.severity, 0),
                -a.since.timestamp(),
            ),
        )
    history, pages = [], 1
    if f.state in (AlertState.RESOLVED, "all", "held"):
        hist = qs.filter(Q(state=AlertState.RESOLVED) & in_state(f.state))
        total = hist.count()
        pages = max(1, -(-total // HISTORY_PAGE))
        page = min(f.page, pages)
        history = list(hist.order_by("-resolved_at", "-id")[(page - 1) * HISTORY_PAGE : page * HISTORY_PAGE])
        f.page = page
    silences = Silence.objects.filter(starts_at__lte=now, ends_at__gt=now, expired_at__isnull=True)
    for a in open_alerts:
        a.silenced = next((s for s in silences if s.matches(a)), None)
        a.spec = BY_KEY.get(a.rule)
    for a in history:
        a.spec = BY_KEY.get(a.rule)
    counts = Alert.objects.filter(active_key__isnull=False).values_list("state", "held").annotate(n=Count("id"))
    return {
        "open_alerts": open_alerts,
        "history": history,
        "pages": pages,
        "filters": f,
        "firing_count": sum(n for state, _, n in counts if state == AlertState.FIRING),
        "pending_count": sum(n for state, held, n in counts if state == AlertState.PENDING and not held),
        "rules": RULES,
        "states": STATES,
        "now": now,
    }


def open_for_cluster(cluster: Cluster) -> dict[str, list[Alert]]:
    alerts = list(Alert.objects.filter(cluster=cluster, active_key__isnull=False).select_related("hold_operation"))
    for a in alerts:
        a.spec = BY_KEY.get(a.rule)
    alerts.sort(key=lambda a: (a.state != AlertState.FIRING, a.held, -SEVERITY_RANK.get(a.severity, 0)))
    resolved = Alert.objects.filter(
        cluster=cluster, state=AlertState.RESOLVED, resolved_at__gte=timezone.now() - timedelta(hours=24)
    ).order_by("-resolved_at")
    # Held during planned work and cleared before it ended: never notified, expected; folded on the page (each
    # operation leaves a few), apart from those that fired.
    held_cleared = Q(was_held=True, fired_at__isnull=True)
    return {
        "cluster_alerts": alerts,
        "cluster_recent_alerts": list(resolved.exclude(held_cleared)[:10]),
        "cluster_held_cleared": list(resolved.filter(held_cleared)[:20]),
    }


def firing_summary() -> dict[str, int]:
    """For the fleet overview's banner: firing alerts by severity (one small query)."""
    rows = dict(Alert.objects.filter(state=AlertState.FIRING).values_list("severity").annotate(n=Count("id")))
    return {"alerts_firing": sum(rows.values()), "alerts_critical": rows.get("critical", 0)}


# -- one alert and its evidence ------------------------------------------------------------------------
# rule -> (chart kind, chart name): the figure the rule watches, drawn around the alert's start.
CHARTS = {
    "writer_none": ("backend", "wsrep_state"),
    "galera_non_primary": ("backend", "wsrep_state"),
    "galera_not_ready": ("backend", "wsrep_state"),
    "galera_desynced": ("backend", "wsrep_state"),
    "backend_unreachable": ("backend", "wsrep_state"),
    "galera_recv_queue": ("backend", "recv_queue"),
    "galera_flow_control": ("backend", "flow_control"),
    "replica_lag": ("backend", "wsrep_state"),
    "proxysql_unreachable": ("proxysql", "queries"),
    "poll_latency": ("proxysql", "latency"),
    "proxysql_auth": ("proxysql", "queries"),
    "mirror_queue": ("proxysql", "mirror_queue"),
    "mirror_loss": ("proxysql", "mirror_loss"),
    "conn_errors": ("proxysql", "errors"),
    "backend_shunned": ("proxysql", "connections"),
    "backend_flapping": ("proxysql", "connections"),
    "writer_many": ("proxysql", "connections"),
    "readers_low": ("proxysql", "connections"),
    "drift": ("proxysql", "queries"),
    "restart_drift": ("proxysql", "queries"),
}
CHART_AFTER_S = 1800  # the chart's window ends this long after the start (or now), 1 h long


def evidence(alert: Alert) -> dict[str, Any]:
    """Links and charts that show why the alert opened: the figure around its start, the operation or drift
    behind it, the audit events of the cluster in that window, the notifications sent for it."""
    out: dict[str, Any] = {"charts": [], "links": []}
    start = alert.since.timestamp()
    end = min(timezone.now().timestamp(), start + CHART_AFTER_S)
    if alert.resolved_at:
        end = min(timezone.now().timestamp(), max(end, alert.resolved_at.timestamp() + 300))
    chart = CHARTS.get(alert.rule)
    if chart:
        kind, name = chart
        if kind == "backend" and alert.server_id:
            out["charts"].append(
                {
                    "title": f"{name.replace('_', ' ')} of {alert.server}",
                    "id": f"alert-chart-{name}",
                    "url": reverse("monitoring:server_chart", args=[alert.server_id, name]) + f"?end={int(end)}",
                }
            )
        elif kind == "proxysql" and alert.node is not None:
            out["charts"].append(
                {
                    "title": f"{name.replace('_', ' ')} of {alert.node.name}",
                    "id": f"alert-chart-{name}",
                    "url": reverse("monitoring:proxysql_chart", args=[alert.node_id, name]) + f"?end={int(end)}",
                }
            )
    if alert.hold_operation is not None:
        out["links"].append(
            ("The planned work that held it", alert.hold_operation.get_absolute_url(), str(alert.hold_operation))
        )
    if alert.operation is not None:
        out["links"].append(("The operation", alert.operation.get_absolute_url(), str(alert.operation)))
    if alert.rule == "drift":
        out["links"].append(
            (
                "The drift, read from every node now",
                reverse("pages:cluster", args=[alert.cluster_id]) + "#drift-section",
                "cluster page, drift",
            )
        )
        out["links"].append(
            (
                "The configuration and its versions",
                reverse("configuration:cluster", args=[alert.cluster_id]),
                "configuration",
            )
        )
    if alert.details.get("digest_id"):
        out["links"].append(
            ("The query", reverse("digests:detail", args=[alert.details["digest_id"]]), alert.details.get("digest", ""))
        )
    if alert.node_id:
        out["links"].append(
            ("The ProxySQL node", reverse("pages:proxysql_node", args=[alert.node_id]), str(alert.node))
        )
    if alert.server_id:
        out["links"].append(("The backend", reverse("pages:server", args=[alert.server_id]), str(alert.server)))
    a, b = start - 600, (alert.resolved_at.timestamp() if alert.resolved_at else start) + 600
    out["incident_url"] = reverse("pages:incident") + f"?cluster={alert.cluster_id}&start={_utc(a)}&end={_utc(b)}"
    out["audit_url"] = reverse("audit:list") + f"?cluster={alert.cluster_id}"
    out["notifications"] = [
        n
        for n in Notification.objects.filter(
            cluster_id=alert.cluster_id, created_at__gte=alert.since - timedelta(seconds=5)
        )
        .select_related("channel")
        .order_by("id")[:200]
        if alert.pk in (n.alert_ids or [])
    ]
    return out


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=dt_timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def silences(now: datetime | None = None) -> dict[str, list[Silence]]:
    """The silences page: those in force, then the last 30 ended."""
    now = now or timezone.now()
    return {
        "current": list(silence_list(active=True, now=now)),
        "past": list(silence_list(active=False, now=now)[:30]),
    }


def silence_list(*, active: bool | None = None, now: datetime | None = None) -> QuerySet[Silence]:
    """Silences, latest end first, for every reader (the silences page, GET /api/v1/silences/): active=True those
    in force (not ended, not ended early), False those ended, None all."""
    now = now or timezone.now()
    in_force = Q(ends_at__gt=now) & Q(expired_at__isnull=True)
    chosen = Silence.objects.select_related("cluster").order_by("-ends_at", "-pk")
    if active is None:
        return chosen
    return chosen.filter(in_force) if active else chosen.exclude(in_force)


def channels() -> list[Channel]:
    """The channels page: every channel (channel_list()) with its last notification (two queries, not one a
    channel)."""
    out = list(channel_list())
    newest = Notification.objects.filter(channel__in=out).values("channel_id").annotate(last=Max("id"))
    last = {n.channel_id: n for n in Notification.objects.defer("payload").filter(pk__in=newest.values("last"))}
    for ch in out:
        ch.last = last.get(ch.pk)
    return out


def channel_list() -> QuerySet[Channel]:
    """Alert channels by name, with their clusters, for every reader (the channels page, GET
    /api/v1/alert-channels/)."""
    return Channel.objects.prefetch_related("clusters").order_by("name", "pk")


def families() -> list[tuple[str, list[RuleSpec]]]:
    return [(FAMILIES[f], [r for r in RULES if r.family == f]) for f in FAMILIES]
