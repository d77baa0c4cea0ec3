"""The top query digests by total time and the slower or new ones against the period before."""

from .. import fmt
from .common import _round

DIGEST_TOP = 10
DIGEST_SLOWER = 1.5  # average time up by half or more...
DIGEST_SLOWER_MS = 0.2  # ...and by at least this much...
DIGEST_MIN_COUNT = 100  # ...over at least this many executions in both periods


def digest_section(start, end, prev_start, prev_end, cluster_id=None):
    """Top digests by total time and their change against the period before, from apps.digests' selectors.
    The digests app is optional here: without it the section says so instead of failing the report."""
    try:
        # why: the digests app is optional here (ImportError below)
        from apps.digests import selectors as ds
    except ImportError:  # the digest history is not installed in this deployment
        return {"available": False, "note": "Query digest history is not available.", "rows": [], "regressions": []}

    def window(a, b):
        w = ds.effective_window(int(a), int(b))
        w.pieces = ds.plan_window(w.start, w.end)
        return w

    this, before = window(start, end), window(prev_start, prev_end)
    filters = ds.Filters(cluster=cluster_id)
    page = ds.top_digests(this, filters, sort="total", per_page=25)
    rows, regressions = [], []
    for r in page.rows:
        prev_row = None
        if r.digest:
            prev_page = ds.top_digests(
                before, ds.Filters(cluster=cluster_id, search=r.digest), sort="total", per_page=5
            )
            prev_row = next((p for p in prev_page.rows if p.digest_id == r.digest_id), None)
        avg_ms = r.avg_us / 1000 if r.avg_us is not None else None
        prev_avg = prev_row.avg_us / 1000 if prev_row and prev_row.avg_us is not None else None
        row = {
            "digest": r.digest,
            "text": r.text[:400],
            "count": r.count,
            "total_s": round(r.total_us / 1e6, 3),
            "avg_ms": _round(avg_ms, 3),
            "max_ms": _round(r.max_us / 1000 if r.max_us is not None else None, 3),
            "prev_count": prev_row.count if prev_row else 0,
            "prev_total_s": round(prev_row.total_us / 1e6, 3) if prev_row else 0.0,
            "prev_avg_ms": _round(prev_avg, 3),
            "hostgroups": (r.where or {}).get("hostgroups", []),
            "url": f"/digests/{r.digest_id}/",
        }
        verdict = ""
        if prev_row is None or prev_row.count == 0:
            verdict = "new"
        elif (
            avg_ms is not None
            and prev_avg
            and r.count >= DIGEST_MIN_COUNT
            and prev_row.count >= DIGEST_MIN_COUNT
            and avg_ms >= prev_avg * DIGEST_SLOWER
            and avg_ms - prev_avg >= DIGEST_SLOWER_MS
        ):
            verdict = "slower"
        row["verdict"] = verdict
        row["total_change_pct"] = _round(fmt.change(row["total_s"], row["prev_total_s"] or None))
        if verdict:
            regressions.append(row)
        rows.append(row)
    has_prev = bool(before.pieces) and ds.top_digests(before, filters, per_page=1).total > 0
    if not has_prev:  # nothing was recorded the period before: "new" says nothing
        for row in rows:
            if row["verdict"] == "new":
                row["verdict"] = ""
        regressions = [r for r in regressions if r["verdict"]]
    return {
        "available": True,
        "note": "",
        "total_digests": page.total,
        "rows": rows[:DIGEST_TOP],
        "regressions": regressions,
        "has_previous": has_prev,
        "snapped": this.snapped,
        "window": [this.start, this.end],
    }
