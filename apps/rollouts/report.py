"""The rollouts part of the health reports: the rollouts that ran in the window (that touched the cluster, or every
one for the fleet), each with its waves (their clusters and states, the gate that failed) and its halt. JSON-ready
data read from the rollouts' own rows (Rollout.waves keeps each wave's state and its last gate reading)."""

from datetime import datetime, timezone

from django.db.models import Count

from .models import Rollout, RolloutCluster, RolloutState

LISTED = 20  # rollouts listed per report (newest first); the others are counted
NAMED_CLUSTERS = 5  # clusters named per wave; the others are counted


def _dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _alive(start, end):
    """The rollouts alive in [start, end): planned before its end, last changed after its start."""
    return Rollout.objects.filter(created_at__lt=_dt(end), updated_at__gte=_dt(start))


def section(cluster_id, start, end):
    """{"rollouts": [...], "more": N, "halted": N} for the rollouts alive in [start, end) that selected the cluster
    (None: every rollout)."""
    if cluster_id is not None:
        return sections([cluster_id], start, end)[cluster_id]
    rollouts = _alive(start, end)
    total = rollouts.aggregate(n=Count("pk"))["n"]
    if not total:
        return None
    halted = rollouts.filter(state=RolloutState.HALTED).count()
    listed = list(rollouts.order_by("-created_at", "-pk")[:LISTED])
    names = _names(listed)
    return {"rollouts": [_rollout(r, names) for r in listed], "more": total - len(listed), "halted": halted}


def sections(cluster_ids, start, end):
    """{cluster id: section()} for many clusters in three queries whatever their number (a fleet report builds a
    section per cluster: one query per cluster made 500 more at 500 clusters)."""
    alive = _alive(start, end)
    picked = {}  # cluster id -> [(created_at, pk, state)] of the alive rollouts that selected it
    for cluster_id, pk, created_at, state in RolloutCluster.objects.filter(
        cluster_id__in=list(cluster_ids), rollout__in=alive
    ).values_list("cluster_id", "rollout_id", "rollout__created_at", "rollout__state"):
        picked.setdefault(cluster_id, []).append((created_at, pk, state))
    listed_of = {c: [pk for _, pk, _ in sorted(rows, reverse=True)[:LISTED]] for c, rows in picked.items()}
    rows = Rollout.objects.in_bulk({pk for pks in listed_of.values() for pk in pks})
    names = _names(list(rows.values()))
    out = dict.fromkeys(cluster_ids)
    for cluster_id, found in picked.items():
        out[cluster_id] = {
            "rollouts": [_rollout(rows[pk], names) for pk in listed_of[cluster_id]],
            "more": len(found) - len(listed_of[cluster_id]),
            "halted": sum(state == RolloutState.HALTED for _, _, state in found),
        }
    return out


def _names(rollouts):
    """{cluster id: name} of the clusters these rollouts selected (one query)."""
    return dict(RolloutCluster.objects.filter(rollout__in=rollouts).values_list("cluster_id", "cluster__name"))


def _rollout(rollout, names):
    waves = []
    for n, wave in enumerate(rollout.waves):
        clusters = [names.get(pk, f"#{pk}") for pk in wave["clusters"]]
        gate = wave.get("gate") or {}
        waves.append(
            {
                "wave": n,
                "canary": n == 0 and bool(wave.get("node")),
                "state": wave["state"],
                "clusters": clusters[:NAMED_CLUSTERS],
                "more_clusters": max(0, len(clusters) - NAMED_CLUSTERS),
                "failed": sorted({f["gate"] for f in gate.get("failed") or []}),
                "started_at": _epoch(wave.get("started_at")),
            }
        )
    return {
        "id": rollout.pk,
        "url": f"/rollouts/{rollout.pk}/",
        "reason": rollout.reason,
        "state": rollout.state,
        "state_label": rollout.get_state_display(),
        "planner": rollout.planner,
        "planned_at": rollout.created_at.timestamp(),
        "waves_text": rollout.waves_text,
        "waves": waves,
        "halted": rollout.state == RolloutState.HALTED,
        "halt_reason": rollout.halt_reason,
    }


def _epoch(iso):
    return datetime.fromisoformat(iso).timestamp() if iso else None
