"""Rollups (raw -> 1 minute -> 1 hour) and retention, run by a scheduled task.

Each complete bucket is aggregated once, in the database (one GROUP BY per bucket and table), and the
last rolled bucket is remembered in RollupMark so a restarted task neither skips nor doubles a bucket.
"""
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Max, Min
from django.utils import timezone

from .models import HOUR, MINUTE, RAW, BackendSample, MirrorRuleSample, PoolSample, ProxySQLSample, RollupMark

# table: (group-by fields, averaged, worst-of as Max, worst-of as Min)
SPECS = {
    ProxySQLSample: (["node_id"],
                     ["questions_ps", "slow_queries_ps", "prepared_ps", "client_connections_connected",
                      "client_connections_created_ps", "client_connections_aborted_ps",
                      "server_connections_connected", "server_connections_aborted_ps", "active_transactions",
                      "conn_used", "conn_free", "conn_err_ps", "mirror_concurrency"],
                     ["mirror_queue_length", "mirror_max_concurrency", "mirror_max_queue_length", "mysql_threads"],
                     ["reachable"]),
    PoolSample: (["node_id", "hostgroup", "srv_host", "srv_port"],
                 ["conn_used", "conn_free", "conn_err_ps", "queries_ps", "bytes_sent_ps", "bytes_recv_ps", "latency_us"],
                 [], ["status"]),
    BackendSample: (["server_id"],
                    ["cluster_size", "flow_control_paused", "lag_seconds"],
                    ["recv_queue", "desync", "reject_queries", "read_only"],
                    ["reachable", "local_state", "primary", "ready"]),
    MirrorRuleSample: (["node_id", "rule_id"],
                       ["interval_s", "hits_ps", "prepared_share", "expected_ps", "mirrored_ps"],
                       ["loss", "mirror_hostgroup", "ambiguous"], []),
}


def _floor(ts, seconds):
    epoch = int(ts.timestamp())
    return ts.fromtimestamp(epoch - epoch % seconds, tz=ts.tzinfo)


def rollup(model, source, target, now=None, max_buckets=24 * 60):
    """Aggregate complete `target`-second buckets of `source` rows into `target` rows. Returns the count."""
    now = now or timezone.now()
    group, averaged, maxed, minned = SPECS[model]
    name = f"{model._meta.model_name}:{target}"
    mark, _ = RollupMark.objects.get_or_create(name=name)
    end = _floor(now, target)
    start = mark.rolled_until
    if start is None:
        first = model.objects.filter(resolution=source).order_by("ts").values_list("ts", flat=True).first()
        if first is None:
            return 0
        start = _floor(first, target)
    written = 0
    buckets = 0
    while start < end and buckets < max_buckets:
        stop = start + timedelta(seconds=target)
        rows = (model.objects.filter(resolution=source, ts__gte=start, ts__lt=stop).values(*group)
                .annotate(**{f: Avg(f) for f in averaged}, **{f: Max(f) for f in maxed}, **{f: Min(f) for f in minned}))
        objs = [model(ts=start, resolution=target, **row) for row in rows]
        with transaction.atomic():
            model.objects.bulk_create(objs, batch_size=1000)
            RollupMark.objects.filter(name=name).update(rolled_until=stop)
        written += len(objs)
        start = stop
        buckets += 1
    return written


def prune(now=None):
    """Delete rows older than their resolution's retention. Returns {table: deleted}."""
    now = now or timezone.now()
    keep = {RAW: timedelta(hours=settings.MONITOR_RETENTION_RAW_H),
            MINUTE: timedelta(days=settings.MONITOR_RETENTION_MINUTE_D),
            HOUR: timedelta(days=settings.MONITOR_RETENTION_HOUR_D)}
    deleted = {}
    for model in SPECS:
        for resolution, age in keep.items():
            count, _ = model.objects.filter(resolution=resolution, ts__lt=now - age).delete()
            deleted[f"{model._meta.model_name}:{resolution}"] = count
    return deleted


def run_all(now=None):
    """Minute and hour rollups of every table, then retention."""
    written = {}
    for model in SPECS:
        written[f"{model._meta.model_name}:60"] = rollup(model, RAW, MINUTE, now)
        written[f"{model._meta.model_name}:3600"] = rollup(model, MINUTE, HOUR, now)
    return {"written": written, "deleted": prune(now)}
