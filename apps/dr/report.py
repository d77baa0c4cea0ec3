"""The DR channels part of the health reports: for each channel that leaves or enters a cluster (or every
channel, for the fleet), its lag (average and maximum), how long it was stopped, and its moves in the window.
JSON-ready data, read from the channel's history (ChannelSample) and its move operations.

The history is read at the finest resolution kept: raw polls, then the 1-minute rollups before the oldest raw
poll, then the 1-hour rollups before those. A poll stands for the time until the next one (at most three
poll intervals, or its rollup bucket); a rollup bucket counts as stopped when any poll in it was (rollups keep
the worst), so rolled-up periods can only read worse than the polls saw.
"""

from datetime import datetime, timezone

from django.db.models import Q

from apps.monitoring import status
from apps.monitoring.models import HOUR, MINUTE, RAW
from apps.operations.choices import OperationState
from apps.operations.models import Operation

from .models import ChannelSample, ReplicationChannel

LISTED_MOVES = 10


def _dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _rows(channel, start, end):
    """[(ts, seconds it stands for, stopped, lag, lag max)] over [start, end), finest resolution first."""
    poll_cap = status.stale_after(status.backend_interval(channel.replica_cluster))
    rows, until = [], end
    for resolution, cap in ((RAW, poll_cap), (MINUTE, MINUTE), (HOUR, HOUR)):
        found = list(
            ChannelSample.objects.filter(channel=channel, resolution=resolution, ts__gte=_dt(start), ts__lt=_dt(until))
            .order_by("ts")
            .values_list("ts", "reachable", "io_running", "sql_running", "lag_seconds", "lag_seconds_max")
        )
        for i, (ts, reachable, io, sql, lag, lag_max) in enumerate(found):
            t = ts.timestamp()
            nxt = found[i + 1][0].timestamp() if i + 1 < len(found) else until
            stopped = not reachable or io is False or sql is False
            rows.append(
                (t, max(0.0, min(nxt, t + cap, end) - t), stopped, lag, lag_max if lag_max is not None else lag)
            )
        if found:
            until = found[0][0].timestamp()
    return sorted(rows)


def channel_figures(channel, start, end):
    rows = _rows(channel, start, end)
    observed = sum(r[1] for r in rows)
    lagged = [(r[1], r[3]) for r in rows if r[3] is not None]
    weight = sum(w for w, _ in lagged)
    ops = [
        op
        for op in Operation.objects.filter(
            kind="channel_move", cluster=channel.replica_cluster_id, created_at__gte=_dt(start), created_at__lt=_dt(end)
        ).order_by("created_at")
        if (op.plan.get("options") or {}).get("channel") == channel.pk
    ]
    return {
        "id": channel.pk,
        "name": channel.name,
        "url": f"/dr/channels/{channel.pk}/",
        "source_cluster": channel.source_cluster.name,
        "replica_cluster": channel.replica_cluster.name,
        "observed_s": round(observed, 3),
        "polls": len(rows),
        "stopped_s": round(sum(r[1] for r in rows if r[2]), 3),
        "lag_avg_s": round(sum(w * lag for w, lag in lagged) / weight, 2) if weight else None,
        "lag_max_s": max((r[4] for r in rows if r[4] is not None), default=None),
        "max_lag_s": channel.max_lag_s,
        "moves": len(ops),
        "moves_done": sum(1 for op in ops if op.state == OperationState.DONE),
        "move_list": [
            {
                "id": op.pk,
                "url": op.get_absolute_url(),
                "title": op.title,
                "state": op.state,
                "reason": (op.plan.get("options") or {}).get("reason", ""),
                "actor": op.actor,
                "at": op.created_at.timestamp(),
                "duration_ms": op.duration_ms,
            }
            for op in ops[-LISTED_MOVES:]
        ],
    }


def section(cluster_id, start, end):
    """The channels leaving or entering this cluster (None: every channel), each with its figures."""
    channels = ReplicationChannel.objects.select_related("source_cluster", "replica_cluster").order_by("name")
    if cluster_id is not None:
        channels = channels.filter(Q(source_cluster=cluster_id) | Q(replica_cluster=cluster_id))
    return [channel_figures(c, start, end) for c in channels]


def summary_point(channels, fmt):
    """One line for a report's summary, or None without channels."""
    if not channels:
        return None
    stopped = [c for c in channels if c["stopped_s"] >= 1]
    moves = sum(c["moves"] for c in channels)
    lags = [c for c in channels if c["lag_max_s"] is not None and c["lag_max_s"] > c["max_lag_s"]]
    parts = []
    if stopped:
        parts.append("stopped " + ", ".join(f"{c['name']} {fmt.duration(c['stopped_s'])}" for c in stopped[:5]))
    if lags:
        parts.append(
            "lag above its limit: " + ", ".join(f"{c['name']} up to {fmt.duration(c['lag_max_s'])}" for c in lags[:5])
        )
    if moves:
        parts.append(f"{fmt.count_word(moves, 'channel move')}")
    if not parts:
        return {
            "tone": "good",
            "text": f"DR channels: {fmt.count_word(len(channels), 'channel')} ran all the time "
            f"the polls saw, lag within limits.",
        }
    return {"tone": "bad" if stopped else "warn", "text": "DR channels: " + "; ".join(parts) + "."}
