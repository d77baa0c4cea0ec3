"""The fleet's section over the clusters' sections: the table, the tail, the fleet's summary. Not pure: the DR
channels', alerts', rollouts' and query digests' parts are read from the database (their apps' reads)."""

from collections.abc import Mapping, Sequence
from typing import Any

from apps.alerts import report as alerts_report
from apps.dr import report as dr_report
from apps.rollouts import report as rollouts_report

from .. import fmt
from .common import Point, _join
from .digests import digest_section
from .summary import writer_change_phrase

FLEET_DETAILED = 10  # clusters shown in full in a fleet report (the least available first)


def _worst_first(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """Least available first; at equal availability, the one with more trouble of another kind."""
    return (
        r["availability"] is None,
        r["availability"] if r["availability"] is not None else 0,
        -r["backends_below_100"],
        -r["proxysql_unreachable_s"],
        -r["writer_changes"],
        -r["conn_err"],
        -r["mirror_saturations"],
        -r["drift_found"],
        r["name"],
    )


def section(
    sections: Sequence[dict[str, Any]],
    start: float,
    end: float,
    prev_start: float,
    prev_end: float,
    before: str = "the period before",
    digests: bool = True,
    table_rows: int = FLEET_DETAILED,
) -> dict[str, Any]:
    """The fleet's table (the least available first; `table_rows` of them listed, the others one line: _tail),
    its summary, and its DR channels and query digests."""
    rows: list[dict[str, Any]] = []  # one per cluster, JSON-ready
    up = observed = 0.0
    for s in sections:
        svc = s["service"]
        obs = s["coverage"]["observed_s"]
        if svc["availability"] is not None:
            up += obs - svc["down_s"]
            observed += obs
        done = [w for w in s["writer_changes"] if w["changed"]]
        rows.append(
            {
                "id": s["id"],
                "name": s["name"],
                "availability": svc["availability"],
                "down_s": svc["down_s"],
                "writer_changes": len(done),
                "max_interruption_ms": max((w["interruption_ms"] or 0 for w in done), default=None),
                "conn_err": s["conn_err"]["total"],
                "conn_err_change_pct": s["conn_err"]["change_pct"],
                "mirror_saturations": s["mirror"]["count"],
                "drift_found": s["drift"]["found"],
                "drift_fixed": s["drift"]["fixed"],
                "proxysql_unreachable_s": round(sum(p["unreachable_s"] for p in s["proxysql"]), 3),
                "alerts_fired": s.get("alerts", {}).get("fired", 0),
                "alerts_held": s.get("alerts", {}).get("held_cleared", 0),
                "backends_below_100": sum(
                    1 for b in s["backends"] if b["availability"] is not None and b["availability"] < 100
                ),
                "headline": s["summary"]["headline"],
            }
        )
    availability = round(100.0 * up / observed, 6) if observed else None
    ranked = sorted(rows, key=_worst_first)
    changes = [w for s in sections for w in s["writer_changes"]]
    ce_total = sum(s["conn_err"]["total"] for s in sections)
    prevs = [s["conn_err"]["previous"] for s in sections if s["conn_err"]["previous"] is not None]
    ce_prev = sum(prevs) if prevs else None
    head = [
        f"{fmt.percent(availability)} available across {fmt.count_word(len(sections), 'cluster')}"
        if availability is not None
        else f"no monitoring data across {fmt.count_word(len(sections), 'cluster')}"
    ]
    w = writer_change_phrase(changes)
    head.append(w or "no writer change")
    headline = "The fleet: " + "; ".join(head) + "."
    points: list[Point] = []
    below = [r for r in ranked if r["availability"] is not None and r["availability"] < 100]
    if below:
        points.append(
            {
                "tone": "warn" if below[0]["availability"] >= 99.9 else "bad",
                "text": "Least available: "
                + _join([f"{r['name']} {fmt.percent(r['availability'])}" for r in below[:3]])
                + ".",
            }
        )
    else:
        points.append({"tone": "good", "text": "Every cluster was available all the time the polls saw."})
    points.append(
        {
            "tone": "good" if not ce_total or (ce_prev is not None and ce_total <= ce_prev) else "warn",
            "text": f"{ce_total:,} connection errors (ConnERR), {fmt.change_text(ce_total, ce_prev, 'count', before)}.",
        }
    )
    sat = sum(r["mirror_saturations"] for r in rows)
    if sat:
        points.append(
            {
                "tone": "bad",
                "text": f"Mirror queues saturated {fmt.count_word(sat, 'time')}: mirrored queries were likely dropped.",
            }
        )
    found, fixed = sum(r["drift_found"] for r in rows), sum(r["drift_fixed"] for r in rows)
    if found or fixed:
        points.append(
            {
                "tone": "good" if fixed >= found else "warn",
                "text": f"Configuration drift found {fmt.count_word(found, 'time')}, fixed {fmt.count_word(fixed, 'time')}.",
            }
        )
    if any(r["alerts_fired"] or r["alerts_held"] for r in rows):
        points.append(alerts_report.summary_point(alerts_report.section(None, start, end), fmt))
    channels = dr_report.section(None, start, end)
    channel_point = dr_report.summary_point(channels, fmt)
    if channel_point and channel_point["tone"] != "good":
        points.append(channel_point)
    px = [(r["name"], r["proxysql_unreachable_s"]) for r in rows if r["proxysql_unreachable_s"] >= 1]
    if px:
        points.append(
            {
                "tone": "warn",
                "text": "ProxySQL nodes unreachable: " + _join([f"{n} {fmt.duration(s)}" for n, s in px[:5]]) + ".",
            }
        )
    detailed = {r["id"] for r in ranked[:FLEET_DETAILED]}
    for s in sections:
        s["detailed"] = s["id"] in detailed
    hourly = {s["id"] for s in sections if s["coverage"].get("hourly_only")}
    return {
        "availability": availability,
        "clusters": ranked,
        "detailed": len(detailed),
        "listed": min(len(ranked), table_rows),
        "tail": _tail(ranked[table_rows:], hourly),
        "summary": {"headline": headline, "points": points, "availability": availability},
        "dr_channels": channels,
        "rollouts": rollouts_report.section(None, start, end),
        "digests": digest_section(start, end, prev_start, prev_end, cluster_id=None) if digests else None,
    }


def _tail(rows: Sequence[Mapping[str, Any]], hourly: set[int]) -> dict[str, Any] | None:
    """One line for the clusters after the table's: how many, their least availability, their sums."""
    if not rows:
        return None
    known = [r["availability"] for r in rows if r["availability"] is not None]
    return {
        "clusters": len(rows),
        "least_availability": min(known) if known else None,
        "no_data": len(rows) - len(known),
        "down_s": round(sum(r["down_s"] for r in rows), 3),
        "writer_changes": sum(r["writer_changes"] for r in rows),
        "conn_err": sum(r["conn_err"] for r in rows),
        "mirror_saturations": sum(r["mirror_saturations"] for r in rows),
        "drift_found": sum(r["drift_found"] for r in rows),
        "backends_below_100": sum(r["backends_below_100"] for r in rows),
        "proxysql_unreachable_s": round(sum(r["proxysql_unreachable_s"] for r in rows), 3),
        "hourly_only": sum(1 for r in rows if r["id"] in hourly),
    }
