"""What the pages show of the channels: the latest state (Redis), else the last stored poll."""

import time
from collections.abc import Iterable
from typing import Any

import msgspec
from django.db.models import Q, QuerySet

from apps.fleet.models import Cluster
from apps.monitoring import live, status

from .choices import ChannelState
from .models import ChannelSample, ReplicationChannel
from .polling import CHANNEL


class ChannelView(msgspec.Struct):
    """What the channel pages and the API show of a channel's latest-state document (live_doc.ChannelDoc). The
    last stored poll stands in for it when Redis is down (_from_history): no ends, lag_high or failing_polls known
    then (None, as the API says)."""

    ts: float
    ok: bool
    state: str
    source: dict
    replica: dict
    behind_trx: int | None = None
    lag_seconds: int | None = None
    lag_high: bool | None = False
    failing_polls: dict[str, int] | None = {}


def _from_history(channel: ReplicationChannel) -> ChannelView | None:
    sample = ChannelSample.objects.filter(channel=channel).order_by("-ts").first()
    if sample is None:
        return None
    return ChannelView(
        ts=sample.ts.timestamp(),
        ok=sample.reachable,
        state=(ChannelState.RUNNING if sample.io_running and sample.sql_running else ChannelState.STOPPED)
        if sample.reachable
        else "unreachable",
        source={},
        replica={},
        lag_seconds=None if sample.lag_seconds is None else round(sample.lag_seconds),  # stored as a float column
        behind_trx=(sample.source_seq - sample.applied_seq)
        if sample.source_seq is not None and sample.applied_seq is not None
        else None,
        lag_high=None,
        failing_polls=None,
    )


def rows(channels: Iterable[ReplicationChannel]) -> list[dict[str, Any]]:
    """[{channel, doc, age, stale, unavailable, from_history}] for these channels (doc: a ChannelView or None;
    from_history: Redis is down and doc is the last stored poll's stand-in)."""
    channels = list(channels)
    unavailable = None
    try:
        docs = live.read_typed(CHANNEL, [c.pk for c in channels], ChannelView)
    except live.LiveUnavailable as exc:
        docs, unavailable = {}, str(exc)
    now = time.time()
    out: list[dict[str, Any]] = []
    for channel in channels:
        doc, from_history = docs.get(channel.pk), False
        if doc is None and unavailable:
            doc = _from_history(channel)
            from_history = doc is not None
        age = None if not doc else max(0.0, now - doc.ts)
        out.append(
            {
                "channel": channel,
                "doc": doc,
                "age": age,
                "unavailable": unavailable,
                "from_history": from_history,
                "stale": age is not None and age > status.stale_after(status.backend_interval(channel.replica_cluster)),
                "problem": bool(doc) and (doc.state != ChannelState.RUNNING or doc.lag_high),
            }
        )
    return out


def channels(cluster: Cluster | int | None = None) -> QuerySet[ReplicationChannel]:
    """The channels by name, with their ends and candidates; narrowed to those that leave or enter a cluster when
    given: the cluster page's channels and GET /api/v1/dr/channels/ (one filter, two doors)."""
    chosen = (
        ReplicationChannel.objects.select_related(
            "source_cluster", "replica_cluster", "source_server", "replica_server"
        )
        .prefetch_related("candidates")
        .order_by("name", "pk")
    )
    if cluster is not None:
        chosen = chosen.filter(Q(source_cluster=cluster) | Q(replica_cluster=cluster))
    return chosen


def for_cluster(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """The channels that leave or enter this cluster, for its page."""
    return {"dr_channels": rows(channels(cluster))}


def moves(channel: ReplicationChannel, limit: int = 20) -> list[Any]:
    """The channel's move operations, newest first."""
    ops = channel.replica_cluster.operations.filter(kind="channel_move", title__startswith=f"channel {channel.name}:")
    return [
        op for op in ops.order_by("-id")[: limit * 2] if (op.plan.get("options") or {}).get("channel") == channel.pk
    ][:limit]


def latest(row: dict[str, Any]) -> dict[str, Any]:
    """A rows() entry's latest state as the API shows it."""
    doc = row["doc"]
    replica, source = (doc.replica, doc.source) if doc else ({}, {})
    return {
        "state": doc and doc.state,
        "age_s": row["age"],
        "stale": row["stale"],
        "from_history": row["from_history"],
        "lag_seconds": doc and doc.lag_seconds,
        "lag_high": doc and doc.lag_high,
        "behind_trx": doc and doc.behind_trx,
        "io_running": replica.get("io_running"),
        "sql_running": replica.get("sql_running"),
        "last_io_error": replica.get("last_io_error"),
        "last_sql_error": replica.get("last_sql_error"),
        "gtid_slave_pos": replica.get("gtid_slave_pos"),
        "source_binlog_pos": source.get("binlog_pos"),
        "failing_polls": doc and doc.failing_polls,
    }
