"""History in chunks: one row per owner and span (an hour of raw polls, half an hour of one-minute buckets, a
day of one-hour buckets) holding every record of the span, deflated together (issue 13). Two families: a
ProxySQL node's (HistoryChunk: each record its ProxySQLSample figures and its PoolSnapshot servers) and a
backend's (BackendChunk: its BackendSample figures; polled every second by default, the biggest history).

Why: a row costs its header, node, time, resolution and an index entry (60-110 bytes on SQLite and InnoDB)
whatever it holds, and a poll or bucket was two rows; deflate across a span's records also finds what
repeats from one record to the next (idle servers, limits, extremes equal to the average). The poller and
the rollups are unchanged: they write and read rows. compact() (after the rollups, rollups.run_all) turns
the rows of every span the rollups have read into chunks and deletes them, so rows remain only for the
newest hour or so. Readers go through samples() (figures of either family) and snapshots() (pool servers,
what read_pool decodes): both read rows and chunks alike, so a reader never knows which one it got.

Format (V1): one version byte, then deflated: varint record count; per record: varint microseconds since
the previous record (the first: since the span's start), a flags byte (1: figures, 2: pool, 4: reachable),
the figures (the family's FIELDS_V1) packed like pool.py's (2-bit tags: None, varint, 4-byte float;
booleans as 0/1), then the pool snapshot's bytes (pool.pack's, not deflated on their own) after their
varint length.
"""

import zlib
from collections import defaultdict
from datetime import datetime, timedelta, timezone as dt_timezone

from django.db import transaction
from django.utils import timezone

from . import pool
from .models import (
    HOUR,
    MINUTE,
    RAW,
    BackendChunk,
    BackendSample,
    HistoryChunk,
    PoolServer,
    PoolSnapshot,
    ProxySQLSample,
    RollupMark,
)

V1 = 1
# Seconds of history per chunk, per resolution. Half an hour of minute buckets is 3-5 kB for a node of 9
# servers: InnoDB keeps a value under ~8 kB in its row, a longer one gets whole 16 kB pages of its own
# (an hour's 8.1 kB took 16 kB). Raw hours (25-30 kB) and hour-bucket days (0.4 kB) fit their pages well.
SPAN = {RAW: HOUR, MINUTE: 1800, HOUR: 86400}
MAX_SPAN = max(SPAN.values())
# The figures a V1 chunk holds, in this order. Frozen: a new sample column needs a new version
# (test_chunks checks that these still match the models).
NODE_FIELDS_V1 = (
    "questions_ps",
    "slow_queries_ps",
    "prepared_ps",
    "client_connections_connected",
    "client_connections_created_ps",
    "client_connections_aborted_ps",
    "server_connections_connected",
    "server_connections_aborted_ps",
    "active_transactions",
    "conn_used",
    "conn_free",
    "conn_err_ps",
    "mirror_concurrency",
    "mirror_queue_length",
    "mirror_max_concurrency",
    "mirror_max_queue_length",
    "mysql_threads",
    "questions_ps_min",
    "questions_ps_max",
    "slow_queries_ps_min",
    "slow_queries_ps_max",
    "prepared_ps_min",
    "prepared_ps_max",
    "client_connections_connected_min",
    "client_connections_connected_max",
    "client_connections_created_ps_min",
    "client_connections_created_ps_max",
    "client_connections_aborted_ps_min",
    "client_connections_aborted_ps_max",
    "server_connections_connected_min",
    "server_connections_connected_max",
    "server_connections_aborted_ps_min",
    "server_connections_aborted_ps_max",
    "active_transactions_min",
    "active_transactions_max",
    "conn_used_min",
    "conn_used_max",
    "conn_free_min",
    "conn_free_max",
    "conn_err_ps_min",
    "conn_err_ps_max",
    "mirror_concurrency_min",
    "mirror_concurrency_max",
)
BACKEND_FIELDS_V1 = (
    "local_state",
    "primary",
    "ready",
    "cluster_size",
    "recv_queue",
    "flow_control_paused",
    "desync",
    "reject_queries",
    "read_only",
    "lag_seconds",
    "cluster_size_min",
    "cluster_size_max",
    "flow_control_paused_min",
    "flow_control_paused_max",
    "lag_seconds_min",
    "lag_seconds_max",
)
FIGURES, POOL, REACHABLE = 1, 2, 4
EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)
ONE_US = timedelta(microseconds=1)


