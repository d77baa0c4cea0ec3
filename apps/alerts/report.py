"""The alerts part of a health report: how many alerts fired (by severity), how long they took to resolve,
the noisiest rules, and those held during planned work and cleared before it ended. JSON-ready data; two
small queries on the alert table's (cluster, since) index."""

from collections import Counter, defaultdict
from datetime import datetime, timezone
from statistics import median

from .catalogue import BY_KEY
from .models import Alert

LISTED = 20
NOISIEST = 5


def _dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def section(cluster_id, start, end):
    """Alerts of one cluster (None: the fleet) that began in [start, end)."""
    qs = Alert.objects.filter(since__gte=_dt(start), since__lt=_dt(end))
    if cluster_id is not None:
        qs = qs.filter(cluster_id=cluster_id)
    rows = list(
        qs.values(
            "id",
            "rule",
            "severity",
            "subject_label",
            "since",
            "fired_at",
            "resolved_at",
            "notified",
            "was_held",
            "state",
            "summary",
            "cluster__name",
        )
    )
    fired = [r for r in rows if r["fired_at"]]
    held_only = [r for r in rows if r["was_held"] and not r["fired_at"]]
    to_resolve = [(r["resolved_at"] - r["fired_at"]).total_seconds() for r in fired if r["resolved_at"]]
    per_rule = defaultdict(lambda: {"count": 0, "firing_s": 0.0})
    for r in fired:
        until = r["resolved_at"].timestamp() if r["resolved_at"] else end
        per_rule[r["rule"]]["count"] += 1
        per_rule[r["rule"]]["firing_s"] += max(0.0, min(until, end) - r["fired_at"].timestamp())
    noisiest = sorted(
        ({"rule": k, "title": BY_KEY[k].title if k in BY_KEY else k, **v} for k, v in per_rule.items()),
        key=lambda x: (-x["count"], -x["firing_s"]),
    )[:NOISIEST]
    listed = sorted(fired + held_only, key=lambda r: r["since"])[:LISTED]
    return {
        "fired": len(fired),
        "by_severity": dict(Counter(r["severity"] for r in fired)),
        "notified": sum(1 for r in fired if r["notified"]),
        "held_cleared": len(held_only),
        "released": sum(1 for r in fired if r["was_held"]),
        "still_firing": sum(1 for r in fired if not r["resolved_at"]),
        "resolve_median_s": round(median(to_resolve), 1) if to_resolve else None,
        "resolve_max_s": round(max(to_resolve), 1) if to_resolve else None,
        "noisiest": noisiest,
        "alerts": [
            {
                "id": r["id"],
                "url": f"/alerts/{r['id']}/",
                "title": BY_KEY[r["rule"]].title if r["rule"] in BY_KEY else r["rule"],
                "severity": r["severity"],
                "subject": r["subject_label"],
                "cluster": r["cluster__name"],
                "since": r["since"].timestamp(),
                "fired": r["fired_at"].timestamp() if r["fired_at"] else None,
                "resolved": r["resolved_at"].timestamp() if r["resolved_at"] else None,
                "held": r["was_held"],
                "notified": r["notified"],
                "summary": r["summary"][:300],
            }
            for r in listed
        ],
        "more": max(0, len(fired) + len(held_only) - LISTED),
    }


def summary_point(a, fmt):
    """One line for a report's summary (fmt: apps.reports.fmt), or None when no alert began."""
    if not a["fired"] and not a["held_cleared"]:
        return None
    parts = []
    if a["fired"]:
        sev = ", ".join(f"{n} {s}" for s, n in sorted(a["by_severity"].items(), key=lambda kv: kv[0]))
        text = f"{fmt.count_word(a['fired'], 'alert')} fired ({sev})"
        if a["resolve_median_s"] is not None:
            text += f", resolved after {fmt.duration(a['resolve_median_s'])} (median; longest {fmt.duration(a['resolve_max_s'])})"
        if a["noisiest"]:
            text += (
                f"; noisiest rule: {a['noisiest'][0]['title']} ({fmt.count_word(a['noisiest'][0]['count'], 'time')})"
            )
        parts.append(text)
    if a["held_cleared"]:
        parts.append(
            f"{fmt.count_word(a['held_cleared'], 'alert')} held during planned work and cleared before it "
            f"ended (nobody paged)"
        )
    tone = "bad" if a["by_severity"].get("critical") else ("warn" if a["fired"] else "good")
    return {"tone": tone, "text": "; ".join(parts) + "."}
