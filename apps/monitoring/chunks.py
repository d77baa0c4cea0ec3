"""A ProxySQL node's history in chunks: one HistoryChunk row per node and span (an hour of raw polls, an
hour of one-minute buckets, a day of one-hour buckets) holding every record of the span, each record its
ProxySQLSample figures and its PoolSnapshot servers, deflated together (issue 13).

Why: a row costs its header, node, time, resolution and an index entry (60-110 bytes on SQLite and InnoDB)
whatever it holds, and a poll or bucket was two rows; deflate across a span's records also finds what
repeats from one record to the next (idle servers, limits, extremes equal to the average). The poller and
the rollups are unchanged: they write and read rows. compact() (after the rollups, rollups.run_all) turns
the rows of every span the rollups have read into chunks and deletes them, so rows remain only for the
newest hour or so. Readers go through samples() (node figures) and snapshots() (pool servers, what
pool.read decodes): both read rows and chunks alike, so a reader never knows which one it got.

Format (V1): one version byte, then deflated: varint record count; per record: varint microseconds since
the previous record (the first: since the span's start), a flags byte (1: figures, 2: pool, 4: reachable),
the figures as NODE_FIELDS_V1's values packed like pool.py's (2-bit tags: None, varint, 4-byte float),
then the pool snapshot's bytes (pool.pack's, not deflated on their own) after their varint length.
"""
import zlib
from collections import defaultdict
from datetime import datetime, timedelta, timezone as dt_timezone

from django.db import transaction
from django.utils import timezone

from . import pool
from .models import HOUR, MINUTE, RAW, HistoryChunk, PoolSnapshot, ProxySQLSample, RollupMark

V1 = 1
SPAN = {RAW: HOUR, MINUTE: HOUR, HOUR: 86400}  # seconds of history per chunk, per resolution
MAX_SPAN = max(SPAN.values())
# The figures a V1 chunk holds, in this order. Frozen: a new ProxySQLSample column needs a new version
# (test_chunks checks that this still matches the model).
NODE_FIELDS_V1 = (
    "questions_ps", "slow_queries_ps", "prepared_ps", "client_connections_connected", "client_connections_created_ps",
    "client_connections_aborted_ps", "server_connections_connected", "server_connections_aborted_ps",
    "active_transactions", "conn_used", "conn_free", "conn_err_ps", "mirror_concurrency", "mirror_queue_length",
    "mirror_max_concurrency", "mirror_max_queue_length", "mysql_threads", "questions_ps_min", "questions_ps_max",
    "slow_queries_ps_min", "slow_queries_ps_max", "prepared_ps_min", "prepared_ps_max",
    "client_connections_connected_min", "client_connections_connected_max", "client_connections_created_ps_min",
    "client_connections_created_ps_max", "client_connections_aborted_ps_min", "client_connections_aborted_ps_max",
    "server_connections_connected_min", "server_connections_connected_max", "server_connections_aborted_ps_min",
    "server_connections_aborted_ps_max", "active_transactions_min", "active_transactions_max", "conn_used_min",
    "conn_used_max", "conn_free_min", "conn_free_max", "conn_err_ps_min", "conn_err_ps_max", "mirror_concurrency_min",
    "mirror_concurrency_max")
# A record's figures as read: (reachable, *NODE_FIELDS_V1)
FIGURE_INDEX = {"reachable": 0, **{f: i + 1 for i, f in enumerate(NODE_FIELDS_V1)}}
FIGURES, POOL, REACHABLE = 1, 2, 4
EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)
ONE_US = timedelta(microseconds=1)
_TAG_BYTES = (len(NODE_FIELDS_V1) + 3) // 4


def _us(ts):
    return (ts - EPOCH) // ONE_US


# -- encoding --------------------------------------------------------------------------------------
def encode(start, records):
    """The chunk's bytes. records: [(ts, figures or None, pool bytes or None)] in time order, figures being
    (reachable, *NODE_FIELDS_V1)."""
    out = bytearray()
    pool._varint(out, len(records))
    previous = _us(start)
    for ts, figures, servers in records:
        now = _us(ts)
        pool._varint(out, now - previous)
        previous = now
        out.append((FIGURES if figures is not None else 0) | (POOL if servers is not None else 0)
                   | (REACHABLE if figures is None or figures[0] else 0))
        if figures is not None:
            body, tags = bytearray(), []
            for v in figures[1:]:
                pool._value(body, tags, v)
            tags += [0] * (-len(tags) % 4)
            out += bytes(tags[i] | tags[i + 1] << 2 | tags[i + 2] << 4 | tags[i + 3] << 6 for i in range(0, len(tags), 4))
            out += body
        if servers is not None:
            servers = pool.plain(servers)
            pool._varint(out, len(servers))
            out += servers
    return bytes([V1]) + zlib.compress(bytes(out), 9)