class Family:
    """One history family: its sample table (and pool table), its chunk table, who owns a record, the
    figures (frozen per version), which of them are booleans. Built from a migration's historical models too."""

    def __init__(self, sample, chunk, owner, fields, booleans=(), pool_=None, mark=RollupMark):
        self.sample, self.chunk, self.owner, self.fields = sample, chunk, owner, fields
        self.pool, self.mark = pool_, mark
        self.booleans = frozenset(fields.index(f) + 1 for f in booleans)  # positions in a record's figures
        self.index = {"reachable": 0, **{f: i + 1 for i, f in enumerate(fields)}}
        self.tag_bytes = (len(fields) + 3) // 4
        self.owner_field = owner[:-3]  # node_id -> node

    @property
    def tables(self):
        return (self.sample,) if self.pool is None else (self.sample, self.pool)


def proxysql(sample=ProxySQLSample, chunk=HistoryChunk, pool_=PoolSnapshot, mark=RollupMark):
    return Family(sample, chunk, "node_id", NODE_FIELDS_V1, pool_=pool_, mark=mark)


def backend(sample=BackendSample, chunk=BackendChunk, mark=RollupMark):
    return Family(
        sample,
        chunk,
        "server_id",
        BACKEND_FIELDS_V1,
        booleans=("primary", "ready", "desync", "reject_queries", "read_only"),
        mark=mark,
    )


PROXYSQL, BACKEND = proxysql(), backend()
FAMILIES = {ProxySQLSample: PROXYSQL, BackendSample: BACKEND}


def _us(ts):
    return (ts - EPOCH) // ONE_US


# -- encoding --------------------------------------------------------------------------------------
def encode(start, records):
    """The chunk's bytes. records: [(ts, figures or None, pool bytes or None)] in time order, figures being
    (reachable, *the family's FIELDS_V1)."""
    out = bytearray()
    pool._varint(out, len(records))
    previous = _us(start)
    for ts, figures, servers in records:
        now = _us(ts)
        pool._varint(out, now - previous)
        previous = now
        out.append(
            (FIGURES if figures is not None else 0)
            | (POOL if servers is not None else 0)
            | (REACHABLE if figures is None or figures[0] else 0)
        )
        if figures is not None:
            body, tags = bytearray(), []
            for v in figures[1:]:
                pool._value(body, tags, v)
            out += pool._tag_bytes(tags)
            out += body
        if servers is not None:
            servers = pool.plain(servers)
            pool._varint(out, len(servers))
            out += servers
    return bytes([V1]) + zlib.compress(bytes(out), 9)


def decode(start, data, family=PROXYSQL):
    """[(ts, figures or None, pool bytes or None)] of one chunk of this family (encode's input)."""
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
            tags = [t >> shift & 3 for t in data[i : i + family.tag_bytes] for shift in (0, 2, 4, 6)]
            i += family.tag_bytes
            values = [bool(flags & REACHABLE)]
            for k in range(len(family.fields)):
                tag = tags[k]
                if tag == 0:
                    values.append(None)
                elif tag == 1:
                    v, i = pool._read_varint(data, i)
                    values.append(v)
                else:
                    values.append(pool._F32.unpack_from(data, i)[0])
                    i += 4
            for k in family.booleans:
                if values[k] is not None:
                    values[k] = bool(values[k])
            figures = tuple(values)
        if flags & POOL:
            n, i = pool._read_varint(data, i)
            servers = data[i : i + n]
            i += n
        out.append((EPOCH + at * ONE_US, figures, servers))
    return out


# -- reading ---------------------------------------------------------------------------------------
def _chunk_query(family, filters):
    """(chunk filters, test of a record's ts) for a reader's filters on the family's sample tables: the
    owner's lookups (node..., server...) and resolution pass through; ts lookups find the chunks whose
    span may hold such a record and test each record."""
    query, tests = {}, []
    span = timedelta(seconds=SPAN.get(filters.get("resolution"), MAX_SPAN))  # a chunk holds at most this
    for key, value in filters.items():
        if key == "ts" or key.startswith("ts__"):
            lookup = key[4:] or "exact"
            if lookup in ("exact", "gte", "gt"):
                query["ts__gt"] = max(query.get("ts__gt", value - span), value - span)
            if lookup in ("exact", "lt", "lte"):
                query[f"ts__{'lte' if lookup == 'exact' else lookup}"] = value
            tests.append(
                {
                    "exact": lambda t, v=value: t == v,
                    "gte": lambda t, v=value: t >= v,
                    "gt": lambda t, v=value: t > v,
                    "lt": lambda t, v=value: t < v,
                    "lte": lambda t, v=value: t <= v,
                }[lookup]
            )
        elif key.split("__")[0] in (family.owner, family.owner_field, "resolution"):
            query[key] = value
        else:
            raise ValueError(f"history chunks cannot be filtered by {key}")
    return query, tests


