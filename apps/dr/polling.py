"""Polling the channels with the backends: each backend shard's task polls the channels of its shard
(channel pk modulo shards) at the replica cluster's backend interval.

One poll reads the current source (is it Synced in a Primary component, its GTID domain and binlog
position) and the current replica (its state, SHOW SLAVE STATUS, gtid_slave_pos), writes the latest-state
document (Redis, kind "channel") and one ChannelSample row. The document also counts consecutive polls in
which an end failed: the automatic moves (failover.py) act on those counts.
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import msgspec
from django.db.models import F

from apps.clients.backend import BackendClient
from apps.clients.wire import ClientError
from apps.monitoring import live

from . import failover, native
from .choices import ChannelState
from .gtid import gtid_seq
from .models import ChannelSample, ReplicationChannel

log = logging.getLogger(__name__)

CHANNEL = "channel"  # the latest-state kind
TICK_TOLERANCE_S = 0.25


class LastPoll(msgspec.Struct):
    """What a poll carries over from the channel's previous document (live_doc.ChannelDoc): when it was polled, its
    ends, the source's GTID domain and the failing-poll counts."""

    ts: float
    ends: list[int]
    domain: int | None = None
    failing_polls: dict[str, int] = {}


def last_polls(channels):
    """{channel pk: LastPoll or None}, one MGET; {} when Redis does not answer."""
    try:
        return live.read_typed(CHANNEL, [c.pk for c in channels], LastPoll)
    except live.LiveUnavailable:
        return {}


def _read_source(server):
    with BackendClient.for_server(server) as client:
        state = client.state()
        domain, binlog_pos = client.gtid_origin()
    return {
        "server": server.pk,
        "ok": True,
        "error": None,
        "synced_primary": state.synced_primary,
        "local_state_comment": state.local_state_comment,
        "cluster_status": state.cluster_status,
        "domain": domain,
        "binlog_pos": binlog_pos,
        "seq": gtid_seq(binlog_pos, domain),
    }


def _read_replica(server):
    with BackendClient.for_server(server) as client:
        state = client.state()
        native_failover = native.has_native_failover(state.version)
        read = client.channel(mysql=native_failover)
    return {
        "server": server.pk,
        "ok": True,
        "error": None,
        "synced_primary": state.synced_primary,
        "local_state_comment": state.local_state_comment,
        "cluster_status": state.cluster_status,
        "version": state.version,
        "native_failover": native_failover,
        **{
            k: getattr(read, k)
            for k in (
                "source_host",
                "source_port",
                "io_running",
                "sql_running",
                "seconds_behind",
                "last_io_errno",
                "last_io_error",
                "last_sql_errno",
                "last_sql_error",
                "gtid_io_pos",
                "gtid_slave_pos",
                "gtid_binlog_pos",
            )
        },
    }


def _guarded(read, server):
    try:
        return read(server)
    except ClientError as exc:
        return {"server": server.pk, "ok": False, "error": str(exc), "synced_primary": False}


def channel_state(source, replica, channel):
    """One word for the operator: running, connecting, stopped, error, unreachable, misdirected."""
    if not replica["ok"]:
        return ChannelState.UNREACHABLE
    if not replica.get("source_host"):
        return ChannelState.STOPPED
    if (
        replica.get("source_port") != channel.source_server.port
        or replica.get("source_host") != channel.source_server.hostname
    ):
        return ChannelState.MISDIRECTED  # the node replicates from somewhere the inventory does not say
    if replica.get("last_sql_error") or (replica.get("last_io_error") and replica.get("io_running") != "Yes"):
        return ChannelState.ERROR
    if replica.get("io_running") == "Yes" and replica.get("sql_running") == "Yes":
        return ChannelState.RUNNING
    if replica.get("io_running") == "Connecting":
        return ChannelState.CONNECTING
    return ChannelState.STOPPED


def source_failing(source, replica):
    """The source end needs to move: unreachable, out of the Primary component or not Synced, or the replica's
    IO thread cannot read from it."""
    io_failing = replica["ok"] and replica.get("io_running") != "Yes" and bool(replica.get("last_io_error"))
    return not source["ok"] or not source.get("synced_primary") or io_failing


def replica_failing(replica):
    return not replica["ok"] or not replica.get("synced_primary")