def decode(start, data):
    """[(ts, figures or None, pool bytes or None)] of one chunk (encode's input)."""
    data = bytes(data)
    if data[0] != V1:
        raise ValueError(f"unknown history chunk version {data[0]}")
    data = zlib.decompress(data[1:])
    count, i = pool._read_varint(data, 0)
    at = _us(start)
    out = []
    for _ in range(count):
        delta, i = pool._read_varint(data, i)
        at += delta
        flags = data[i]
        i += 1
        figures = servers = None
        if flags & FIGURES:
            tags = [t >> shift & 3 for t in data[i:i + _TAG_BYTES] for shift in (0, 2, 4, 6)]
            i += _TAG_BYTES
            values = [bool(flags & REACHABLE)]
            for k in range(len(NODE_FIELDS_V1)):
                tag = tags[k]
                if tag == 0:
                    values.append(None)
                elif tag == 1:
                    v, i = pool._read_varint(data, i)
                    values.append(v)
                else:
                    values.append(pool._F32.unpack_from(data, i)[0])
                    i += 4
            figures = tuple(values)
        if flags & POOL:
            n, i = pool._read_varint(data, i)
            servers = data[i:i + n]
            i += n
        out.append((EPOCH + at * ONE_US, figures, servers))
    return out


# -- reading ---------------------------------------------------------------------------------------
def _chunk_query(filters):
    """(HistoryChunk filters, test of a record's ts) for a reader's filters on ProxySQLSample / PoolSnapshot:
    node, node_id, node_id__in, resolution, resolution__in pass through; ts lookups find the chunks whose
    span may hold such a record and test each record."""
    query, tests = {}, []
    for key, value in filters.items():
        if key == "ts" or key.startswith("ts__"):
            lookup = key[4:] or "exact"
            if lookup in ("exact", "gte", "gt"):
                query["ts__gt"] = max(query.get("ts__gt", value - timedelta(seconds=MAX_SPAN)),
                                      value - timedelta(seconds=MAX_SPAN))
            if lookup in ("exact", "lt", "lte"):
                query[f"ts__{'lte' if lookup == 'exact' else lookup}"] = value
            tests.append({"exact": lambda t, v=value: t == v, "gte": lambda t, v=value: t >= v,
                          "gt": lambda t, v=value: t > v, "lt": lambda t, v=value: t < v,
                          "lte": lambda t, v=value: t <= v}[lookup])
        elif key in ("node", "node_id", "node_id__in", "resolution", "resolution__in"):
            query[key] = value
        else:
            raise ValueError(f"history chunks cannot be filtered by {key}")
    return query, tests


def _records(filters):
    """(node id, ts, resolution, figures, pool bytes) of the chunks' records matching filters, by ts."""
    query, tests = _chunk_query(filters)
    out = []
    for node_id, resolution, start, data in HistoryChunk.objects.filter(**query).values_list(
            "node_id", "resolution", "ts", "data").iterator(chunk_size=200):
        out += [(node_id, ts, resolution, figures, servers) for ts, figures, servers in decode(start, data)
                if all(test(ts) for test in tests)]
    out.sort(key=_order)
    return out


def _order(record):
    """Time, then resolution, then node: one order for rows and chunks alike."""
    return record[1], record[2], record[0]


def samples(filters, fields):
    """[(node id, ts, resolution, *values of fields)] of the node figures (ProxySQLSample columns, "reachable"
    among them) matching filters (a dict: see _chunk_query), rows and chunks alike, in time order."""
    where = [FIGURE_INDEX[f] for f in fields]
    out = [(node_id, ts, resolution, *(figures[i] for i in where))
           for node_id, ts, resolution, figures, _ in _records(filters) if figures is not None]
    out += ProxySQLSample.objects.filter(**filters).order_by("ts", "resolution", "node_id").values_list(
        "node_id", "ts", "resolution", *fields)
    out.sort(key=_order)  # two sorted runs: linear
    return out


def snapshots(filters):
    """[(node id, ts, resolution, servers)] of the pool snapshots matching filters, rows and chunks alike,
    in time order; pool.read decodes them."""
    out = [(node_id, ts, resolution, servers)
           for node_id, ts, resolution, _, servers in _records(filters) if servers is not None]
    out += PoolSnapshot.objects.filter(**filters).order_by("ts", "resolution", "node_id").values_list(
        "node_id", "ts", "resolution", "servers")
    out.sort(key=_order)
    return out


def last_reachable_raw(node_id):
    """(ts, {figure: value}) of the node's newest raw poll that reached it, from rows or chunks, or None."""
    names = ["reachable", *NODE_FIELDS_V1]
    row = (ProxySQLSample.objects.filter(node_id=node_id, resolution=RAW, reachable=True).order_by("-ts")
           .values_list("ts", *NODE_FIELDS_V1).first())
    if row:
        return row[0], dict(zip(NODE_FIELDS_V1, row[1:]))
    for start, data in (HistoryChunk.objects.filter(node_id=node_id, resolution=RAW).order_by("-ts")
                        .values_list("ts", "data")[:48]):
        for ts, figures, _ in reversed(decode(start, data)):
            if figures is not None and figures[0]:
                return ts, dict(zip(names[1:], figures[1:]))
    return None