def _records(family, filters):
    """(owner id, ts, resolution, figures, pool bytes) of the chunks' records matching filters, in order."""
    query, tests = _chunk_query(family, filters)
    out = []
    for owner_id, resolution, start, data in (
        family.chunk.objects.filter(**query)
        .values_list(family.owner, "resolution", "ts", "data")
        .iterator(chunk_size=200)
    ):
        out += [
            (owner_id, ts, resolution, figures, servers)
            for ts, figures, servers in decode(start, data, family)
            if all(test(ts) for test in tests)
        ]
    out.sort(key=_order)
    return out


def _order(record):
    """Time, then resolution, then owner: one order for rows and chunks alike."""
    return record[1], record[2], record[0]


def samples(filters, fields, model=ProxySQLSample):
    """[(owner id, ts, resolution, *values of fields)] of `model`'s figures ("reachable" among them) matching
    filters (a dict: see _chunk_query), rows and chunks alike, in time order."""
    family = FAMILIES[model]
    where = [family.index[f] for f in fields]
    out = [
        (owner_id, ts, resolution, *(figures[i] for i in where))
        for owner_id, ts, resolution, figures, _ in _records(family, filters)
        if figures is not None
    ]
    out += (
        model.objects.filter(**filters)
        .order_by("ts", "resolution", family.owner)
        .values_list(family.owner, "ts", "resolution", *fields)
    )
    out.sort(key=_order)  # two sorted runs: linear
    return out


def snapshots(filters):
    """[(node id, ts, resolution, servers)] of the pool snapshots matching filters, rows and chunks alike,
    in time order; read_pool decodes them."""
    out = [
        (node_id, ts, resolution, servers)
        for node_id, ts, resolution, _, servers in _records(PROXYSQL, filters)
        if servers is not None
    ]
    out += (
        PoolSnapshot.objects.filter(**filters)
        .order_by("ts", "resolution", "node_id")
        .values_list("node_id", "ts", "resolution", "servers")
    )
    out.sort(key=_order)
    return out


def read_pool(filters, fields):
    """Yield (node id, ts, resolution, (hostgroup, host, port), [values of `fields`]) per server of each pool
    snapshot matching `filters` (a dict: snapshots()), stored as a row or in a history chunk, in time
    order. Fields: FIELDS, their _min/_max, "status"."""
    keys = {}
    positions = {}
    for node_id, ts, resolution, data in snapshots(filters):
        rollup, entries = pool._decode(data)
        where = positions.get(rollup) or positions.setdefault(rollup, pool._positions(fields, rollup))
        for server_id, status, values in entries:
            key = keys.get(server_id)
            if key is None:
                keys.update(
                    {
                        pk: tuple(k)
                        for pk, *k in PoolServer.objects.filter(node_id=node_id).values_list(
                            "pk", "hostgroup", "srv_host", "srv_port"
                        )
                    }
                )
                key = keys.get(server_id, (None, None, None))
            yield node_id, ts, resolution, key, [status if p is None else values[p] for p in where]


def last_reachable_raw(owner_id, model=ProxySQLSample):
    """(ts, {figure: value}) of the owner's newest raw poll that reached it, from rows or chunks, or None."""
    family = FAMILIES[model]
    row = (
        model.objects.filter(**{family.owner: owner_id}, resolution=RAW, reachable=True)
        .order_by("-ts")
        .values_list("ts", *family.fields)
        .first()
    )
    if row:
        return row[0], dict(zip(family.fields, row[1:]))
    for start, data in (
        family.chunk.objects.filter(**{family.owner: owner_id}, resolution=RAW)
        .order_by("-ts")
        .values_list("ts", "data")[:48]
    ):
        for ts, figures, _ in reversed(decode(start, data, family)):
            if figures is not None and figures[0]:
                return ts, dict(zip(family.fields, figures[1:]))
    return None


