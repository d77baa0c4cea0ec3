"""The categories a report's timelines hold and the helpers every section shares (definitions: content.py)."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.monitoring import status

from .. import timeline as tl
from ..history import B, ClusterHistory
from ..timeline import Row, Timeline

SYNCED, DESYNCED, OUT, UNREACHABLE = "synced", "desynced", "out", "unreachable"
BACKEND_CATS = (SYNCED, DESYNCED, OUT, UNREACHABLE)
ALL, REDUCED, NONE = "all", "reduced", "none"
HOSTGROUP_CATS = (ALL, REDUCED, NONE)
UP, DOWN = "up", "down"
REACHABLE = "reachable"
ROLE_LABELS = {"writer": "writer", "reader": "reader", "backup_writer": "backup writer", "offline": "offline"}
SERVING_ROLES = ("writer", "reader")
MAX_STRETCHES = 30


@dataclass
class SectionContext:
    """What the functions of one cluster's section read (content.ClusterSection builds it, each section module's
    functions take it): the period [start, end) and the one before (epoch seconds), the history read once
    (history.load), the inventory, and what the build found on its way (found, windows, backend_states)."""

    cluster: Cluster
    start: float
    end: float
    prev_start: float
    prev_end: float
    bucket_s: int
    before_words: str
    hourly_only: bool  # a fleet report's first pass (history.load)
    h: ClusterHistory  # history.load(): the backends', pool's and ProxySQL nodes' history
    servers: dict[int, Server]
    by_endpoint: dict[tuple[str, int], int]  # {(host, port): server id}
    nodes: dict[int, ProxySQLNode]
    also_serves: dict[int, list[str]]  # {node id: the other clusters' names} for a ProxySQL serving several
    shared_with: list[str]
    roles: dict[int, str]  # {hostgroup: role}
    found: list[Any] = field(default_factory=list)  # the operations' measured windows (timelines.measured_windows)
    windows: dict[int, Any] = field(default_factory=dict)  # the period's operations per server (availability.windows)
    backend_states: dict[int, Timeline] = field(default_factory=dict)  # timelines.backend_timelines' states


class Point(TypedDict):
    """One point of a report's summary: good, warn or bad, and its words."""

    tone: str
    text: str


class Summary(TypedDict):
    headline: str
    points: list[Point]
    availability: float | None


Category = tuple[str, str]  # a timeline's value: (category, why)


class Stretch(TypedDict):
    """One stretch of a timeline as a report lists it (epoch seconds)."""

    start: float
    end: float
    seconds: float
    why: str


def _down(v: Category) -> bool:
    return v[0] == DOWN


def _held(v: Category) -> bool:
    """Down for want of a usable server: what an operation's measured window can explain."""
    return v[0] == DOWN and v[1].startswith("no usable")


def _none(v: Category) -> bool:
    return v[0] == NONE


def _truthy(v: object) -> bool:
    return v is not None and bool(v)


def _falsy(v: object) -> bool:
    return v is not None and not bool(v)


def backend_state(row: Row) -> Category:
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


def _stretch_list(
    timeline: Timeline,
    want: Callable[[Any], Any],
    reason_of: Callable[[Any], str | None] | None = None,
    join_gap: float = 0.0,
) -> list[Stretch]:
    out: list[Stretch] = []
    for a, b in tl.stretches(timeline, want, join_gap):
        reasons: list[str] = []
        if reason_of:
            for sa, sb, v in timeline:
                if sb > a and sa < b and want(v):
                    r = reason_of(v)
                    if r and r not in reasons:
                        reasons.append(r)
        out.append({"start": a, "end": b, "seconds": round(b - a, 3), "why": ", ".join(reasons)})
    return out


def _top_stretches(stretches: list[Stretch]) -> tuple[list[Stretch], int]:
    """Chronological, but the longest kept when there are too many to list."""
    if len(stretches) <= MAX_STRETCHES:
        return stretches, 0
    kept = sorted(sorted(stretches, key=lambda s: -s["seconds"])[:MAX_STRETCHES], key=lambda s: s["start"])
    return kept, len(stretches) - MAX_STRETCHES


def _avail(durations: Mapping[Any, float], good: Iterable[Any], observed: float) -> float | None:
    return round(100.0 * sum(durations.get(k, 0.0) for k in good) / observed, 6) if observed else None


def _json_timeline(timeline: Timeline, key: Callable[[Any], Any] = lambda v: v) -> list[list[Any]]:
    return [[round(a, 3), round(b, 3), v] for a, b, v in tl.mapped(timeline, key)]


def _sum_lists(lists: Sequence[Sequence[float | None]]) -> list[float | None]:
    if not lists:
        return []
    out: list[float | None] = []
    for values in zip(*lists):
        present = [v for v in values if v is not None]
        out.append(sum(present) if present else None)
    return out


def _round(v: float | None, digits: int = 1) -> float | None:
    if v is None or v in (float("inf"), float("-inf")):
        return v if v is None else None
    return round(v, digits)


def _rounded(values: Iterable[float | None], digits: int = 0) -> list[float | None]:
    return [None if v is None else round(v, digits) for v in values]


def _join(parts: Iterable[str | None]) -> str:
    said = [p for p in parts if p]
    if len(said) <= 1:
        return "".join(said)
    return ", ".join(said[:-1]) + " and " + said[-1]
