"""Mirror queue saturation per ProxySQL node (status.mirror's verdict on each sample)."""

from typing import Any

from apps.monitoring import status

from .. import timeline as tl
from ..history import P
from ..timeline import Row, Timeline
from .common import MAX_STRETCHES, SectionContext, _truthy


def mirror(ctx: SectionContext) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = []
    stretches: list[dict[str, Any]] = []
    has_data = False
    for nid, segs in ctx.h.proxysql.items():
        name = ctx.nodes[nid].name if nid in ctx.nodes else str(nid)

        def verdict(r: Row) -> status.Mirror | None:
            if not _truthy(r[P["reachable"]]):
                return None
            return status.mirror(
                {
                    "mirror_queue_length": r[P["mirror_queue_length"]],
                    "mirror_max_queue_length": r[P["mirror_max_queue_length"]],
                    "mysql_threads": r[P["mysql_threads"]],
                    "mirror_concurrency": r[P["mirror_concurrency"]],
                    "mirror_max_concurrency": r[P["mirror_max_concurrency"]],
                }
            )

        saturated: Timeline = []
        for a, b, r in segs:
            m = verdict(r)
            if m is None:
                continue
            if (m.queue or 0) > 0 or (m.concurrency or 0) > 0:
                has_data = True
            tl.append(saturated, a, b, bool(m.saturated))
        ratios = tl.bucketed(
            segs, ctx.start, ctx.end, ctx.bucket_s, lambda r: v.queue_ratio if (v := verdict(r)) else None, how="max"
        )
        nodes.append(
            {"id": nid, "name": name, "ratio_buckets": [None if v is None else round(v * 100, 1) for v in ratios]}
        )
        for a, b in tl.stretches(saturated, lambda v: v, join_gap=ctx.h.max_gap):
            inside = [v for sa, sb, r in segs if sb > a and sa < b and (v := verdict(r))]
            peak = max(inside, key=lambda m: m.queue_ratio or 0, default=None)
            stretches.append(
                {
                    "node": name,
                    "start": a,
                    "end": b,
                    "seconds": round(b - a, 3),
                    "peak_queue": peak.queue if peak else None,
                    "limit": peak.queue_limit if peak else None,
                    "peak_pct": round((peak.queue_ratio or 0) * 100, 1) if peak else None,
                    "concurrency_at_limit": any(m.concurrency_at_limit for m in inside),
                }
            )
    stretches.sort(key=lambda s: s["start"])
    return {
        "has_data": has_data,
        "warn_pct": status.MIRROR_QUEUE_WARN * 100,
        "nodes": nodes,
        "shared_with": ctx.shared_with,
        "stretches": stretches[:MAX_STRETCHES],
        "count": len(stretches),
        "total_s": round(sum(s["seconds"] for s in stretches), 3),
        "bucket_s": ctx.bucket_s,
    }