# -- compaction ------------------------------------------------------------------------------------
class Tables:
    """The models compact() works on: these, or a migration's historical ones."""

    def __init__(self, node=ProxySQLSample, pool_=PoolSnapshot, chunk=HistoryChunk, mark=RollupMark):
        self.node, self.pool, self.chunk, self.mark = node, pool_, chunk, mark


def _floor(ts, seconds):
    return EPOCH + timedelta(seconds=int((ts - EPOCH).total_seconds()) // seconds * seconds)


def _compactable_until(tables, resolution):
    """Rows of this resolution before this time have been read by the rollup that consumes them (the
    minute rollup for raw polls, the hour rollup for minute and hour buckets)."""
    target = MINUTE if resolution == RAW else HOUR
    until = None
    for model in (tables.node, tables.pool):
        mark = tables.mark.objects.filter(name=f"{model._meta.model_name}:{target}").values_list(
            "rolled_until", flat=True).first()
        if mark is None:
            if model.objects.filter(resolution=resolution).exists():
                return None  # this table's rollup has not started: its rows are still to be read
            continue
        until = mark if until is None else min(until, mark)
    return until


def compact(now=None, *, tables=None, max_spans=48, batch=50):
    """Turn the rows of every complete span that the rollups have read into HistoryChunk rows (merged into
    an existing chunk when a late row arrives) and delete them. Returns the records compacted."""
    tables = tables or Tables()
    now = now or timezone.now()
    done = 0
    for resolution, span in SPAN.items():
        until = _compactable_until(tables, resolution)
        if until is None:
            continue
        until = min(until, now)
        for _ in range(max_spans):
            firsts = [m.objects.filter(resolution=resolution, ts__lt=until).order_by("ts").values_list("ts", flat=True)
                      .first() for m in (tables.node, tables.pool)]
            firsts = [f for f in firsts if f is not None]
            if not firsts:
                break
            start = _floor(min(firsts), span)
            end = start + timedelta(seconds=span)
            if end > until:
                break
            done += _compact_span(tables, resolution, start, end, batch)
    return done


def _compact_span(tables, resolution, start, end, batch):
    where = {"resolution": resolution, "ts__gte": start, "ts__lt": end}
    node_ids = sorted({*tables.node.objects.filter(**where).values_list("node_id", flat=True).distinct(),
                       *tables.pool.objects.filter(**where).values_list("node_id", flat=True).distinct()})
    done = 0
    for k in range(0, len(node_ids), batch):
        ids = node_ids[k:k + batch]
        records = defaultdict(dict)  # node id -> {ts: [figures, servers]}
        for node_id, start_, data in tables.chunk.objects.filter(node_id__in=ids, resolution=resolution,
                                                                  ts=start).values_list("node_id", "ts", "data"):
            for ts, figures, servers in decode(start_, data):
                records[node_id][ts] = [figures, servers]
        top = {}
        for pk, node_id, ts, *figures in tables.node.objects.filter(node_id__in=ids, **where).values_list(
                "pk", "node_id", "ts", "reachable", *NODE_FIELDS_V1).iterator(chunk_size=5000):
            records[node_id].setdefault(ts, [None, None])[0] = tuple(figures)
            top["node"] = max(top.get("node", pk), pk)
        for pk, node_id, ts, servers in tables.pool.objects.filter(node_id__in=ids, **where).values_list(
                "pk", "node_id", "ts", "servers").iterator(chunk_size=5000):
            records[node_id].setdefault(ts, [None, None])[1] = bytes(servers)
            top["pool"] = max(top.get("pool", pk), pk)
        chunks = [tables.chunk(node_id=node_id, resolution=resolution, ts=start,
                               data=encode(start, [(ts, *by_ts[ts]) for ts in sorted(by_ts)]))
                  for node_id, by_ts in records.items()]
        with transaction.atomic():
            tables.chunk.objects.filter(node_id__in=ids, resolution=resolution, ts=start).delete()
            tables.chunk.objects.bulk_create(chunks)
            # Only the rows read: one that arrived since stays a row (read as one) until the next run.
            if "node" in top:
                tables.node.objects.filter(node_id__in=ids, pk__lte=top["node"], **where).delete()
            if "pool" in top:
                tables.pool.objects.filter(node_id__in=ids, pk__lte=top["pool"], **where).delete()
        done += sum(len(by_ts) for by_ts in records.values())
    return done


def prune(keep, now):
    """Delete chunks whose whole span is older than its resolution's retention ({resolution: timedelta})."""
    return {f"historychunk:{resolution}": HistoryChunk.objects.filter(
        resolution=resolution, ts__lt=now - age - timedelta(seconds=SPAN[resolution])).delete()[0]
        for resolution, age in keep.items()}
