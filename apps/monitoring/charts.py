"""Chart data: one JSON document per chart, drawn by static/js/charts.js (djangoproject.com dashboard style).

The resolution follows the range: raw samples up to 6 h, 1-minute rollups up to 7 days, 1-hour rollups
beyond. Rollups are written by a scheduled task, so the newest part of a window may not be rolled up yet:
it is taken from the next finer resolution and bucketed here the same way (averages, queue figures by
their maximum, wsrep state by its worst value), so a chart never ends early. A window with more points
than MAX_POINTS is bucketed further (same aggregates) to keep the answer small.

Gaps: a poll that did not reach the node (reachable=False), a rollup bucket without figures (no poll in
it succeeded) and a hole in the timeline longer than expected all become null points; the browser draws
with spanGaps off, so a line never crosses missing data.

Format: {"t": [epoch ms...], "series": [{"label", "values": [...same length, null = gap], "style"}],
"start", "end" (ms), "range", "resolution" (0/60/3600), "bucket" (s), "unit", "title"}.
"""

import math
import time
from collections import defaultdict
from datetime import datetime, timezone

from django.conf import settings

from . import status
from .models import HOUR, MINUTE, RAW, BackendSample, MirrorRuleSample, PoolSnapshot, ProxySQLSample, worst_status
from .chunks import FAMILIES as CHUNKED
from .chunks import samples as chunked_samples
from .chunks import read_pool

