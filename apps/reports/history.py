"""Monitoring history for one cluster and period, at the finest resolution still kept for each stretch.

Raw polls are kept a day, one-minute rollups two weeks, hourly rollups a year (settings MONITOR_RETENTION_*),
and rollups lag the polls a little. So a period is read in up to three pieces: hourly rows where nothing
finer is left, then one-minute rows, then raw polls from the first one kept (pieces()). A rollup row
keeps the worst of its bucket (unreachable, lowest wsrep state, biggest queue) and the average of rates:
a stretch read from rollups is counted bucket by bucket, so a 2-second blip read from an hourly rollup
counts as the whole hour (the report names the resolutions it used).
"""

from dataclasses import dataclass, field
from datetime import datetime, timezone


from apps.monitoring import status
from apps.monitoring.chunks import samples as chunked_samples
from apps.monitoring.models import HOUR, MINUTE, RAW, BackendSample, PoolSnapshot, ProxySQLSample
from apps.monitoring.chunks import read_pool

from . import timeline as tl

RESOLUTION_NAMES = {RAW: "raw polls", MINUTE: "1-minute rollups", HOUR: "1-hour rollups"}


def epoch(dt):
    return dt.timestamp()


def as_dt(ts):
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def pieces_of(rows, start, end):
    """[(resolution, from, to)] (epoch seconds) covering [start, end) for one thing's rows [(ts, resolution, ...)]:
    raw polls from the first one kept, minute rollups before that, hourly rollups before those."""
    first = {}
    for row in rows:
        ts, resolution = row[0], row[1]
        if ts >= start - resolution and resolution not in first:
            first[resolution] = max(ts, start)
    out, hi = [], end
    for resolution in (RAW, MINUTE):
        lo = first.get(resolution)
        if lo is not None and lo < hi:
            out.append((resolution, lo, hi))
            hi = lo
    if hi > start:
        out.append((HOUR, start, hi))
    return sorted(out, key=lambda p: p[1])


def _load(model, filters, fields, start, end, max_gap, used):
    """{key: [(a, b, row)]}: every resolution is read (rollup rows are few beside raw polls) and each thing's
    own pieces pick the finest per stretch, so a thing whose raw polls are missing still counts."""
    span = {**filters, "ts__gte": as_dt(start - HOUR), "ts__lt": as_dt(end)}
    grouped = {}
    if model is PoolSnapshot:  # packed: one row per server of each snapshot, keyed (node id, hostgroup, host, port)
        for node_id, ts, resolution, server, values in read_pool(span, fields):
            grouped.setdefault((node_id, *server), []).append((ts.timestamp(), resolution, *values))
    else:  # rows and history chunks alike (apps/monitoring/chunks.py), keyed by the owner
        for owner_id, ts, *row in chunked_samples(span, fields, model):
            grouped.setdefault(owner_id, []).append((ts.timestamp(), *row))
    out = {}
    for k, rows in grouped.items():
        ps = pieces_of(rows, start, end)
        for resolution, lo, hi in ps:
            used.setdefault(("spans", resolution), []).append((lo, hi))
        out[k] = list(tl.coverage(rows, ps, max_gap))
    return out


@dataclass
class ClusterHistory:
    """Segments (a, b, row) per thing, for one cluster and period."""

    start: float
    end: float
    interval: float
    backend_pieces: list = field(default_factory=list)
    pool_pieces: list = field(default_factory=list)
    backends: dict = field(default_factory=dict)  # server id -> [(a, b, row)]
    proxysql: dict = field(default_factory=dict)  # node id -> [(a, b, row)]
    pool: dict = field(default_factory=dict)  # (node id, hostgroup, host, port) -> [(a, b, row)]

    @property
    def max_gap(self):
        return status.stale_after(self.interval)


BACKEND_FIELDS = ("reachable", "local_state", "primary", "ready", "recv_queue")
PROXYSQL_FIELDS = (
    "reachable",
    "questions_ps",
    "conn_err_ps",
    "mirror_queue_length",
    "mirror_max_queue_length",
    "mysql_threads",
    "mirror_concurrency",
    "mirror_max_concurrency",
    "prepared_ps",
)
POOL_FIELDS = ("status", "conn_err_ps")
# indexes into a row: (ts, resolution, *fields)
B = {f: i + 2 for i, f in enumerate(BACKEND_FIELDS)}
P = {f: i + 2 for i, f in enumerate(PROXYSQL_FIELDS)}
L = {f: i + 2 for i, f in enumerate(POOL_FIELDS)}


def load(cluster, start, end, hourly_only=False):
    """Read the cluster's history over [start, end) (epoch seconds). hourly_only: the 1-hour rollups alone
    (a fleet report's first pass over every cluster: a 60th of the rows; an hour with any trouble in it
    counts whole, so a cluster can only look worse than it was, never better)."""
    interval = status.proxysql_interval(cluster)
    h = ClusterHistory(start=start, end=end, interval=interval)
    only = {"resolution": HOUR} if hourly_only else {}
    bf = {"server_id__in": list(cluster.servers.values_list("pk", flat=True)), **only}
    nf = {"node_id__in": list(cluster.proxysql_nodes.values_list("pk", flat=True)), **only}
    used = {}
    h.backends = _load(BackendSample, bf, BACKEND_FIELDS, start, end, h.max_gap, used)
    h.backend_pieces = _spans(used)
    h.proxysql = _load(ProxySQLSample, nf, PROXYSQL_FIELDS, start, end, h.max_gap, {})
    used = {}
    h.pool = _load(PoolSnapshot, nf, POOL_FIELDS, start, end, h.max_gap, used)
    h.pool_pieces = _spans(used)
    return h


def _spans(used):
    """[(resolution, from, to)]: for each resolution the widest stretch any thing was read from it."""
    out = []
    for key, spans in used.items():
        if isinstance(key, tuple):
            out.append((key[1], min(a for a, _ in spans), max(b for _, b in spans)))
    return out


def resolution_at(t, *piece_lists):
    """The coarsest resolution any thing was read from at time t (0: raw polls only)."""
    return max((resolution for ps in piece_lists for resolution, lo, hi in ps if lo <= t < hi), default=RAW)


def resolutions_used(*piece_lists):
    used = {}
    for ps in piece_lists:
        for resolution, lo, hi in ps:
            used[resolution] = used.get(resolution, 0) + (hi - lo)
    return used


def load_proxysql_only(cluster, start, end, hourly_only=False):
    """{node id: [(a, b, row)]} of the ProxySQL samples alone (the period before, for trends)."""
    interval = status.proxysql_interval(cluster)
    nf = {"node_id__in": list(cluster.proxysql_nodes.values_list("pk", flat=True))}
    if hourly_only:
        nf["resolution"] = HOUR
    return _load(ProxySQLSample, nf, PROXYSQL_FIELDS, start, end, status.stale_after(interval), {})
