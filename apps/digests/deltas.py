"""Deltas of cumulative digest counters between two polls of one node (pure: no I/O).

The baseline is the previous poll's rows, as kept in Redis: field "hostgroup TAB schema TAB user TAB
client TAB digest" -> value "count sum_time min_time max_time first_seen rows_sent rows_affected" (bytes,
as Redis returns them). An unchanged row has a byte-identical value and costs no parsing. A baseline
written before the rows were read (five numbers) gives that interval no rows delta (NULL), the rest as usual.

Per row, against its baseline:
- same value: nothing ran; no delta.
- absent from the baseline (first seen since the previous poll, or back after a reset): its counters
  all belong to this interval, extremes included.
- count or sum_time went down, or first_seen changed: the counters were reset (a read of
  stats_mysql_query_digest_reset by someone, a ProxySQL restart). The interval's delta is what was
  counted since the reset (what ran between the previous poll and the reset is lost, never negative or
  doubled).
- otherwise the difference; max_time / min_time only where derivable: ProxySQL's cumulative max rose
  (the new max ran in this interval), its min fell, or exactly one execution (its time is the delta).
Rows that disappeared are dropped from the baseline. Without a baseline (first poll of a node, Redis
emptied, a baseline the database does not confirm) there is no delta, only a new baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # why: the row's type only; nothing of the client runs here
    from apps.clients.proxysql import DigestRow


@dataclass(frozen=True, slots=True)
class Delta:
    hostgroup: int
    schemaname: str
    username: str
    client_address: str
    digest: str
    count_star: int
    sum_time: int
    min_time: int | None
    max_time: int | None
    rows_sent: int | None = None
    rows_affected: int | None = None


@dataclass
class Outcome:
    deltas: list[Delta]
    changed: dict[bytes, bytes]  # baseline fields to (re)write: field -> value
    removed: list[bytes]  # baseline fields to delete
    resets: int
    full: bool  # True: rewrite the whole baseline (there was none)


def field_and_value(row: DigestRow) -> tuple[bytes, bytes]:
    field = f"{row.hostgroup}\t{row.schemaname}\t{row.username}\t{row.client_address}\t{row.digest}".encode()
    value = (
        f"{row.count_star} {row.sum_time} {row.min_time} {row.max_time} {row.first_seen}"
        f" {row.sum_rows_sent} {row.sum_rows_affected}"
    ).encode()
    return field, value


def _whole(row: DigestRow) -> Delta:
    return Delta(
        row.hostgroup,
        row.schemaname,
        row.username,
        row.client_address,
        row.digest,
        row.count_star,
        row.sum_time,
        row.min_time,
        row.max_time,
        row.sum_rows_sent,
        row.sum_rows_affected,
    )


def compute(rows: Iterable[DigestRow], baseline: Mapping[bytes, bytes] | None) -> Outcome:
    """rows: DigestRow list of this poll; baseline: {field: value} of the previous poll, or None."""
    encoded = [(row, *field_and_value(row)) for row in rows]
    if baseline is None:
        return Outcome([], {f: v for _, f, v in encoded}, [], 0, True)
    deltas: list[Delta] = []
    changed: dict[bytes, bytes] = {}
    resets = 0
    for row, field, value in encoded:
        old = baseline.get(field)
        if old == value:
            continue
        changed[field] = value
        if old is None:
            if row.count_star > 0:
                deltas.append(_whole(row))
            continue
        try:
            count0, sum0, min0, max0, first0, *rows0 = (int(x) for x in old.split())
        except ValueError:  # a baseline we cannot read is no baseline for this row
            continue
        if row.count_star < count0 or row.sum_time < sum0 or row.first_seen != first0:
            resets += 1
            if row.count_star > 0:
                deltas.append(_whole(row))
            continue
        dc = row.count_star - count0
        if dc == 0:
            continue
        ds = row.sum_time - sum0
        single = ds if dc == 1 else None
        max_time = row.max_time if row.max_time > max0 else single
        min_time = row.min_time if row.min_time < min0 else single
        sent, affected = (
            (row.sum_rows_sent - rows0[0], row.sum_rows_affected - rows0[1]) if len(rows0) == 2 else (None, None)
        )
        deltas.append(
            Delta(
                row.hostgroup,
                row.schemaname,
                row.username,
                row.client_address,
                row.digest,
                dc,
                ds,
                min_time,
                max_time,
                sent,
                affected,
            )
        )
    seen = {field for _, field, _ in encoded}
    removed = [field for field in baseline if field not in seen]
    return Outcome(deltas, changed, removed, resets, False)
