"""The headline and the points a manager reads first, for one cluster (the fleet's: fleet.py)."""

from collections.abc import Iterable, Mapping
from typing import Any

from apps.alerts import report as alerts_report
from apps.dr import report as dr_report
from apps.plans import registry

from .. import fmt
from .common import DESYNCED, OUT, UNREACHABLE, Point, Summary, _join


def writer_change_phrase(changes: Iterable[Mapping[str, Any]]) -> str:
    done = [w for w in changes if w["changed"]]
    if not done:
        return ""
    parts: list[str] = []
    for spec in registry.KINDS.values():  # each kind that moves the writer, named as its spec says
        group = [w for w in done if w["kind"] == spec.kind]
        noun = spec.report_noun
        if not group or not noun:
            continue
        times = [fmt.duration(w["interruption_ms"] / 1000) for w in group if w["interruption_ms"] is not None]
        what = fmt.count_word(len(group), noun)
        if len(times) == 1:
            parts.append(f"{what}, {times[0]} of writer interruption")
        elif times:
            parts.append(f"{what} ({_join(times)} of writer interruption)")
        else:
            parts.append(what)
    return "; ".join(parts)


def measured_words(svc: Mapping[str, Any]) -> str:
    """Which part of an interruption the operations measured and which the polls sampled, and how often."""
    m, smp, n = svc.get("measured_s") or 0, svc.get("sampled_s") or 0, svc.get("measured_ops") or 0
    polls = f"sampled by polls every {fmt.duration(svc.get('interval_s'))}"
    ops = (
        f"measured by {fmt.count_word(n, 'operation')}' own clocks"
        if n > 1
        else "measured by the operation's own clock"
    )
    if m and smp:
        return f" ({fmt.duration(m)} {ops}, {fmt.duration(smp)} {polls})"
    if m:
        return f" ({ops})"
    return f" ({polls})" if smp else ""


