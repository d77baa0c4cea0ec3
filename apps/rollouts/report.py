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


def section(cluster_id, start, end):
    """{"rollouts": [...], "more": N, "halted": N} for the rollouts alive in [start, end) (planned before its end,
    last changed after its start) that selected the cluster (None: every rollout)."""
    rollouts = Rollout.objects.filter(created_at__lt=_dt(end), updated_at__gte=_dt(start))
    if cluster_id is not None:
        rollouts = rollouts.filter(pk__in=RolloutCluster.objects.filter(cluster_id=cluster_id).values("rollout_id"))
    total = rollouts.aggregate(n=Count("pk"))["n"]
    if not total:
        return None
    halted = rollouts.filter(state=RolloutState.HALTED).count()
    listed = list(rollouts.order_by("-created_at")[:LISTED])
    names = dict(RolloutCluster.objects.filter(rollout__in=listed).values_list("cluster_id", "cluster__name"))
    return {"rollouts": [_rollout(r, names) for r in listed], "more": total - len(listed), "halted": halted}


def _rollout(rollout, names):
    waves = []
    for n, wave in enumerate(rollout.waves):
        clusters = [names.get(pk, f"#{pk}") for pk in wave["clusters"]]
        gate = wave.get("gate") or {}
        waves.append({"wave": n, "canary": n == 0 and bool(wave.get("node")), "state": wave["state"],
                      "clusters": clusters[:NAMED_CLUSTERS], "more_clusters": max(0, len(clusters) - NAMED_CLUSTERS),
                      "failed": sorted({f["gate"] for f in gate.get("failed") or []}),
                      "started_at": _epoch(wave.get("started_at"))})
    return {"id": rollout.pk, "url": f"/rollouts/{rollout.pk}/", "reason": rollout.reason, "state": rollout.state,
            "state_label": rollout.get_state_display(), "planner": rollout.planner,
            "planned_at": rollout.created_at.timestamp(), "waves_text": rollout.waves_text, "waves": waves,
            "halted": rollout.state == RolloutState.HALTED, "halt_reason": rollout.halt_reason}


def _epoch(iso):
    return datetime.fromisoformat(iso).timestamp() if iso else None
