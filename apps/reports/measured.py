"""Interruptions measured by the operations themselves, in place of what the polls sampled.

A poll that saw the writer hostgroup empty stands for the time until the next poll: during a switchover
whose writes were held 59 ms, one poll that caught the drain counted a whole poll interval (2 s) of "no
usable ONLINE writer". Where a sampled interruption lies inside an operation's measured window (its steps'
clocks), the window replaces it:
- planned switchover: the old writer OFFLINE_SOFT (drain step start) to the new writer ONLINE (move step
  end); a switchover that rolled back or failed, the drain to the end of the operation;
- automatic failover: the first failed poll of the old writer (sampled: nobody saw the crash itself) to the
  new writer ONLINE (move step end);
- any other operation (maintenance drain, restore, read-pool action, repair): its start to its end.

"Inside" means: the first poll that saw it was taken within the window (a rollup bucket: the bucket holding
the window's start), and the next poll saw the service back, at most one sample (a poll interval, or the
bucket) after the window's end. A longer stretch (the writer stayed out after the operation: a maintenance
drain of the only writer, say) stays as sampled: the operation does not explain it. Pure: no I/O.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from apps.operations.choices import OperationKind, OperationState
from apps.operations.models import Operation, OperationStep

from . import timeline as tl
from .timeline import Timeline

SLACK_S = 1.0  # a poll's figures are read a little after its round's timestamp
HOLD = "old writer OFFLINE_SOFT (drain step start) to new writer ONLINE (move step end)"


@dataclass(frozen=True)
class Window:
    op_id: int
    url: str
    label: str
    start: float | None  # None: the sampled start stands (a failover)
    end: float
    how: str
    earliest: float  # a sampled stretch this operation explains starts no earlier

    def describe(self) -> dict[str, Any]:
        return {"id": self.op_id, "url": self.url, "label": self.label, "how": self.how}


def switchover_window(
    op: Operation, steps: Mapping[str, OperationStep]
) -> tuple[float, float, str] | tuple[None, None, str]:
    """(start, end, how) of a planned switchover's writer hold on its steps' clocks, or (None, None, why)."""
    drain, move = steps.get("drain"), steps.get("move")
    if drain and drain.started_at and move and move.finished_at and move.state == OperationState.DONE:
        return drain.started_at.timestamp(), move.finished_at.timestamp(), HOLD
    if drain and drain.started_at and op.finished_at:
        return (
            drain.started_at.timestamp(),
            op.finished_at.timestamp(),
            f"{op.get_state_display()}: from the drain to the end of the rollback",
        )
    return None, None, "not measured (the operation did not reach the drain)"


def windows(ops: Iterable[Operation], failover_after_polls: int, interval: float) -> list[Window]:
    """[Window] of finished operations (steps prefetched)."""
    out: list[Window] = []
    for op in ops:
        if op.started_at is None or op.finished_at is None or op.state not in OperationState.finished():
            continue
        steps = {s.key: s for s in op.steps.all()}
        label = f"{op.get_kind_display()} #{op.pk}"
        if op.kind == OperationKind.SWITCHOVER:
            a, b, how = switchover_window(op, steps)
            if a is None or b is None:  # both or neither: b named for mypy
                continue
            out.append(Window(op.pk, op.get_absolute_url(), label, a, b, how, a))
        elif op.kind == OperationKind.FAILOVER:
            move = steps.get("move")
            end = (move.finished_at if move and move.finished_at else op.finished_at).timestamp()
            began = op.started_at.timestamp()
            out.append(
                Window(
                    op.pk,
                    op.get_absolute_url(),
                    label,
                    None,
                    end,
                    "first failed poll of the old writer (sampled) to the new writer ONLINE (move step end)",
                    began - (failover_after_polls + 1) * interval,
                )
            )
        else:
            a, b = op.started_at.timestamp(), op.finished_at.timestamp()
            out.append(Window(op.pk, op.get_absolute_url(), label, a, b, "operation start to end", a))
    return out


def paint(timeline: Timeline, a: float, b: float, value: Any) -> Timeline:
    """The timeline with [a, b) set to value (None: no data there)."""
    pieces: list[tuple[float, float, Any]] = []
    for sa, sb, v in timeline:
        if sa < a:
            pieces.append((sa, min(sb, a), v))
        if sb > b:
            pieces.append((max(sa, b), sb, v))
    if value is not None:
        pieces.append((a, b, value))
    out: Timeline = []
    for sa, sb, v in sorted((p for p in pieces if p[1] > p[0]), key=lambda p: p[0]):
        tl.append(out, sa, sb, v)
    return out


def apply(
    timeline: Timeline,
    is_bad: Callable[[Any], Any],
    found: Iterable[Window],
    sample_s: Callable[[float], tuple[float, bool]],
    period: tuple[float, float],
) -> Timeline:
    """The timeline with each bad stretch that an operation's window explains replaced by that window.
    Replaced segments carry the operation's id as a third element of their value. `sample_s(t)`: how long
    one sample at time t stands for at most, and whether it is a rollup bucket: (seconds, is_bucket)."""
    start, end = period
    for a, b in tl.stretches(timeline, is_bad):
        seconds, bucket = sample_s(a)
        for w in found:
            first = w.start if w.start is not None else a
            earliest = w.earliest - (seconds if bucket else 0) - SLACK_S
            if not (earliest <= a <= w.end + SLACK_S and b <= w.end + seconds + SLACK_S):
                continue
            bad = tl.value_at(timeline, a)
            timeline = paint(timeline, a, b, tl.value_at(timeline, b) or _before(timeline, a))
            lo, hi = max(start, first), min(end, w.end)
            if hi > lo:
                timeline = paint(timeline, lo, hi, (*bad[:2], w.op_id))
            break
    return timeline


def _before(timeline: Timeline, t: float) -> Any:
    previous = None
    for sa, sb, v in timeline:
        if sb <= t + 1e-9:
            previous = v
    return previous


def split(segments: Timeline, a: float, b: float) -> tuple[float, float, list[int]]:
    """(measured seconds, sampled seconds, [operation ids]) of the bad segments within [a, b)."""
    measured = sampled = 0.0
    ops: list[int] = []
    for sa, sb, v in segments:
        lo, hi = max(a, sa), min(b, sb)
        if hi <= lo:
            continue
        if len(v) > 2:
            measured += hi - lo
            if v[2] not in ops:
                ops.append(v[2])
        else:
            sampled += hi - lo
    return measured, sampled, ops
