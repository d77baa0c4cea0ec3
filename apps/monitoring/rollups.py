"""Rollups (raw -> 1 minute -> 1 hour) and retention, run by a scheduled task.

Each complete bucket is aggregated once, in the database (one GROUP BY per bucket and table), and the
last rolled bucket is remembered in RollupMark so a restarted task neither skips nor doubles a bucket.
Every rollup keeps its bucket's extremes: averaged figures their minimum and maximum (a raw row is its
own extreme, so Coalesce(<field>_min, <field>) reads raw and rollup rows alike), worst-of figures their
worst, and a pool server's status its worst by POOL_STATUS_SEVERITY (never an alphabetical minimum, which
kept ONLINE over a SHUNNED blip). The pool's packed snapshots are aggregated here in Python (pool.py).
The rollups read rows; once they have, a ProxySQL node's rows become history chunks (chunks.py).
"""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple, TypedDict

from django.conf import settings
from django.db import transaction
from django.db.models import Aggregate, Avg, F, FloatField, Max, Min, Model, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from . import chunks, pool
from .models import HOUR, MINUTE, RAW, BackendSample, MirrorRuleSample, PoolSnapshot, ProxySQLSample, RollupMark


class Spec(NamedTuple):
    """How a table is aggregated in the database; the averaged figures are the model's EXTREMES. The pool's
    packed snapshots (PoolSnapshot) are rolled up in Python (pool.rollup)."""

    group_by: list[str]
    worst_max: list[str]  # worst-of as Max
    worst_min: list[str]  # worst-of as Min


# The tables the rollups read: these, and those the apps above add (dr: ChannelSample, in its ready()); each read
# through its _default_manager (its `objects`: a model class taken as any model declares none to the type checker).
SPECS: dict[type[Model], Spec] = {
    ProxySQLSample: Spec(
        ["node_id"],
        ["mirror_queue_length", "mirror_max_concurrency", "mirror_max_queue_length", "mysql_threads"],
        ["reachable"],
    ),
    BackendSample: Spec(
        ["server_id"],
        ["recv_queue", "desync", "reject_queries", "read_only"],
        ["reachable", "local_state", "primary", "ready"],
    ),
    MirrorRuleSample: Spec(["node_id", "rule_id"], ["loss", "mirror_hostgroup", "ambiguous"], []),
}
TABLES: tuple[type[Model], ...] = (ProxySQLSample, PoolSnapshot, BackendSample, MirrorRuleSample)
# Owners (nodes, backends) whose rows of one span one run turns into chunks: 4,000 owners' hour goes in
# ten runs (ten minutes), each well inside the task's time limit.
COMPACT_OWNERS_PER_RUN = 400


class RollupResult(TypedDict):
    written: dict[str, int]  # "<table>:<target resolution>" -> rows
    compacted: int  # records turned into chunks
    deleted: dict[str, int]  # "<table>:<resolution>" -> rows past retention


def _aggregates(model: type[Model]) -> dict[str, Aggregate]:
    """{"agg_<field>": aggregate} for one bucket of `model`'s rows (raw or rollup rows alike); the prefix
    keeps an aggregate's name from hiding the column that another aggregate reads."""
    spec = SPECS[model]
    extremes: tuple[str, ...] = getattr(model, "EXTREMES")  # set by models.with_extremes(), not declared
    out: dict[str, Aggregate] = {}
    for f in extremes:
        out[f"agg_{f}"] = Avg(f)
        # A whole-number figure (cluster_size) has float extremes: Django refuses to coalesce the two unnamed.
        out[f"agg_{f}_min"] = Min(Coalesce(F(f"{f}_min"), F(f), output_field=FloatField()))
        out[f"agg_{f}_max"] = Max(Coalesce(F(f"{f}_max"), F(f), output_field=FloatField()))
    out.update({f"agg_{f}": Max(f) for f in spec.worst_max})
    out.update({f"agg_{f}": Min(f) for f in spec.worst_min})
    return out


def _bucket_rows(model: type[Model], bucket: QuerySet[Model], start: datetime, target: int) -> Sequence[Model]:
    """The unsaved `target` rows of one bucket (`bucket`: its finer rows)."""
    if model is PoolSnapshot:
        return pool.rollup(bucket.values_list("node_id", "servers"), start, target)
    rows = bucket.values(*SPECS[model].group_by).annotate(**_aggregates(model))
    return [
        model(ts=start, resolution=target, **{k[4:] if k.startswith("agg_") else k: v for k, v in row.items()})
        for row in rows
    ]


def _floor(ts: datetime, seconds: int) -> datetime:
    epoch = int(ts.timestamp())
    return ts.fromtimestamp(epoch - epoch % seconds, tz=ts.tzinfo)


def rollup(
    model: type[Model], source: int, target: int, now: datetime | None = None, max_buckets: int = 24 * 60
) -> int:
    """Aggregate complete `target`-second buckets of `source` rows into `target` rows. Returns the count."""
    now = now or timezone.now()
    name = f"{model._meta.model_name}:{target}"
    mark, _ = RollupMark.objects.get_or_create(name=name)
    end = _floor(now, target)
    start = mark.rolled_until
    if start is None:
        first = model._default_manager.filter(resolution=source).order_by("ts").values_list("ts", flat=True).first()
        if first is None:
            return 0
        start = _floor(first, target)
    written = 0
    buckets = 0
    while start < end and buckets < max_buckets:
        stop = start + timedelta(seconds=target)
        objs = _bucket_rows(
            model, model._default_manager.filter(resolution=source, ts__gte=start, ts__lt=stop), start, target
        )
        with transaction.atomic():
            model._default_manager.bulk_create(objs, batch_size=1000)
            RollupMark.objects.filter(name=name).update(rolled_until=stop)
        written += len(objs)
        start = stop
        buckets += 1
    return written


def prune(now: datetime | None = None) -> dict[str, int]:
    """Delete rows older than their resolution's retention. Returns {table: deleted}."""
    now = now or timezone.now()
    keep = {
        RAW: timedelta(hours=settings.MONITOR_RETENTION_RAW_H),
        MINUTE: timedelta(days=settings.MONITOR_RETENTION_MINUTE_D),
        HOUR: timedelta(days=settings.MONITOR_RETENTION_HOUR_D),
    }
    deleted: dict[str, int] = {}
    for model in TABLES:
        for resolution, age in keep.items():
            count, _ = model._default_manager.filter(resolution=resolution, ts__lt=now - age).delete()
            deleted[f"{model._meta.model_name}:{resolution}"] = count
    deleted.update(chunks.prune(keep, now))
    return deleted


def run_all(now: datetime | None = None) -> RollupResult:
    """Minute and hour rollups of every table, the ProxySQL rows they have read into history chunks
    (chunks.py), then retention."""
    written: dict[str, int] = {}
    for model in TABLES:
        written[f"{model._meta.model_name}:60"] = rollup(model, RAW, MINUTE, now)
        written[f"{model._meta.model_name}:3600"] = rollup(model, MINUTE, HOUR, now)
    compacted = chunks.compact(now, max_owners=COMPACT_OWNERS_PER_RUN)
    return {"written": written, "compacted": compacted, "deleted": prune(now)}
