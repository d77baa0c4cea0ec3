"""Rollups (raw -> 1 minute -> 1 hour) and retention, run by a scheduled task.

Each complete bucket is aggregated once, in the database (one GROUP BY per bucket and table), and the
last rolled bucket is remembered in RollupMark so a restarted task neither skips nor doubles a bucket.
Every rollup keeps its bucket's extremes: averaged figures their minimum and maximum (a raw row is its
own extreme, so Coalesce(<field>_min, <field>) reads raw and rollup rows alike), worst-of figures their
worst, and a pool row's status its worst by POOL_STATUS_SEVERITY (never an alphabetical minimum, which
kept ONLINE over a SHUNNED blip).
"""
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Case, F, IntegerField, Max, Min, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from .models import (HOUR, MINUTE, POOL_STATUS_SEVERITY, RAW, BackendSample, MirrorRuleSample, PoolSample,
                     ProxySQLSample, RollupMark)

# table: (group-by fields, worst-of as Max, worst-of as Min, worst-of by a severity order); the averaged
# figures are the model's EXTREMES.
SPECS = {
    ProxySQLSample: (["node_id"], ["mirror_queue_length", "mirror_max_concurrency", "mirror_max_queue_length",
                                   "mysql_threads"], ["reachable"], {}),
    PoolSample: (["node_id", "hostgroup", "srv_host", "srv_port"], [], [], {"status": POOL_STATUS_SEVERITY}),
    BackendSample: (["server_id"], ["recv_queue", "desync", "reject_queries", "read_only"],
                    ["reachable", "local_state", "primary", "ready"], {}),
    MirrorRuleSample: (["node_id", "rule_id"], ["loss", "mirror_hostgroup", "ambiguous"], [], {}),
}


def _aggregates(model):
    """{"agg_<field>": aggregate} for one bucket of `model`'s rows (raw or rollup rows alike); the prefix
    keeps an aggregate's name from hiding the column that another aggregate reads."""
    _, maxed, minned, ranked = SPECS[model]
    out = {}
    for f in model.EXTREMES:
        out[f"agg_{f}"] = Avg(f)
        out[f"agg_{f}_min"] = Min(Coalesce(F(f"{f}_min"), F(f)))
        out[f"agg_{f}_max"] = Max(Coalesce(F(f"{f}_max"), F(f)))
    out.update({f"agg_{f}": Max(f) for f in maxed})
    out.update({f"agg_{f}": Min(f) for f in minned})
    for f, order in ranked.items():
        # Unknown values rank worst: a status ProxySQL adds later is not hidden behind ONLINE.
        out[f"agg_{f}_rank"] = Max(Case(*[When(**{f: v}, then=Value(i)) for i, v in enumerate(order)],
                                        default=Value(len(order)), output_field=IntegerField()))
        out[f"agg_{f}_other"] = Max(Case(When(~Q(**{f"{f}__in": order}), then=F(f))))
    return out


def _fields_of(model, row):
    """An aggregated row as the model's fields: prefixes dropped, ranks back to the values they stand for."""
    out = {k[4:] if k.startswith("agg_") else k: v for k, v in row.items()}
    for f, order in SPECS[model][3].items():
        rank, other = out.pop(f"{f}_rank"), out.pop(f"{f}_other")
        out[f] = order[rank] if rank < len(order) else other
    return out


def _floor(ts, seconds):
    epoch = int(ts.timestamp())
    return ts.fromtimestamp(epoch - epoch % seconds, tz=ts.tzinfo)


def rollup(model, source, target, now=None, max_buckets=24 * 60):
    """Aggregate complete `target`-second buckets of `source` rows into `target` rows. Returns the count."""
    now = now or timezone.now()
    group = SPECS[model][0]
    aggregates = _aggregates(model)
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
        bucket = model.objects.filter(resolution=source, ts__gte=start, ts__lt=stop)
        rows = bucket.values(*group).annotate(**aggregates)
        objs = [model(ts=start, resolution=target, **_fields_of(model, row)) for row in rows]
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