# -- compaction ------------------------------------------------------------------------------------
def _floor(ts, seconds):
    return EPOCH + timedelta(seconds=int((ts - EPOCH).total_seconds()) // seconds * seconds)


def _compactable_until(family, resolution):
    """Rows of this resolution before this time have been read by the rollup that consumes them (the
    minute rollup for raw polls, the hour rollup for minute and hour buckets)."""
    target = MINUTE if resolution == RAW else HOUR
    until = None
    for model in family.tables:
        mark = (
            family.mark.objects.filter(name=f"{model._meta.model_name}:{target}")
            .values_list("rolled_until", flat=True)
            .first()
        )
        if mark is None:
            if model.objects.filter(resolution=resolution).exists():
                return None  # this table's rollup has not started: its rows are still to be read
            continue
        until = mark if until is None else min(until, mark)
    return until


def compact(now=None, *, families=None, max_spans=48, batch=50, max_owners=None):
    """Turn the rows of every complete span that the rollups have read into chunks (merged into an existing
    chunk when a late row arrives) and delete them. Returns the records compacted. max_owners bounds one
    run's work (the rollup task runs every minute: the next run goes on where this one stopped)."""
    now = now or timezone.now()
    done = 0
    budget = [float("inf") if max_owners is None else max_owners]
    for family in families or (PROXYSQL, BACKEND):
        for resolution, span in SPAN.items():
            until = _compactable_until(family, resolution)
            if until is None:
                continue
            until = min(until, now)
            for _ in range(max_spans):
                if budget[0] <= 0:
                    return done
                firsts = [
                    m.objects.filter(resolution=resolution, ts__lt=until)
                    .order_by("ts")
                    .values_list("ts", flat=True)
                    .first()
                    for m in family.tables
                ]
                firsts = [f for f in firsts if f is not None]
                if not firsts:
                    break
                start = _floor(min(firsts), span)
                end = start + timedelta(seconds=span)
                if end > until:
                    break
                done += _compact_span(family, resolution, start, end, batch, budget)
    return done


def _compact_span(family, resolution, start, end, batch, budget):
    where = {"resolution": resolution, "ts__gte": start, "ts__lt": end}
    owner = family.owner
    owner_ids = sorted(
        {i for model in family.tables for i in model.objects.filter(**where).values_list(owner, flat=True).distinct()}
    )
    done = 0
    for k in range(0, len(owner_ids), batch):
        if budget[0] <= 0:
            break
        budget[0] -= len(owner_ids[k : k + batch])
        ids = {f"{owner}__in": owner_ids[k : k + batch]}
        records = defaultdict(dict)  # owner id -> {ts: [figures, servers]}
        for owner_id, data in family.chunk.objects.filter(**ids, resolution=resolution, ts=start).values_list(
            owner, "data"
        ):
            for ts, figures, servers in decode(start, data, family):
                records[owner_id][ts] = [figures, servers]
        top = {}
        for pk, owner_id, ts, *figures in (
            family.sample.objects.filter(**ids, **where)
            .values_list("pk", owner, "ts", "reachable", *family.fields)
            .iterator(chunk_size=5000)
        ):
            records[owner_id].setdefault(ts, [None, None])[0] = tuple(figures)
            top[family.sample] = max(top.get(family.sample, pk), pk)
        if family.pool is not None:
            for pk, owner_id, ts, servers in (
                family.pool.objects.filter(**ids, **where)
                .values_list("pk", owner, "ts", "servers")
                .iterator(chunk_size=5000)
            ):
                records[owner_id].setdefault(ts, [None, None])[1] = bytes(servers)
                top[family.pool] = max(top.get(family.pool, pk), pk)
        chunks = [
            family.chunk(
                **{owner: owner_id},
                resolution=resolution,
                ts=start,
                data=encode(start, [(ts, *by_ts[ts]) for ts in sorted(by_ts)]),
            )
            for owner_id, by_ts in records.items()
        ]
        with transaction.atomic():
            family.chunk.objects.filter(**ids, resolution=resolution, ts=start).delete()
            family.chunk.objects.bulk_create(chunks)
            # Only the rows read: one that arrived since stays a row (read as one) until the next run.
            for model, pk in top.items():
                model.objects.filter(**ids, pk__lte=pk, **where).delete()
        done += sum(len(by_ts) for by_ts in records.values())
    return done


def prune(keep, now):
    """Delete chunks whose whole span is older than its resolution's retention ({resolution: timedelta})."""
    return {
        f"{family.chunk._meta.model_name}:{resolution}": family.chunk.objects.filter(
            resolution=resolution, ts__lt=now - age - timedelta(seconds=SPAN[resolution])
        ).delete()[0]
        for family in (PROXYSQL, BACKEND)
        for resolution, age in keep.items()
    }
