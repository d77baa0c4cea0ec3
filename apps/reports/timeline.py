"""Timelines: what a thing was, when. Pure functions, no I/O.

A timeline is a sorted list of non-overlapping [start, end, value] segments in epoch seconds; time not
covered by any segment is *no data* (the poller was down, the thing did not exist yet). Equal neighbours
are merged, so a day in which nothing happened is one segment whatever the number of polls.

Samples become segments by what they cover: a raw poll at ts holds until the next poll of the same thing,
but never longer than `max_gap` (past that the time is no data); a rollup row covers its whole bucket.
"""

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

# A segment [start, end, value]: a list, since append() moves the last one's end in place; the value is any
# category, tuple or number a section keeps (compared with ==).
Segment = list[Any]
Timeline = list[Segment]
# A history row (ts, resolution, figures...) as history.load() reads it, and the piece of time it covers.
Row = Sequence[Any]
Covered = tuple[float, float, Row]


def append(out: Timeline, a: float, b: float, value: Any) -> None:
    """Append [a, b, value] to a timeline being built in time order, merging with an equal neighbour."""
    if b <= a:
        return
    if out and out[-1][2] == value and abs(out[-1][1] - a) < 1e-9:
        out[-1][1] = b
    else:
        out.append([a, b, value])


def coverage(rows: Iterable[Row], pieces: Iterable[tuple[float, float, float]], max_gap: float) -> Iterator[Covered]:
    """Yield (a, b, row) for rows [(ts, resolution, ...)] of one thing sorted by ts, clipped to `pieces`
    [(resolution, from, to)]: the finest resolution available in each stretch of the period."""
    by_res: defaultdict[float, list[Row]] = defaultdict(list)
    for row in rows:
        by_res[row[1]].append(row)
    for resolution, lo, hi in pieces:
        mine: Sequence[Row] = by_res.get(resolution, ())
        for i, row in enumerate(mine):
            ts = row[0]
            if resolution == 0:
                if ts < lo or ts >= hi:
                    continue
                nxt = mine[i + 1][0] if i + 1 < len(mine) else None
                b = (
                    nxt
                    if nxt is not None and nxt - ts <= max_gap
                    else ts + min(max_gap, _own_interval(mine, i, max_gap))
                )
                a, b = ts, min(b, hi)
            else:
                a, b = max(ts, lo), min(ts + resolution, hi)
            if b > a:
                yield a, b, row


def _own_interval(rows: Sequence[Row], i: int, max_gap: float) -> float:
    """A last (or isolated) raw poll holds for the interval the poller kept before it, else max_gap / 3."""
    if i > 0 and rows[i][0] - rows[i - 1][0] <= max_gap:
        return rows[i][0] - rows[i - 1][0]
    return max_gap / 3


def from_coverage(segments: Iterable[Covered], value_of: Callable[[Row], Any]) -> Timeline:
    out: Timeline = []
    for a, b, row in segments:
        value = value_of(row)
        if value is not None:
            append(out, a, b, value)
    return out


def combine(fn: Callable[[list[Any]], Any], timelines: Sequence[Timeline]) -> Timeline:
    """One timeline from several: fn(values) -> value at each moment (values[i] is None where timeline i
    has no data; fn returning None means no data)."""
    points = sorted({p for tl in timelines for seg in tl for p in (seg[0], seg[1])})
    idx = [0] * len(timelines)
    out: Timeline = []
    for a, b in zip(points, points[1:]):
        values: list[Any] = []
        for i, tl in enumerate(timelines):
            j = idx[i]
            while j < len(tl) and tl[j][1] <= a:
                j += 1
            idx[i] = j
            values.append(tl[j][2] if j < len(tl) and tl[j][0] <= a else None)
        value = fn(values)
        if value is not None:
            append(out, a, b, value)
    return out


def mapped(timeline: Timeline, fn: Callable[[Any], Any]) -> Timeline:
    out: Timeline = []
    for a, b, v in timeline:
        value = fn(v)
        if value is not None:
            append(out, a, b, value)
    return out


def durations(timeline: Timeline, key: Callable[[Any], Hashable] = lambda v: v) -> dict[Hashable, float]:
    totals: defaultdict[Hashable, float] = defaultdict(float)
    for a, b, v in timeline:
        totals[key(v)] += b - a
    return dict(totals)


def covered(timeline: Timeline) -> float:
    return sum(b - a for a, b, _ in timeline)


def stretches(timeline: Timeline, want: Callable[[Any], Any], join_gap: float = 0.0) -> list[tuple[float, float]]:
    """[(a, b)] where want(value) holds; stretches separated by at most join_gap seconds are one."""
    out: list[list[float]] = []  # [a, b]: the last one's end moves
    for a, b, v in timeline:
        if not want(v):
            continue
        if out and a - out[-1][1] <= join_gap + 1e-9:
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def value_at(timeline: Timeline, t: float) -> Any:
    for a, b, v in timeline:
        if a <= t < b:
            return v
    return None


def bucketed(
    segments: Iterable[Covered],
    start: float,
    end: float,
    width: float,
    value_of: Callable[[Row], float | None],
    how: str = "sum",
) -> list[float | None]:
    """Per bucket of `width` seconds over [start, end): the time integral of value_of(row) ("sum"), its
    time-weighted mean ("mean") or its maximum ("max"), from (a, b, row) segments. None: no data."""
    n = max(1, int(-(-(end - start) // width)))
    acc, weight = [0.0] * n, [0.0] * n
    top: list[float | None] = [None] * n
    for a, b, row in segments:
        value = value_of(row)
        if value is None:
            continue
        i = int((a - start) // width)
        while a < b and 0 <= i < n:
            edge = min(b, start + (i + 1) * width)
            span = edge - a
            acc[i] += value * span
            weight[i] += span
            held = top[i]
            top[i] = value if held is None else max(held, value)
            a, i = edge, i + 1
    if how == "max":
        return top
    if how == "mean":
        return [acc[i] / weight[i] if weight[i] else None for i in range(n)]
    return [acc[i] if weight[i] else None for i in range(n)]
