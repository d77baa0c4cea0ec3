"""Connection errors (ConnERR) per backend and over time, and the queries served, against the period before."""

from collections import defaultdict

from .. import fmt, history
from .. import timeline as tl
from ..history import L, P
from .common import _round, _rounded, _sum_lists


def conn_err_and_traffic(ctx):
    start, end, width = ctx.start, ctx.end, ctx.bucket_s
    per_backend = defaultdict(float)
    per_backend_hgs = defaultdict(set)
    for (node_id, hg, host, port), segs in ctx.h.pool.items():
        total = sum((b - a) * (r[L["conn_err_ps"]] or 0.0) for a, b, r in segs)
        per_backend[f"{host}:{port}"] += total
        if round(total) > 0:
            per_backend_hgs[f"{host}:{port}"].add(hg)
    err_buckets = _sum_lists(
        [tl.bucketed(segs, start, end, width, lambda r: r[P["conn_err_ps"]]) for segs in ctx.h.proxysql.values()]
    )
    qps_buckets = _sum_lists(
        [
            tl.bucketed(segs, start, end, width, lambda r: r[P["questions_ps"]], how="mean")
            for segs in ctx.h.proxysql.values()
        ]
    )
    total_err = sum((b - a) * (r[P["conn_err_ps"]] or 0.0) for segs in ctx.h.proxysql.values() for a, b, r in segs)
    queries = sum((b - a) * (r[P["questions_ps"]] or 0.0) for segs in ctx.h.proxysql.values() for a, b, r in segs)
    prev = history.load_proxysql_only(ctx.cluster, ctx.prev_start, ctx.prev_end, ctx.hourly_only)
    prev_err_b = _sum_lists(
        [
            tl.bucketed(segs, ctx.prev_start, ctx.prev_end, width, lambda r: r[P["conn_err_ps"]])
            for segs in prev.values()
        ]
    )
    prev_qps_b = _sum_lists(
        [
            tl.bucketed(segs, ctx.prev_start, ctx.prev_end, width, lambda r: r[P["questions_ps"]], how="mean")
            for segs in prev.values()
        ]
    )
    has_prev = any(prev.values())
    prev_err = (
        sum((b - a) * (r[P["conn_err_ps"]] or 0.0) for segs in prev.values() for a, b, r in segs) if has_prev else None
    )
    prev_q = (
        sum((b - a) * (r[P["questions_ps"]] or 0.0) for segs in prev.values() for a, b, r in segs) if has_prev else None
    )
    rows = sorted(
        (
            {"name": k, "hostgroups": sorted(per_backend_hgs[k]), "total": round(v)}
            for k, v in per_backend.items()
            if round(v) > 0
        ),
        key=lambda r: -r["total"],
    )
    worst_hour = max(range(len(err_buckets)), key=lambda i: err_buckets[i] or 0, default=None)
    conn_err = {
        "total": round(total_err),
        "previous": None if prev_err is None else round(prev_err),
        "change_pct": _round(fmt.change(round(total_err), None if prev_err is None else round(prev_err))),
        "per_backend": rows[:15],
        "bucket_s": width,
        "buckets": _rounded(err_buckets),
        "previous_buckets": _rounded(prev_err_b),
        "worst_bucket": None
        if worst_hour is None or not (err_buckets[worst_hour] or 0)
        else {"start": start + worst_hour * width, "total": round(err_buckets[worst_hour])},
    }
    peak = max((v for v in qps_buckets if v is not None), default=None)
    traffic = {
        "queries": round(queries),
        "previous": None if prev_q is None else round(prev_q),
        "change_pct": _round(fmt.change(queries, prev_q)),
        "peak_qps": _round(peak),
        "bucket_s": width,
        "buckets_qps": _rounded(qps_buckets, 1),
        "previous_buckets_qps": _rounded(prev_qps_b, 1),
        "shared_with": ctx.shared_with,
    }
    return conn_err, traffic
