"""The categories a report's timelines hold and the helpers every section shares (definitions: content.py)."""
from apps.monitoring import status

from .. import timeline as tl
from ..history import B

SYNCED, DESYNCED, OUT, UNREACHABLE = "synced", "desynced", "out", "unreachable"
BACKEND_CATS = (SYNCED, DESYNCED, OUT, UNREACHABLE)
ALL, REDUCED, NONE = "all", "reduced", "none"
HOSTGROUP_CATS = (ALL, REDUCED, NONE)
UP, DOWN = "up", "down"
REACHABLE = "reachable"
ROLE_LABELS = {"writer": "writer", "reader": "reader", "backup_writer": "backup writer", "offline": "offline"}
SERVING_ROLES = ("writer", "reader")
MAX_STRETCHES = 30


def _down(v):
    return v[0] == DOWN


def _held(v):
    """Down for want of a usable server: what an operation's measured window can explain."""
    return v[0] == DOWN and v[1].startswith("no usable")


def _none(v):
    return v[0] == NONE


def _truthy(v):
    return v is not None and bool(v)


def _falsy(v):
    return v is not None and not bool(v)


def backend_state(row):
    """(category, why) of one backend sample row."""
    if not _truthy(row[B["reachable"]]):
        return (UNREACHABLE, "the poll failed")
    if _falsy(row[B["primary"]]):
        return (OUT, "not in the Primary component")
    local = row[B["local_state"]]
    if local is not None and local not in (2, 4):
        return (OUT, status.WSREP_STATES.get(local, f"wsrep state {local}"))
    if _falsy(row[B["ready"]]):
        return (OUT, "wsrep_ready OFF")
    if local == 2:
        return (DESYNCED, "Donor/Desynced")
    return (SYNCED, "")


def _stretch_list(timeline, want, reason_of=None, join_gap=0.0):
    out = []
    for a, b in tl.stretches(timeline, want, join_gap):
        reasons = []
        if reason_of:
            for sa, sb, v in timeline:
                if sb > a and sa < b and want(v):
                    r = reason_of(v)
                    if r and r not in reasons:
                        reasons.append(r)
        out.append({"start": a, "end": b, "seconds": round(b - a, 3), "why": ", ".join(reasons)})
    return out


def _top_stretches(stretches):
    """Chronological, but the longest kept when there are too many to list."""
    if len(stretches) <= MAX_STRETCHES:
        return stretches, 0
    kept = sorted(sorted(stretches, key=lambda s: -s["seconds"])[:MAX_STRETCHES], key=lambda s: s["start"])
    return kept, len(stretches) - MAX_STRETCHES


def _avail(durations, good, observed):
    return round(100.0 * sum(durations.get(k, 0.0) for k in good) / observed, 6) if observed else None


def _json_timeline(timeline, key=lambda v: v):
    return [[round(a, 3), round(b, 3), v] for a, b, v in tl.mapped(timeline, key)]


def _sum_lists(lists):
    if not lists:
        return []
    out = []
    for values in zip(*lists):
        present = [v for v in values if v is not None]
        out.append(sum(present) if present else None)
    return out


def _round(v, digits=1):
    if v is None or v in (float("inf"), float("-inf")):
        return v if v is None else None
    return round(v, digits)


def _rounded(values, digits=0):
    return [None if v is None else round(v, digits) for v in values]


def _join(parts):
    parts = [p for p in parts if p]
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]
