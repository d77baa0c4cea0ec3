"""The rules judged after the digest poll rounds, from what those rounds stored in the database:
- measured mirror loss: each polled node's newest MirrorRuleSample per mirror rule (one query);
- query digests: per cluster, at most every ALERTS_DIGEST_EVERY_S, by the shard that owns the cluster:
  the top digests of the window by total time (apps.digests.selectors.top_digests), a digest first seen
  recently among them, and each top digest's average against the 7 days before the window.
"""

import time
from datetime import datetime, timezone

from django.conf import settings

from apps.digests.models import Digest, DigestPoll
from apps.monitoring import live
from apps.monitoring.formatting import microseconds
from apps.monitoring.models import RAW, MirrorRuleSample
from apps.digests import selectors as ds

from . import context, evaluate, rulesettings
from .conditions import Observation

MIRROR_RULES = ("mirror_loss",)
DIGEST_RULES = ("digest_new_top", "digest_slower")
BASELINE_S = 7 * 86400


def after_digest_round(node_pks, shard=0, shards=1, now=None):
    if not settings.ALERTS_ENABLED:
        return {}
    now = now or time.time()
    inv = context.inventory()
    passes = mirror_passes(inv, node_pks, now) if node_pks else []
    passes += digest_passes(inv, _digest_due(inv, shard, shards, now), now)
    if not passes:
        return {}
    return evaluate.apply(passes, context.situation(inv, now), now)


def mirror_passes(inv, node_pks, now):
    """Per polled node: its mirror rules' newest measured window (within two digest intervals)."""
    since = datetime.fromtimestamp(now - 2 * settings.MONITOR_DIGEST_INTERVAL_S - 5, tz=timezone.utc)
    newest = {}
    for s in (
        MirrorRuleSample.objects.filter(node_id__in=node_pks, resolution=RAW, ts__gte=since)
        .order_by("ts")
        .only(
            "node_id",
            "rule_id",
            "ts",
            "loss",
            "expected_ps",
            "mirrored_ps",
            "interval_s",
            "prepared_share",
            "mirror_hostgroup",
        )
    ):
        newest[(s.node_id, s.rule_id)] = s
    passes = {}
    for pk in node_pks:
        cluster_id = inv.node_cluster.get(pk)
        if cluster_id is not None:
            passes[pk] = evaluate.Pass(cluster_id, {f"m{pk}"}, MIRROR_RULES, [])
    for (node_pk, rule_id), s in newest.items():
        cluster_id = inv.node_cluster.get(node_pk)
        if cluster_id is None or s.loss is None:
            continue
        c = inv.clusters[cluster_id]
        setting = rulesettings.effective(c, "mirror_loss")
        if not setting.enabled or s.loss * 100 <= setting.params["percent"]:
            continue
        n = c.nodes[node_pk]
        span = s.interval_s or 0
        expected = (s.expected_ps or 0) * span
        mirrored = (s.mirrored_ps or 0) * span
        passes[node_pk].observations.append(
            Observation(
                "mirror_loss",
                f"n{node_pk}:r{rule_id}",
                f"m{node_pk}",
                f"mirror rule {rule_id} on {n.name}",
                f"mirror rule {rule_id} on {n.name} lost {s.loss:.0%} of its copies in the last {span:.0f} s "
                f"({expected:,.0f} to mirror to hostgroup {s.mirror_hostgroup}, {mirrored:,.0f} ran)",
                value=s.loss * 100,
                node=node_pk,
                details={
                    "rule_id": rule_id,
                    "loss": s.loss,
                    "expected": expected,
                    "mirrored": mirrored,
                    "prepared_share": s.prepared_share,
                    "window_end": s.ts.timestamp(),
                },
            )
        )
    return list(passes.values())


def _digest_due(inv, shard, shards, now):
    key = f"alerts:digests:{shard}:{shards}"
    try:
        r = live.client()
        last = r.get(key)
        if last is not None and now - float(last) < settings.ALERTS_DIGEST_EVERY_S:
            return []
        r.set(key, now, ex=86400)
    except Exception:
        return []
    return [pk for pk in inv.clusters if pk % shards == shard]


def _window(ds, a, b):
    w = ds.effective_window(int(a), int(b))
    w.pieces = ds.plan_window(w.start, w.end)
    return w


def digest_passes(inv, cluster_pks, now):
    passes = []
    for pk in cluster_pks:
        c = inv.clusters[pk]
        new_top, slower = rulesettings.effective(c, "digest_new_top"), rulesettings.effective(c, "digest_slower")
        p = evaluate.Pass(pk, {f"g{pk}"}, DIGEST_RULES, [])
        passes.append(p)
        if not (new_top.enabled or slower.enabled) or not c.nodes:
            continue
        if new_top.enabled:
            window = new_top.params["window_min"] * 60
            top = ds.top_digests(
                _window(ds, now - window, now),
                ds.Filters(cluster=pk),
                sort="total",
                per_page=int(new_top.params["top"]),
            )
            fresh_after = now - new_top.params["new_hours"] * 3600
            # Only where the cluster's digest history is older than "new": right after adoption, all is new.
            older = DigestPoll.objects.filter(node_id__in=list(c.nodes), ts__lt=int(fresh_after)).exists()
            first = dict(
                Digest.objects.filter(pk__in=[r.digest_id for r in top.rows]).values_list("pk", "first_polled_at")
            )
            for rank, r in enumerate(top.rows, 1):
                if older and first.get(r.digest_id) and first[r.digest_id] >= fresh_after:
                    p.observations.append(
                        Observation(
                            "digest_new_top",
                            f"g{pk}:d{r.digest}",
                            f"g{pk}",
                            f"query {r.digest} on {c.name}",
                            f"a new query is number {rank} by total time over the last {new_top.params['window_min']:g} min "
                            f"({microseconds(r.total_us)} in {r.count:,} executions): {r.short or r.text[:120]}",
                            value=rank,
                            details={"digest": r.digest, "digest_id": r.digest_id, "text": r.text[:500]},
                        )
                    )
        if slower.enabled:
            window = slower.params["window_min"] * 60
            this = _window(ds, now - window, now)
            top = ds.top_digests(this, ds.Filters(cluster=pk), sort="total", per_page=int(slower.params["top"]))
            before = _window(ds, now - window - BASELINE_S, now - window)
            for r in top.rows:
                if (
                    r.count < slower.params["min_count"]
                    or r.avg_us is None
                    or r.avg_us / 1000 < slower.params["min_ms"]
                ):
                    continue
                base = next(
                    (
                        b
                        for b in ds.top_digests(
                            before, ds.Filters(cluster=pk, search=r.digest), sort="total", per_page=5
                        ).rows
                        if b.digest_id == r.digest_id
                    ),
                    None,
                )
                if base is None or base.count < slower.params["min_count"] or not base.avg_us:
                    continue
                factor = r.avg_us / base.avg_us
                if factor >= slower.params["factor"]:
                    p.observations.append(
                        Observation(
                            "digest_slower",
                            f"g{pk}:d{r.digest}",
                            f"g{pk}",
                            f"query {r.digest} on {c.name}",
                            f"average {microseconds(r.avg_us)} over the last {slower.params['window_min']:g} min, "
                            f"{factor:.1f}× its 7-day average of {microseconds(base.avg_us)}: {r.short or r.text[:120]}",
                            value=factor,
                            details={
                                "digest": r.digest,
                                "digest_id": r.digest_id,
                                "avg_ms": r.avg_us / 1000,
                                "baseline_ms": base.avg_us / 1000,
                                "count": r.count,
                            },
                        )
                    )
    return passes