def cluster_summary(s: Mapping[str, Any], before: str = "the period before") -> Summary:
    """The headline and the few points a manager should see, each with a tone (good / warn / bad)."""
    points: list[Point] = []
    avail = s["service"]["availability"]
    cov = s["coverage"]
    polled = (
        avail is not None or any(p["observed_s"] for p in s["proxysql"]) or any(b["observed_s"] for b in s["backends"])
    )
    if not polled:
        headline = f"{s['name']}: no monitoring data for this period."
        return {
            "headline": headline,
            "points": [{"tone": "warn", "text": "Nothing was polled in this period."}],
            "availability": None,
        }
    head = [f"{fmt.percent(avail)} available" if avail is not None else "service availability unknown"]
    w = writer_change_phrase(s["writer_changes"])
    head.append(w or "no writer change")
    down = s["service"]["down_s"]
    if down > 0 and not w:
        head.append(f"{fmt.duration(down)} of service interruption")
    headline = f"{s['name']}: " + "; ".join(head) + "."
    if avail is None:
        points.append({"tone": "warn", "text": "No backend or connection-pool polls: service availability unknown."})
    elif down > 0:
        longest = max(s["service"]["stretches"], key=lambda x: x["seconds"], default=None)
        text = f"Service interrupted for {fmt.duration(down)} in total{measured_words(s['service'])}"
        if longest:
            text += f"; longest {fmt.duration(longest['seconds'])} at {fmt.clock(longest['start'])} ({longest['why']})"
        points.append({"tone": "bad", "text": text + "."})
    else:
        points.append({"tone": "good", "text": "No service interruption seen by the polls."})
    if avail is not None and cov["observed_s"] < cov["period_s"] * 0.99:
        points.append(
            {
                "tone": "warn",
                "text": f"Monitoring covered {fmt.duration(cov['observed_s'])} of "
                f"{fmt.duration(cov['period_s'])}: the rest is unknown.",
            }
        )
    for wc in s["writer_changes"]:
        if wc["interruption_ms"] is not None and wc["changed"]:
            tone = "good" if wc["interruption_ms"] < 864 else ("warn" if wc["interruption_ms"] < 5000 else "bad")
            points.append(
                {
                    "tone": tone,
                    "text": f"{wc['kind_label'].capitalize()} {wc['old']} → {wc['new']} at "
                    f"{fmt.clock(wc['start'])}: writes held for "
                    f"{fmt.duration(wc['interruption_ms'] / 1000)}.",
                }
            )
        elif not wc["changed"]:
            points.append(
                {
                    "tone": "warn",
                    "text": f"{wc['kind_label'].capitalize()} at {fmt.clock(wc['start'])} "
                    f"{wc['state_label']}: the writer did not change.",
                }
            )
    worst = [b for b in s["backends"] if b["availability"] is not None and b["availability"] < 100]
    for b in sorted(worst, key=lambda b: b["availability"])[:4]:
        d = b["durations"]
        lost = d[UNREACHABLE] + d[OUT]
        if lost < 1:
            continue
        detail = _join(
            [
                f"{fmt.duration(d[k])} {label}"
                for k, label in ((UNREACHABLE, "unreachable"), (OUT, "out of service"))
                if d[k] >= 1
            ]
        )
        explained = b["planned_s"] + b["rules_s"]
        if b["planned_s"] >= lost * 0.95 and b["maintenance_windows"]:
            m = b["maintenance_windows"][0]
            points.append(
                {
                    "tone": "good",
                    "text": f"Planned maintenance of {b['name']} ({fmt.clock(m[0])[:5]}–"
                    f"{fmt.clock(m[1])[:5]}): {detail}, drained first.",
                }
            )
        elif explained >= lost * 0.95 and b["rules_s"]:
            points.append(
                {
                    "tone": "good",
                    "text": f"The read-pool rules kept {b['name']} out of the read pool for "
                    f"{fmt.duration(b['rules_s'])} while it lagged behind.",
                }
            )
        else:
            points.append(
                {
                    "tone": "warn",
                    "text": f"Backend {b['name']}: {detail} ({fmt.percent(b['availability'])} "
                    f"available){', partly planned' if explained >= 1 else ''}.",
                }
            )
    desynced = [b for b in s["backends"] if b["durations"][DESYNCED] >= 1]
    if desynced:
        points.append(
            {
                "tone": "good",
                "text": "Desynced but serving: "
                + _join([f"{b['name']} {fmt.duration(b['durations'][DESYNCED])}" for b in desynced])
                + ".",
            }
        )
    rp = s["read_pool"]
    if rp["actions"]:
        points.append({"tone": "good", "text": f"Read-pool rules acted {fmt.count_word(len(rp['actions']), 'time')}."})
    if rp["dry_run_count"]:
        points.append(
            {
                "tone": "warn",
                "text": f"Read-pool rules in dry run would have acted {fmt.count_word(rp['dry_run_count'], 'time')}.",
            }
        )
    ce = s["conn_err"]
    if ce["total"] or ce["previous"]:
        tone = "good" if (ce["change_pct"] is not None and ce["change_pct"] < 0) or ce["total"] == 0 else "warn"
        points.append(
            {
                "tone": tone,
                "text": f"{ce['total']:,} connection errors (ConnERR), "
                f"{fmt.change_text(ce['total'], ce['previous'], 'count', before)}.",
            }
        )
    else:
        points.append({"tone": "good", "text": "No connection errors (ConnERR)."})
    mirror = s["mirror"]
    if mirror["count"]:
        points.append(
            {
                "tone": "bad",
                "text": f"Mirror queue saturated {fmt.count_word(mirror['count'], 'time')} "
                f"({fmt.duration(mirror['total_s'])}): mirrored queries were likely dropped.",
            }
        )
    for px in s["proxysql"]:
        if px["unreachable_s"] >= 1:
            points.append(
                {
                    "tone": "warn",
                    "text": f"ProxySQL {px['name']} unreachable for {fmt.duration(px['unreachable_s'])}"
                    + (f" ({fmt.count_word(len(px['stretches']), 'time')})" if len(px["stretches"]) > 1 else "")
                    + ".",
                }
            )
    drift = s["drift"]
    if drift["found"] or drift["fixed"]:
        tone = "good" if drift["fixed"] >= drift["found"] else "warn"
        points.append(
            {
                "tone": tone,
                "text": f"Configuration drift found {fmt.count_word(drift['found'], 'time')}, "
                f"fixed {fmt.count_word(drift['fixed'], 'time')}.",
            }
        )
    alert_point = alerts_report.summary_point(s["alerts"], fmt) if "alerts" in s else None
    if alert_point:  # (reports archived before alerts existed have no "alerts")
        points.append(alert_point)
    channel_point = dr_report.summary_point(s.get("dr_channels"), fmt)
    if channel_point:
        points.append(channel_point)
    dg = s["digests"]
    slower = [r for r in dg.get("regressions", []) if r["verdict"] == "slower"]
    if slower:
        r = slower[0]
        points.append(
            {
                "tone": "warn",
                "text": f"{fmt.count_word(len(slower), 'query', 'queries').capitalize()} got slower: "
                f"{_short_sql(r['text'])} (average {fmt.ms(r['prev_avg_ms'])} → {fmt.ms(r['avg_ms'])}).",
            }
        )
    rank = {"bad": 0, "warn": 1, "good": 2}
    points = points[:1] + sorted(points[1:], key=lambda p: rank[p["tone"]])
    return {"headline": headline, "points": points, "availability": avail}


def _short_sql(text: str | None, n: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"
