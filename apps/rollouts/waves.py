"""What a wave's bake reads and writes (issue 38), below both ways a wave bakes: run() in services.py for the waves
after the canary, and the canary's bake step inside its operation (canary.py). The wave's record, the operator's halt
and abort, and the wave's health gate composed from the polls, the alerts and the checks of gates.py."""

from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db.models import Avg, Count, Max, QuerySet
from django.utils import timezone

from apps.alerts.models import Alert, AlertState
from apps.fleet.models import ProxySQLNode
from apps.monitoring.models import RAW, ProxySQLSample

from . import gates
from .models import ClusterState, Rollout, RolloutState

HALTED_RULE = "rollout_halted"  # the alert a halt raises (apps/alerts/catalogue.py)
GATE_STEP_S = 0.5  # how often a bake reads the polls and alerts again (a bad canary halts within about this)


class Verdict(TypedDict):
    """A gate reading's verdict, kept as the wave's "gate" in Rollout.waves (JSON) and shown by the pages and API."""

    ok: bool
    why: str  # the failed checks' sentences, joined
    nodes: dict[str, dict[str, Any]]  # node name -> {figure: value}
    clusters: dict[str, dict[str, Any]]  # cluster name -> {figure: value}
    failed: list[dict[str, Any]]  # {"gate": ..., what that check names}
    alerts: list[str]  # the rules of the alerts that fired since the wave started
    at: str  # when it was read (ISO 8601)


def aborting(rollout: Rollout) -> bool:
    """Whether an abort of the rollout was asked for."""
    rollout.refresh_from_db(fields=["abort_requested"])
    return rollout.abort_requested


def halt_requested(rollout: Rollout) -> str:
    """The operator's halt (halt()) of a running rollout, or ""."""
    return (
        Rollout.objects.filter(pk=rollout.pk, state=RolloutState.RUNNING).values_list("halt_reason", flat=True).first()
        or ""
    )


def wave(rollout: Rollout, n: int, **fields: Any) -> None:
    """Wave n's record updated with these fields (and the rollout's heartbeat)."""
    rollout.refresh_from_db(fields=["waves"])
    rollout.waves[n].update(fields)
    Rollout.objects.filter(pk=rollout.pk).update(waves=rollout.waves, heartbeat_at=timezone.now())


def gate(
    rollout: Rollout,
    n: int,
    started: datetime,
    applied: datetime,
    nodes: list[int] | None = None,
    kept: gates.Kept | None = None,
) -> Verdict:
    """The wave's health from the polls and the alerts: per node of its clusters, client connections aborted +
    backend connection errors per second since the wave started (gates.py says why not since `applied`), against
    the same length of window before it;
    backends newly SHUNNED or OFFLINE, the mirror queue against its limit and the digests' latency (gates.py);
    and any alert of those clusters that fired since the wave started. `kept`: the bake's gates.Kept."""
    skipped = set(rollout.clusters.filter(state=ClusterState.SKIPPED).values_list("cluster_id", flat=True))
    clusters = [pk for pk in rollout.waves[n]["clusters"] if pk not in skipped]
    bake = rollout.bake_canary_s if n == 0 else rollout.bake_s
    window = timedelta(seconds=max(bake, 10))
    reading = gates.Reading(
        rollout,
        list(_nodes(clusters, nodes)),
        started,
        applied,
        window,
        kept=kept if kept is not None else gates.Kept(),
    )
    samples = ProxySQLSample.objects.filter(node__cluster_id__in=clusters, resolution=RAW)
    latest = gates.latest_polls([pk for pk, _, _ in reading.nodes])
    for node_id, name, _ in reading.nodes:
        before = _errors(samples.filter(node_id=node_id, ts__gte=started - window, ts__lt=started))
        after = _errors_since(samples.filter(node_id=node_id, ts__gte=started), latest.get(node_id), started)
        reading.figures[name] = {"errors_per_s_before": before, "errors_per_s_after": after}
        if after is not None and after > (before or 0.0) + rollout.max_error_rate:
            reading.fail(
                f"the errors gate on {name}: {after:.1f} errors/s since the change, {before or 0.0:.1f} "
                f"before (threshold +{rollout.max_error_rate:g})",
                gate="errors",
                node=name,
                before=before,
                after=after,
                threshold=rollout.max_error_rate,
            )
    for check in gates.CHECKS:
        check(reading)
    fired = Alert.objects.filter(cluster_id__in=clusters, state=AlertState.FIRING, fired_at__gte=started).exclude(
        rule=HALTED_RULE
    )  # another rollout's halt is not this wave's health
    for alert in fired.select_related("cluster").order_by("fired_at")[:10]:
        reading.fail(
            f"the alerts gate: alert {alert.rule} firing on {alert.cluster}: {alert.summary}",
            gate="alerts",
            rule=alert.rule,
            cluster=alert.cluster.name,
            summary=alert.summary,
        )
    return {
        "ok": not reading.bad,
        "why": "; ".join(reading.bad),
        "nodes": reading.figures,
        "clusters": reading.clusters,
        "failed": reading.failed,
        "alerts": [a.rule for a in fired[:10]],
        "at": timezone.now().isoformat(),
    }


def operator_halt(verdict: Verdict, why: str) -> Verdict:
    """The gate's last reading, failed by the operator's halt."""
    return {**verdict, "ok": False, "why": why, "failed": [{"gate": "operator", "why": why}]}


def _nodes(cluster_ids: list[int], only: list[int] | None = None) -> QuerySet[ProxySQLNode, tuple[int, str, str]]:
    nodes = ProxySQLNode.objects.filter(cluster_id__in=cluster_ids)
    if only is not None:  # the canary: its one node
        nodes = nodes.filter(pk__in=only)
    return nodes.order_by("pk").values_list("pk", "name", "cluster__name")


def _errors(samples: QuerySet[ProxySQLSample]) -> float | None:
    row = samples.aggregate(aborted=Avg("client_connections_aborted_ps"), conn_err=Avg("conn_err_ps"))
    if row["aborted"] is None and row["conn_err"] is None:
        return None
    return (row["aborted"] or 0.0) + (row["conn_err"] or 0.0)


def _errors_since(samples: QuerySet[ProxySQLSample], poll: gates.LatestPoll | None, since: datetime) -> float | None:
    """Errors per second since the wave started: the stored polls' average, with the node's latest poll
    (gates.LatestPoll) counted as one more when it came since and is not stored yet (its round still running)."""
    row = samples.aggregate(
        aborted=Avg("client_connections_aborted_ps"),
        conn_err=Avg("conn_err_ps"),
        n=Count("client_connections_aborted_ps"),
        last=Max("ts"),
    )
    stored = (
        None
        if row["aborted"] is None and row["conn_err"] is None
        else (row["aborted"] or 0.0) + (row["conn_err"] or 0.0)
    )
    if poll is None or not poll.ok or poll.ts < since.timestamp():
        return stored
    if row["last"] is not None and poll.ts <= row["last"].timestamp() + 0.001:
        return stored  # already in the history
    aborted, conn_err = poll.figures.get("client_connections_aborted_ps"), poll.figures.get("conn_err_ps")
    if aborted is None and conn_err is None:
        return stored  # the node's first poll: no rate yet
    fresh = (aborted or 0.0) + (conn_err or 0.0)
    return fresh if stored is None else (stored * row["n"] + fresh) / (row["n"] + 1)