def poll_channel(channel, prev, ts):
    """Returns (latest-state document, ChannelSample). prev: the channel's LastPoll or None."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        source_f = pool.submit(_guarded, _read_source, channel.source_server)
        replica_f = pool.submit(_guarded, _read_replica, channel.replica_server)
        source, replica = source_f.result(), replica_f.result()
    domain = source.get("domain") if source["ok"] else (prev.domain if prev else None)
    applied = gtid_seq(replica.get("gtid_slave_pos"), domain) if replica["ok"] and domain is not None else None
    behind = (source["seq"] - applied) if source.get("seq") is not None and applied is not None else None
    counts = prev.failing_polls if prev else {}
    same_ends = prev is not None and prev.ends == [channel.source_server_id, channel.replica_server_id]
    failing = {
        "source": (counts.get("source", 0) + 1 if same_ends else 1) if source_failing(source, replica) else 0,
        "replica": (counts.get("replica", 0) + 1 if same_ends else 1) if replica_failing(replica) else 0,
    }
    state = channel_state(source, replica, channel)
    lag = replica.get("seconds_behind") if replica["ok"] else None
    doc = {
        "ts": ts,
        "ok": replica["ok"],
        "state": state,
        "ends": [channel.source_server_id, channel.replica_server_id],
        "source": source,
        "replica": replica,
        "domain": domain,
        "applied_seq": applied,
        "behind_trx": behind,
        "lag_seconds": lag,
        "lag_high": lag is not None and lag > channel.max_lag_s,
        "failing_polls": failing,
    }
    sample = ChannelSample(
        channel_id=channel.pk,
        ts=datetime.fromtimestamp(ts, tz=timezone.utc),
        source_server_id=channel.source_server_id,
        replica_server_id=channel.replica_server_id,
        reachable=replica["ok"],
        io_running=(replica["io_running"] == "Yes") if replica["ok"] else None,
        sql_running=(replica["sql_running"] == "Yes") if replica["ok"] else None,
        lag_seconds=lag,
        source_seq=source.get("seq"),
        applied_seq=applied,
    )
    return doc, sample


def poll(channels, now=None):
    """Poll these channels now: latest state and history. Returns {pk: (previous LastPoll or None, new doc)}."""
    ts = now or time.time()
    prevs = last_polls(channels)
    docs, samples = {}, []
    for channel in channels:
        try:
            doc, sample = poll_channel(channel, prevs.get(channel.pk), ts)
        except Exception:  # one channel's trouble must not stop the others
            log.exception("poll of channel %s failed", channel.pk)
            continue
        docs[channel.pk] = doc
        samples.append(sample)
    ChannelSample.objects.bulk_create(samples)
    try:
        live.write_many(CHANNEL, docs)
    except live.LiveUnavailable as exc:
        log.warning("channel state not written: Redis unavailable (%s)", exc)
    return {pk: (prevs.get(pk), doc) for pk, doc in docs.items()}


def due_channels(shard, shards, now=None):
    """The shard's channels whose replica cluster's backend interval has passed since their last poll."""
    now = now or time.time()
    channels = list(
        ReplicationChannel.objects.select_related(
            "source_server__cluster", "replica_server__cluster", "replica_cluster"
        )
        .annotate(shard_index=F("pk") % shards)
        .filter(shard_index=shard)
    )
    if not channels:
        return []
    prevs = last_polls(channels)
    return [
        c
        for c in channels
        if not prevs.get(c.pk) or now - prevs[c.pk].ts >= c.replica_cluster.backend_poll_interval_s - TICK_TOLERANCE_S
    ]


def run_shard(shard, shards, now=None):
    """The backend task's channel part: poll what is due and let the automatic moves look at it (the task then runs
    the alert rules over the results)."""
    channels = due_channels(shard, shards, now)
    if not channels:
        return {}
    results = poll(channels, now)
    for channel in channels:
        if channel.pk not in results:
            continue
        try:
            if failover.follow_native(channel, results[channel.pk][1]):
                continue
            if channel.auto_failover_enabled:
                failover.after_poll(channel, results[channel.pk][1])
        except Exception:  # one channel's trouble must not stop the others
            log.exception("automatic move of channel %s failed", channel.pk)
    return results  # the alert rules run after this (workers/monitoring.py poll_channels): alerts sit above dr