RANGES = {"1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 86400, "30d": 30 * 86400}
DEFAULT_RANGE = "1h"
# A resolution may be asked for (the API): "auto" is the one the range picks.
RESOLUTIONS = {"auto": None, "raw": RAW, "1m": MINUTE, "1h": HOUR}
MAX_POINTS = 2000  # 1 h of raw polls at the default 2 s interval is 1,800
GAP_FACTOR_RAW = status.STALE_FACTOR  # raw: a hole longer than 3 poll intervals is a gap
GAP_FACTOR_BUCKET = 1.5  # bucketed: one missing bucket is a gap
FINER = {MINUTE: RAW, HOUR: MINUTE}
WSREP_TICKS = {"1": "Joining", "2": "Donor/Desynced", "3": "Joined", "4": "Synced"}


class UnknownChart(Exception):
    pass


def resolution_for(seconds):
    if seconds <= 6 * 3600:
        return RAW
    if seconds <= 7 * 86400:
        return MINUTE
    return HOUR


def _dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _agg(values, how):
    values = [v for v in values if v is not None]
    if not values:
        return None
    if how == "worst":  # a pool row's status
        return worst_status(values)
    if how == "max":
        return max(values)
    if how == "min":
        return min(values)
    return sum(values) / len(values)


class Frame:
    """Samples of one table for one owner: {ts: reachable} and {(group, field): {ts: value}}, where ts is
    a sample's epoch second (raw) or a bucket's start."""

    def __init__(self):
        self.reachable = {}
        self.values = defaultdict(dict)

    def groups(self):
        return sorted({g for g, _ in self.values})


def _column(model, field, resolution):
    """A bucket's extreme (`<figure>_min` / `_max`) is the figure itself in a raw row."""
    base = field[:-4]
    if resolution == RAW and field[-4:] in ("_min", "_max") and base in model.EXTREMES:
        return base
    return field


def _rows(model, owner, fields, group, resolution, start, end, with_reachable):
    if model is PoolSnapshot:  # packed: one row per server of each snapshot, grouped by its pool key
        for _, ts, _, key, values in read_pool(
            {**owner, "resolution": resolution, "ts__gte": _dt(start), "ts__lt": _dt(end)}, fields
        ):
            yield ts.timestamp(), True, key, values
        return
    cols = (
        ["ts"]
        + (["reachable"] if with_reachable else [])
        + list(group)
        + [_column(model, f, resolution) for f in fields]
    )
    where = {**owner, "resolution": resolution, "ts__gte": _dt(start), "ts__lt": _dt(end)}
    if model in CHUNKED:  # rows and history chunks alike
        found = (row[1:2] + row[3:] for row in chunked_samples(where, cols[1:], model))
    else:
        found = model.objects.filter(**where).order_by("ts").values_list(*cols)
    n_fixed = 1 + bool(with_reachable)
    # A rollup row is marked unreachable when any poll of its bucket failed; its figures are the
    # averages of the polls that succeeded, so only a bucket without figures is a gap.
    honour = with_reachable and resolution == RAW
    for row in found:
        yield (
            row[0].timestamp(),
            row[1] if honour else True,
            tuple(row[n_fixed : n_fixed + len(group)]),
            row[n_fixed + len(group) :],
        )


def load(model, owner, fields, aggs, group, resolution, start, end, bucket, with_reachable):
    """A Frame of `fields` at `resolution`, bucketed to `bucket` seconds when bucket is set. The tail
    that the rollups have not reached yet is read from the finer resolution."""
    rows = list(_rows(model, owner, fields, group, resolution, start, end, with_reachable))
    if resolution in FINER:
        tail_from = rows[-1][0] + resolution if rows else start
        rows += _rows(model, owner, fields, group, FINER[resolution], tail_from, end, with_reachable)
        bucket = bucket or resolution
    frame = Frame()
    if not bucket:
        for ts, reachable, g, values in rows:
            frame.reachable[ts] = frame.reachable.get(ts, False) or bool(reachable)
            if reachable:
                for f, v in zip(fields, values):
                    frame.values[(g, f)][ts] = v
        return frame
    collected = defaultdict(lambda: defaultdict(list))
    for ts, reachable, g, values in rows:
        b = ts // bucket * bucket  # epoch-aligned, like the rollups' buckets
        frame.reachable[b] = frame.reachable.get(b, False) or bool(reachable)
        if reachable:
            for f, v in zip(fields, values):
                collected[(g, f)][b].append(v)
    for (g, f), per_bucket in collected.items():
        how = aggs.get(f) or {"_min": "min", "_max": "max"}.get(f[-4:], "avg")
        frame.values[(g, f)] = {b: _agg(vs, how) for b, vs in per_bucket.items()}
    return frame


def _round(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return int(v)
    return float(f"{v:.4g}")


class Window:
    def __init__(self, range_key, interval, now=None, resolution=None):
        if range_key not in RANGES:
            range_key = DEFAULT_RANGE
        self.range = range_key
        self.end = now or time.time()
        self.start = self.end - RANGES[range_key]
        self.asked = resolution
        self.resolution = resolution_for(RANGES[range_key]) if resolution is None else resolution
        self.interval = status.interval_of(interval)
        step = self.resolution or self.interval
        # Bucket only when the window would hold more than MAX_POINTS steps.
        n = RANGES[range_key] / step
        self.bucket = (math.ceil(n / MAX_POINTS) * step) if n > MAX_POINTS else (self.resolution or None)

    def load(self, model, owner, fields, aggs=None, group=(), with_reachable=False):
        return load(
            model, owner, fields, aggs or {}, group, self.resolution, self.start, self.end, self.bucket, with_reachable
        )

    @property
    def gap_after(self):
        return self.bucket * GAP_FACTOR_BUCKET if self.bucket else self.interval * GAP_FACTOR_RAW


def assemble(window, base, series, *, title, unit="", extra=None):
    """Align series on one timeline and insert gaps. `base`: the Frame whose `reachable` says when polls
    happened; `series`: [(label, {ts: value}, style)]."""
    stamps = set(base.reachable)
    for _, values, _ in series:
        stamps.update(values)
    timeline = []
    previous = None
    for ts in sorted(stamps):
        if previous is not None and ts - previous > window.gap_after:
            timeline.append(((previous + ts) / 2, False))  # a hole: nobody polled here
        timeline.append((ts, base.reachable.get(ts, True)))
        previous = ts
    out = {
        "title": title,
        "unit": unit,
        "range": window.range,
        "resolution": window.resolution,
        "bucket": window.bucket or 0,
        "start": int(window.start * 1000),
        "end": int(window.end * 1000),
        "t": [int(ts * 1000) for ts, _ in timeline],
        "series": [
            {"label": label, "style": style, "values": [_round(values.get(ts)) if ok else None for ts, ok in timeline]}
            for label, values, style in series
        ],
    }
    out.update(extra or {})
    return out


# -- ProxySQL node charts --------------------------------------------------------------------------
POOL_GROUP = ("hostgroup", "srv_host", "srv_port")
PROXYSQL_AGGS = {
    "mirror_queue_length": "max",
    "mirror_max_concurrency": "max",
    "mirror_max_queue_length": "max",
    "mysql_threads": "max",
}


def _pool_label(group):
    return f"hg {group[0]} · {group[1]}:{group[2]}"


def _shared(node):
    """(" · node-wide" or "", extra): on a ProxySQL that serves several clusters, the figures of the whole
    ProxySQL (global status, mirror) are every cluster's at once, and the chart says so; the pool's series are
    this cluster's hostgroups only (the poller scopes them)."""
    others = [n.cluster.name for n in node.shares_with()]
    if not others:
        return "", {}
    return " · node-wide", {
        "shared_with": others,
        "node_wide_note": f"node-wide: shared with cluster {', '.join(others)}",
    }


def _node_base(window, node, fields=()):
    return window.load(ProxySQLSample, {"node_id": node.pk}, fields, PROXYSQL_AGGS, with_reachable=True)


def chart_queries(window, node):
    base = _node_base(window, node, ["questions_ps", "prepared_ps", "slow_queries_ps"])
    pool = window.load(PoolSnapshot, {"node_id": node.pk}, ["queries_ps"], group=POOL_GROUP)
    wide, extra = _shared(node)
    series = [
        (f"Questions/s (all){wide}", base.values[((), "questions_ps")], "main"),
        (f"prepared statements/s{wide}", base.values[((), "prepared_ps")], "dashed"),
        (f"slow queries/s{wide}", base.values[((), "slow_queries_ps")], "dotted"),
    ]
    series += [(_pool_label(g), pool.values[(g, "queries_ps")], "line") for g in pool.groups()]
    return assemble(window, base, series, title="Queries per second", unit="q/s", extra=extra)


def chart_connections(window, node):
    """Used and free per hostgroup (its role named), summed over its servers: a few readable series, not two
    per server; where a point stands for a bucket of polls, also the most one server of the hostgroup used in
    it (a one-poll spike). `status`: each server's worst status in each point (a SHUNNED blip)."""
    base = _node_base(window, node)
    pool = window.load(
        PoolSnapshot,
        {"node_id": node.pk},
        ["conn_used", "conn_free", "conn_used_max", "status"],
        {"status": "worst"},
        group=POOL_GROUP,
    )
    series = []
    for hg in sorted({g[0] for g in pool.groups()}):
        label = _hostgroup_label(node.cluster, hg)
        servers = [g for g in pool.groups() if g[0] == hg]
        series.append((f"used · {label}", _over(pool, servers, "conn_used", sum), "line"))
        if window.bucket:
            series.append(
                (f"most used by one server in a bucket · {label}", _over(pool, servers, "conn_used_max", max), "dotted")
            )
        series.append((f"free · {label}", _over(pool, servers, "conn_free", sum), "dashed"))
    data = assemble(window, base, series, title="Backend connections used / free per hostgroup", unit="connections")
    data["status"] = {_pool_label(g): _aligned(data, pool.values[(g, "status")]) for g in pool.groups()}
    return data


def _hostgroup_label(cluster, hostgroup):
    roles = {
        cluster.writer_hostgroup: "writer",
        cluster.reader_hostgroup: "reader",
        cluster.backup_writer_hostgroup: "backup writer",
        cluster.offline_hostgroup: "offline",
    }
    return f"hg {hostgroup} ({roles[hostgroup]})" if hostgroup in roles else f"hg {hostgroup}"


def _over(pool, groups, field, how):
    """{ts: how(the groups' values)}: a point where none of them has a value stays a gap."""
    by_ts = defaultdict(list)
    for g in groups:
        for ts, v in pool.values[(g, field)].items():
            if v is not None:
                by_ts[ts].append(v)
    return {ts: how(vs) for ts, vs in by_ts.items()}


def _aligned(data, values):
    """Values that are not numbers ({ts: value}) on the chart's timeline (null in gaps)."""
    by_ms = {int(ts * 1000): v for ts, v in values.items()}
    return [by_ms.get(t) for t in data["t"]]


def chart_latency(window, node):
    base = _node_base(window, node)
    pool = window.load(PoolSnapshot, {"node_id": node.pk}, ["latency_us"], group=POOL_GROUP)
    series = [
        (
            _pool_label(g),
            {ts: (v / 1000 if v is not None else None) for ts, v in pool.values[(g, "latency_us")].items()},
            "line",
        )
        for g in pool.groups()
    ]
    return assemble(window, base, series, title="Latency per server (ProxySQL's ping, Latency_us)", unit="ms")


def chart_errors(window, node):
    base = _node_base(window, node, ["conn_err_ps", "client_connections_aborted_ps", "server_connections_aborted_ps"])
    wide, extra = _shared(node)
    series = [
        ("backend connect errors/s (ConnERR)", base.values[((), "conn_err_ps")], "main"),
        (f"client connections aborted/s{wide}", base.values[((), "client_connections_aborted_ps")], "line"),
        (f"server connections aborted/s{wide}", base.values[((), "server_connections_aborted_ps")], "dashed"),
    ]
    return assemble(window, base, series, title="Errors", unit="/s", extra=extra)


def chart_mirror_queue(window, node):
    base = _node_base(window, node, ["mirror_queue_length", "mirror_max_queue_length", "mysql_threads"])
    queue = base.values[((), "mirror_queue_length")]
    per_thread, threads = base.values[((), "mirror_max_queue_length")], base.values[((), "mysql_threads")]
    limit = {ts: v * (threads.get(ts) or 1) for ts, v in per_thread.items() if v is not None}
    warn = {ts: v * status.MIRROR_QUEUE_WARN for ts, v in limit.items()}
    series = [
        ("Mirror_queue_length (total over mysql-threads)", queue, "main"),
        ("limit: mirror_max_queue_length × mysql-threads", limit, "limit"),
        (f"{status.MIRROR_QUEUE_WARN:.0%} of the limit", warn, "warn"),
    ]
    wide, extra = _shared(node)
    return assemble(window, base, series, title=f"Mirror queue against its limit{wide}", unit="queued", extra=extra)


def chart_mirror_concurrency(window, node):
    base = _node_base(window, node, ["mirror_concurrency", "mirror_max_concurrency"])
    series = [
        ("Mirror_concurrency", base.values[((), "mirror_concurrency")], "main"),
        ("limit: mysql-mirror_max_concurrency", base.values[((), "mirror_max_concurrency")], "limit"),
    ]
    wide, extra = _shared(node)
    return assemble(
        window, base, series, title=f"Mirror concurrency against its limit{wide}", unit="in flight", extra=extra
    )


def chart_mirror_loss(window, node):
    """Measured loss per mirror rule, one point per digest-poll window (a bucket's loss from its summed
    copies, 1 - mirrored / to mirror). Its timeline is the digest poll's, so gaps follow that interval."""
    window = Window(window.range, settings.MONITOR_DIGEST_INTERVAL_S, window.end, window.asked)
    frame = window.load(MirrorRuleSample, {"node_id": node.pk}, ["expected_ps", "mirrored_ps"], group=("rule_id",))
    series = []
    for g in frame.groups():
        expected, mirrored = frame.values[(g, "expected_ps")], frame.values[(g, "mirrored_ps")]
        loss = {ts: max(0.0, 1 - (mirrored.get(ts) or 0) / e) * 100 for ts, e in expected.items() if e and e >= 1e-9}
        series.append((f"rule {g[0]}", loss, "line"))
    wide, extra = _shared(node)
    return assemble(
        window,
        frame,
        series,
        title=f"Measured mirror loss per rule{wide}",
        unit="% of copies lost",
        extra={"y": {"min": 0, "max": 100}, **extra},
    )


PROXYSQL_CHARTS = {
    "queries": chart_queries,
    "connections": chart_connections,
    "latency": chart_latency,
    "errors": chart_errors,
    "mirror_queue": chart_mirror_queue,
    "mirror_concurrency": chart_mirror_concurrency,
    "mirror_loss": chart_mirror_loss,
}


# -- backend charts --------------------------------------------------------------------------------
BACKEND_AGGS = {"local_state": "min", "recv_queue": "max"}


def _backend(window, server, fields):
    return window.load(BackendSample, {"server_id": server.pk}, fields, BACKEND_AGGS, with_reachable=True)


def chart_wsrep_state(window, server):
    base = _backend(window, server, ["local_state"])
    return assemble(
        window,
        base,
        [("wsrep_local_state (worst in each bucket)", base.values[((), "local_state")], "stepped")],
        title="wsrep state",
        extra={"y": {"min": 0.5, "max": 4.5, "ticks": WSREP_TICKS}},
    )


def chart_recv_queue(window, server):
    base = _backend(window, server, ["recv_queue"])
    threshold = {ts: server.cluster.max_replication_lag for ts in base.reachable}
    return assemble(
        window,
        base,
        [
            ("wsrep_local_recv_queue (max in each bucket)", base.values[((), "recv_queue")], "main"),
            ("cluster's max_replication_lag", threshold, "limit"),
        ],
        title="Receive queue",
        unit="write-sets",
    )


def chart_flow_control(window, server):
    base = _backend(window, server, ["flow_control_paused"])
    return assemble(
        window,
        base,
        [("wsrep_flow_control_paused", base.values[((), "flow_control_paused")], "main")],
        title="Flow control paused",
        unit="share of time",
        extra={"y": {"min": 0, "max": 1}},
    )


BACKEND_CHARTS = {"wsrep_state": chart_wsrep_state, "recv_queue": chart_recv_queue, "flow_control": chart_flow_control}


def chart(kind, name, obj, range_key, now=None, resolution=None):
    """One chart's JSON; `resolution` (RAW, MINUTE or HOUR) overrides the one the range picks."""
    charts = PROXYSQL_CHARTS if kind == "proxysql" else BACKEND_CHARTS
    if name not in charts:
        raise UnknownChart(name)
    window = Window(range_key, obj.cluster.poll_interval_s, now, resolution)
    return charts[name](window, obj)
