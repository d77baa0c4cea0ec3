"""Query digest polling, storage, rollups and retention (the writes of this app).

A beat tick runs one shard (run_shard): under the shard's lease (apps/monitoring/leases.py), the nodes
whose digest interval (settings.MONITOR_DIGEST_INTERVAL_S) has passed are polled concurrently, one thread per node, each
read bounded by the client's timeouts (the digest read by MONITOR_DIGEST_READ_TIMEOUT: a node with
100,000 digests needs a second to build its answer). Ticks never pile up: a shard whose previous round
still runs skips the tick and counts it.

One node's poll (poll_node; poll_endpoint reads a ProxySQL that serves several clusters once for all its
rows, each row with its own baseline and deltas): its previous counters (the baseline, a Redis hash per node) -> read
ProxySQL_Uptime (lower than at the previous poll: a restart, every row starts afresh) and
stats_mysql_query_digest without the texts -> deltas (deltas.py) -> texts only of digests never
stored before -> then in the main thread: one short transaction per node writes its DigestStat rows,
its DigestPoll row and DigestNodeState.baseline_ts = this poll's time; after the commit the new
baseline goes to Redis with the same time. A poll uses its baseline only when Redis's time equals the
committed one, so a crash between the two writes (or a Redis flush) costs one interval, never a
doubled one. A failure (unreachable, timeout, garbage) is recorded for that node only: its state row
keeps the error and since when, its DigestPoll row counts a failed poll, the baseline is kept (the
next good poll covers both intervals).
"""

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypedDict, cast

import redis
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models.constants import OnConflict

from apps.clients.proxysql import ProxySQLAdmin, with_clusters
from apps.clients.wire import ClientError
from apps.fleet.models import ProxySQLNode
from apps.monitoring import leases, live, mirror, pollers
from apps.monitoring.models import MirrorRuleSample, RollupMark

from . import deltas as deltas_mod
from . import examples, mirroring, search
from .models import (
    DAY,
    FIVE_MINUTES,
    HOUR,
    LEVELS,
    RAW,
    SPAN_S,
    Digest,
    DigestNodeState,
    DigestPoll,
    DigestSource,
    DigestSpan,
    DigestStat,
)

log = logging.getLogger(__name__)

TICK_TOLERANCE_S = 2.5  # beat ticks every 5 s: a node due within 2.5 s is polled now, not a tick late
BASELINE_TTL_S = 86400  # a baseline older than this is useless (and its node maybe gone)
META_FIELD = b"@ts"
MIRROR_FIELD = b"@mirror"  # the mirror counters of the same poll (mirroring.py)
FULL_TEXT_READ_OVER = 2000  # more unknown digests than this: read every text at once, not in chunks

# A digest's source as DigestSource keys it: (hostgroup, schemaname, username, client_address); with its node first
# in the id cache. A running query as ProxySQLAdmin.running_queries reads it.
SourceKey = tuple[int, str, str, str]
NodeSourceKey = tuple[int, int, str, str, str]
RunningQuery = examples.RunningQuery
EndpointRow = tuple[ProxySQLNode, DigestNodeState | None, int]  # a node row of one ProxySQL, its state, its poll's ts

# Per worker process: one admin connection per node for digest reads (apart from the 2-s poller's, so
# a slow digest read never holds up a pool poll), and ids of digests and sources already stored.
_connections: dict[int, tuple[tuple[Any, ...], ProxySQLAdmin]] = {}  # node pk -> (its connection settings, admin)
_digest_ids: dict[str, int] = {}  # digest hash -> Digest id
_source_ids: dict[NodeSourceKey, int] = {}  # -> DigestSource id


def forget_caches() -> None:
    """Drop the per-process caches (tests roll the database back under them)."""
    for _, admin in _connections.values():
        admin.close()
    _connections.clear()
    _digest_ids.clear()
    _source_ids.clear()
    mirroring.forget_caches()


def baseline_key(node_pk: int) -> str:
    return f"digest-baseline:{node_pk}"


def _admin(node: ProxySQLNode) -> ProxySQLAdmin:
    fingerprint = (
        node.admin_host,
        node.admin_port,
        node.admin_user,
        node.admin_password,
        node.cluster.tls_ca,
        node.cluster.tls_verify,
    )
    entry = _connections.get(node.pk)
    if entry and entry[0] == fingerprint:
        return entry[1]
    if entry:
        entry[1].close()
    admin = ProxySQLAdmin.for_node(node)
    _connections[node.pk] = (fingerprint, admin)
    return admin


@dataclass
class NodeResult:
    node: ProxySQLNode
    ts: int
    outcome: deltas_mod.Outcome | None = None
    rows: int = 0
    texts: dict[str, str] = field(default_factory=dict)  # digest hash -> text, of the digests not stored yet
    error: Exception | None = None
    seconds: float = 0.0
    uptime: int = -1
    mirror: mirroring.MirrorRead | None = None  # this poll's mirror read (mirroring.read: rules, hits, counters)
    mirror_before: mirroring.MirrorBaseline | None = None  # the previous poll's, when the baseline is trusted
    running: list[RunningQuery] = field(default_factory=list)  # queries running at the poll: examples.py


class RoundSummary(TypedDict):
    polled: int
    failed: int
    rows: int
    seconds: float


class ShardSummary(TypedDict, total=False):
    """What a shard's tick did: skipped (the previous round still runs, or Redis is down), nothing due, or its
    round's summary and the nodes polled (for the alert rules read after the round)."""

    skipped: bool
    skipped_total: int
    error: str
    polled: int
    failed: int
    rows: int
    seconds: float
    nodes: list[int]


class RollupSummary(TypedDict):
    written: dict[int, int]  # level -> rows
    span: int | None  # the DigestSpan's end
    deleted: dict[int, int]  # level -> rows
    words_indexed: int


# -- one node ----------------------------------------------------------------------------------------
def _baseline(
    r: redis.Redis, node_pk: int, committed_ts: float | None
) -> tuple[dict[bytes, bytes] | None, int | None, mirroring.MirrorBaseline | None]:
    """(previous counters of this node or None when there are none we can trust, ProxySQL's uptime then,
    the previous poll's mirror counters or None)."""
    stored = cast(dict[bytes, bytes], r.hgetall(baseline_key(node_pk)))  # the client answers bytes (live.client())
    meta = stored.pop(META_FIELD, b"").split()
    mirror_before = stored.pop(MIRROR_FIELD, None)
    if len(meta) != 2 or committed_ts is None:
        return None, None, None
    try:
        ts, uptime = float(meta[0]), int(meta[1])
    except ValueError:
        return None, None, None
    if abs(ts - committed_ts) > 1e-3:
        return None, None, None  # Redis and the database disagree about the last poll: start again
    return stored, uptime, (mirroring.decode(mirror_before) if mirror_before is not None else None)


def _stats(admin: ProxySQLAdmin) -> tuple[dict[str, Any], int]:
    """(stats_mysql_global, ProxySQL_Uptime or -1 when not told: rely on the per-row checks alone)."""
    stats = admin.stats_global()
    uptime = stats.get("ProxySQL_Uptime")
    try:
        return stats, int(uptime) if uptime is not None else -1
    except ValueError:
        return stats, -1


CHUNK = 900  # ids per IN (...) or rows per INSERT: under SQLite's 999 variables, fine for MariaDB


def _unknown_digests(hashes: Iterable[str]) -> set[str]:
    """Hashes not stored yet (the process cache first, then the database)."""
    missing = [h for h in hashes if h not in _digest_ids]
    table = Digest._meta.db_table
    with connection.cursor() as cur:
        for i in range(0, len(missing), CHUNK):
            chunk = missing[i : i + CHUNK]
            cur.execute(f"SELECT digest, id FROM {table} WHERE digest IN ({','.join(['%s'] * len(chunk))})", chunk)
            _digest_ids.update(cur.fetchall())
    return {h for h in missing if h not in _digest_ids}


def poll_node(node: ProxySQLNode, state: DigestNodeState | None, ts: int) -> NodeResult:
    """Read one node and compute its deltas (network, Redis and a read of known digests; no writes)."""
    return poll_endpoint([(node, state, ts)])[0]


def poll_endpoint(rows: Sequence[EndpointRow]) -> list[NodeResult]:
    """Read one ProxySQL once for its node rows [(node, state, ts)] (several when it serves several clusters)
    and compute each row's deltas against its own baseline. One NodeResult per row, in order."""
    started = time.monotonic()
    results = [NodeResult(node=node, ts=ts) for node, _, ts in rows]
    try:
        r = live.client()
        baselines = [_baseline(r, node.pk, state.baseline_ts if state else None) for node, state, _ in rows]
        admin = _admin(rows[0][0])
        stats, uptime = _stats(admin)
        mirror = mirroring.read(admin, stats)
        digest_rows = admin.query_digest(timeout=settings.MONITOR_DIGEST_READ_TIMEOUT)
        unknown = set()
        for result, (baseline, uptime_then, mirror_before) in zip(results, baselines):
            result.uptime, result.mirror, result.rows = uptime, mirror, len(digest_rows)
            restarted = baseline is not None and uptime_then is not None and 0 <= uptime < uptime_then
            # After a restart every counter is younger than the previous poll: all of it is this interval's.
            result.outcome = deltas_mod.compute(digest_rows, {} if restarted else baseline)
            if restarted:
                result.outcome.resets = len(digest_rows)
            else:
                result.mirror_before = mirror_before
            unknown |= _unknown_digests({d.digest for d in result.outcome.deltas})
        if unknown:
            texts = admin.query_digest_texts(
                None if len(unknown) > FULL_TEXT_READ_OVER else unknown, timeout=settings.MONITOR_DIGEST_READ_TIMEOUT
            )
            for result in results:
                result.texts = texts
        running = _running_queries(admin)
        for result in results:
            result.running = running
    except (ClientError, redis.RedisError) as exc:
        for result in results:
            result.error = exc
    except Exception as exc:  # a bug or an answer we cannot read: this ProxySQL only, never the round
        log.exception("digest poll of ProxySQL node %s failed", rows[0][0].pk)
        for result in results:
            result.error = exc
    for result in results:
        result.seconds = time.monotonic() - started
    return results


def _running_queries(admin: ProxySQLAdmin) -> list[RunningQuery]:
    """The queries running now (examples.py); a node that refuses the read loses its examples, not its poll."""
    try:
        return admin.running_queries(examples.READ_LIMIT)
    except ClientError as exc:
        log.info("running queries of %s not read: %s", admin.name, exc)
        return []


# -- storage -----------------------------------------------------------------------------------------
def _digest_id_map(hashes: set[str], texts: Mapping[str, str], ts: int) -> dict[str, int]:
    missing = _unknown_digests(hashes)
    if missing:
        # Plain executemany (the ORM's bulk_create costs ~10x in Python for 100,000 new digests); another
        # worker may insert the same digest meanwhile: ignored, then read back.
        insert = connection.ops.insert_statement(on_conflict=OnConflict.IGNORE)
        rows = [(h, (texts.get(h) or "").replace("\x00", ""), ts) for h in sorted(missing)]
        with transaction.atomic(), connection.cursor() as cur:
            for i in range(0, len(rows), CHUNK):
                cur.executemany(
                    f"{insert} {Digest._meta.db_table} (digest, digest_text, first_polled_at) VALUES (%s, %s, %s)",
                    rows[i : i + CHUNK],
                )
        _unknown_digests(missing)
    return _digest_ids


def _source_id_map(node_pk: int, keys: set[SourceKey]) -> dict[NodeSourceKey, int]:
    wanted = {(node_pk, *k) for k in keys}
    if wanted - _source_ids.keys():

        def load() -> None:
            for pk, hg, schema, user, client in DigestSource.objects.filter(node_id=node_pk).values_list(
                "pk", "hostgroup", "schemaname", "username", "client_address"
            ):
                _source_ids[(node_pk, hg, schema, user, client)] = pk

        load()
        missing = wanted - _source_ids.keys()
        if missing:
            DigestSource.objects.bulk_create(
                [
                    DigestSource(node_id=node_pk, hostgroup=hg, schemaname=schema, username=user, client_address=client)
                    for _, hg, schema, user, client in missing
                ],
                ignore_conflicts=True,
            )
            load()
    return _source_ids


def _source_key(d: deltas_mod.Delta) -> SourceKey:
    # Column widths of DigestSource; ProxySQL's own limits are narrower (identifiers, user names, IPs).
    return (d.hostgroup, d.schemaname[:64], d.username[:80], d.client_address[:64])


def store(result: NodeResult, state: DigestNodeState | None, scope: pollers.Scope | None = None) -> DigestNodeState:
    """Write one node's poll. Returns the DigestNodeState row. Raises on a database error. With a scope (the
    ProxySQL serves several clusters: monitoring.pollers.Scope), only the digests that ran in this cluster's
    hostgroups are stored under this node row: each digest row is stored once, under the cluster it ran for."""
    node, ts = result.node, result.ts
    state = state or DigestNodeState(node_id=node.pk)
    state.last_poll_ts = ts
    if result.error is not None:
        exc = result.error
        failing_already = bool(state.error)
        state.error = str(exc)[:2000] or exc.__class__.__name__
        state.error_kind = getattr(exc, "kind", "error")
        state.error_since = state.error_since if failing_already and state.error_since else ts
        with transaction.atomic():
            DigestPoll.objects.create(resolution=RAW, ts=ts, node_id=node.pk, polls_failed=1)
            state.save()
        return state

    outcome, mirror_read = result.outcome, result.mirror
    assert outcome is not None and mirror_read is not None, "a poll without an error read both"
    deltas = [d for d in outcome.deltas if scope is None or scope.keeps(d.hostgroup)]
    spent = mirror.Spent()  # one MIRROR_POLL_BUDGET_S for the poll's mirror rule searches: the marks and the loss
    objs = []
    if deltas:
        # Texts and sources are committed on their own (idempotent), so the cached ids always exist.
        digest_ids = _digest_id_map({d.digest for d in deltas}, result.texts, ts)
        source_ids = _source_id_map(node.pk, {_source_key(d) for d in deltas})
        copies = mirroring.mark_copies(mirror_read["rules"], deltas, result.texts, spent)
        objs = [
            (
                RAW,
                ts,
                source_ids[(node.pk, *_source_key(d))],
                digest_ids[d.digest],
                d.count_star,
                d.sum_time,
                d.min_time,
                d.max_time,
                d.rows_sent,
                d.rows_affected,
                copy,
            )
            for d, copy in zip(deltas, copies)
        ]
    state_baseline = state.baseline_ts or ts
    mirror_rows: list[MirrorRuleSample] = []
    if result.mirror_before is not None and not outcome.full:
        _, mirror_rows = mirroring.sample_rows(
            node.pk, ts, ts - state_baseline, mirror_read, result.mirror_before, outcome.deltas, result.texts, spent
        )
    state.baseline_ts = ts
    state.last_ok_ts = ts
    state.digests, state.changed, state.resets = result.rows, len(objs), outcome.resets
    state.seconds = result.seconds
    state.error, state.error_kind, state.error_since = "", "", None
    with transaction.atomic():
        with connection.cursor() as cur:
            for i in range(0, len(objs), CHUNK):
                cur.executemany(
                    f"INSERT INTO {DigestStat._meta.db_table} (resolution, ts, source_id, digest_id,"
                    f" count_star, sum_time, min_time, max_time, rows_sent, rows_affected, mirrored)"
                    f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    objs[i : i + CHUNK],
                )
        DigestPoll.objects.create(
            resolution=RAW,
            ts=ts,
            node_id=node.pk,
            polls_ok=0 if outcome.full else 1,
            stat_rows=len(objs),
            interval_s=0 if outcome.full else ts - state_baseline,
            copy_rows=sum(1 for row in objs if row[-1] is not False),
        )  # copies, or not known
        mirroring.store_samples(mirror_rows)
        mirroring.sync_rules(node.pk, mirror_read["rules"])
        state.save()
    return state


def _write_baseline(r: redis.Redis, result: NodeResult) -> None:
    outcome, key = result.outcome, baseline_key(result.node.pk)
    assert outcome is not None and result.mirror is not None, "written after a poll without an error (it read both)"
    pipe = r.pipeline(transaction=True)
    if outcome.full:
        pipe.delete(key)
    items = list(outcome.changed.items())
    for i in range(0, len(items), 10000):
        pipe.hset(key, mapping=dict(items[i : i + 10000]))
    for i in range(0, len(outcome.removed), 10000):
        pipe.hdel(key, *outcome.removed[i : i + 10000])
    pipe.hset(key, META_FIELD, f"{float(result.ts)!r} {result.uptime}")
    pipe.hset(key, MIRROR_FIELD, mirroring.encode(result.mirror))
    pipe.expire(key, BASELINE_TTL_S)
    pipe.execute()


# -- rounds ------------------------------------------------------------------------------------------
def poll_round(nodes: Sequence[ProxySQLNode], *, now: float | None = None, threads: int | None = None) -> RoundSummary:
    """Poll these nodes' digests concurrently and store them. Returns a summary."""
    started = time.monotonic()
    now = now or time.time()
    nodes = with_clusters(nodes)  # their TLS setting read here, not on the threads
    states = {s.node_id: s for s in DigestNodeState.objects.filter(node_id__in=[n.pk for n in nodes])}

    def ts_for(node: ProxySQLNode) -> int:
        # Poller clock, whole seconds; strictly after the node's previous poll so rows never collide.
        last = states[node.pk].last_poll_ts if node.pk in states else None
        return int(now) if last is None or int(now) > int(last) else int(last) + 1

    by_endpoint: dict[Any, list[EndpointRow]] = {}  # a ProxySQL serving several clusters is read once for all its rows
    for node in nodes:
        by_endpoint.setdefault(node.endpoint, []).append((node, states.get(node.pk), ts_for(node)))

    def one(rows: list[EndpointRow]) -> list[NodeResult]:
        try:
            return poll_endpoint(rows)
        finally:
            close_old_connections()  # threads must not keep database connections open

    workers = min(threads or settings.MONITOR_THREADS, len(by_endpoint)) if nodes else 0
    if workers <= 1:
        results = [result for rows in by_endpoint.values() for result in poll_endpoint(rows)]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = [result for done in pool.map(one, by_endpoint.values()) for result in done]

    r = live.client()
    scopes = pollers.shared_scopes(nodes)
    written = failed = 0
    for result in results:
        try:
            store(result, states.get(result.node.pk), scopes.get(result.node.pk))
        except Exception as exc:
            log.exception("storing the digest poll of ProxySQL node %s failed", result.node.pk)
            result.error = result.error or exc
            try:  # say so for this node, from its state as committed (the failed write changed nothing)
                store(
                    NodeResult(node=result.node, ts=result.ts, error=exc),
                    DigestNodeState.objects.filter(node_id=result.node.pk).first(),
                )
            except Exception:
                log.exception("recording the failure of node %s failed too", result.node.pk)
        if result.error is not None:
            failed += 1
            continue
        written += result.outcome and len(result.outcome.deltas) or 0  # as read (a shared ProxySQL's rows: each)
        try:
            _write_baseline(r, result)
        except redis.RedisError as exc:
            # The next poll sees Redis and the database disagree and starts from a fresh baseline.
            log.warning("digest baseline of node %s not written: %s", result.node.pk, exc)
        try:
            scope = scopes.get(result.node.pk)
            examples.record(r, result.node, result.running, result.ts, scope.keeps if scope else None)
        except redis.RedisError as exc:
            log.warning("example queries of node %s not kept: %s", result.node.pk, exc)
    return {"polled": len(nodes), "failed": failed, "rows": written, "seconds": round(time.monotonic() - started, 3)}


def nodes_for_shard(shard: int, shards: int) -> list[ProxySQLNode]:
    """The shard's node rows, as the monitoring rounds deal them (every row of one ProxySQL in one shard)."""
    mine = {pk for pk, (of, _) in pollers.proxysql_shards(shards).items() if of == shard}
    return [n for n in ProxySQLNode.objects.select_related("cluster").order_by("pk") if n.pk in mine]


def run_shard(shard: int, shards: int | None = None, now: float | None = None) -> ShardSummary:
    """One beat tick for one shard: poll its nodes whose digest interval has passed."""
    shards = shards or settings.MONITOR_SHARDS
    r = live.client()
    now = now or time.time()
    # The monitoring rounds' lease (1 s, renewed while the round runs): a worker that dies frees the shard
    # for the next tick on another host at once, where a lock had to outlive the longest round.
    lease = leases.ShardLease(r, "digest", shard)
    try:
        if not lease.acquire(now):
            skipped = r.hincrby("digest-poll-skipped", shard, 1)
            log.warning("digest shard %s: previous round still running; tick skipped (%s so far)", shard, skipped)
            return {"skipped": True, "skipped_total": skipped}
    except redis.RedisError as exc:
        log.warning("digest shard %s: Redis unavailable, round skipped: %s", shard, exc)
        return {"skipped": True, "error": str(exc)}
    try:
        nodes = nodes_for_shard(shard, shards)
        last = r.hmget("digest-poll-started", [n.pk for n in nodes]) if nodes else []
        interval = settings.MONITOR_DIGEST_INTERVAL_S
        due = [
            n
            for n, started in zip(nodes, last)
            if started is None or now - float(started) >= interval - TICK_TOLERANCE_S
        ]
        if not due:
            return {"polled": 0}
        r.hset("digest-poll-started", mapping={n.pk: now for n in due})
        summary = poll_round(due, now=now)
        log.info("digest shard %s: %s", shard, summary)
        return {**summary, "nodes": [n.pk for n in due]}  # for the alert rules read after the round
    finally:
        try:
            lease.release()
        except redis.RedisError:
            pass


# -- rollups and retention ---------------------------------------------------------------------------
SOURCE_LEVEL = {FIVE_MINUTES: RAW, HOUR: FIVE_MINUTES, DAY: HOUR}


def _epoch(dt: datetime | None) -> int | None:
    return None if dt is None else int(dt.timestamp())


def _mark_name(level: int) -> str:
    return f"digests:{level}"


def rolled_until() -> dict[int, int | None]:
    """{level: epoch seconds before which that level's buckets are complete} (None: nothing yet)."""
    marks = dict(
        RollupMark.objects.filter(name__in=[_mark_name(lv) for lv in LEVELS]).values_list("name", "rolled_until")
    )
    return {lv: _epoch(marks.get(_mark_name(lv))) for lv in LEVELS}


def rollup_margin_s() -> int:
    # A raw row's ts is its poll's start; it lands up to one read timeout plus the write later.
    return int(settings.MONITOR_DIGEST_READ_TIMEOUT + 60)


# A bucket's row of a (source, digest) is copies when any of its rows was (a mirror rule's copies do not turn into the
# application's queries within a bucket; a rule changed mid-bucket is rare), not known when one was not known.
BUCKET_MIRRORED = "CASE WHEN MAX(mirrored) = 1 THEN 1 WHEN COUNT(mirrored) < COUNT(*) THEN NULL ELSE 0 END"


def _roll_bucket(level: int, source: int, start: int, stop: int) -> int:
    stat, poll = DigestStat._meta.db_table, DigestPoll._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {stat} (resolution, ts, source_id, digest_id, count_star, sum_time, min_time, max_time,"
            f" rows_sent, rows_affected, mirrored) SELECT %s, %s, source_id, digest_id, SUM(count_star), SUM(sum_time),"
            f" MIN(min_time), MAX(max_time), SUM(rows_sent), SUM(rows_affected), {BUCKET_MIRRORED}"
            f" FROM {stat} WHERE resolution = %s AND ts >= %s AND ts < %s GROUP BY source_id, digest_id",
            [level, start, source, start, stop],
        )
        rows = cur.rowcount
        cur.execute(
            f"INSERT INTO {poll} (resolution, ts, node_id, polls_ok, polls_failed, stat_rows, interval_s, copy_rows)"
            f" SELECT %s, %s, node_id, SUM(polls_ok), SUM(polls_failed), SUM(stat_rows), SUM(interval_s),"
            f" SUM(copy_rows) FROM {poll} WHERE resolution = %s AND ts >= %s AND ts < %s GROUP BY node_id",
            [level, start, source, start, stop],
        )
    return max(rows, 0)


def rollup(level: int, now: float | None = None, max_buckets: int = 500) -> int:
    """Aggregate the complete `level`-second buckets of the finer level. Returns rows written."""
    now = int(now or time.time())
    source = SOURCE_LEVEL[level]
    name = _mark_name(level)
    mark, _ = RollupMark.objects.get_or_create(name=name)
    if source == RAW:
        end = (now - rollup_margin_s()) // level * level
    else:
        source_done = _epoch(
            RollupMark.objects.filter(name=_mark_name(source)).values_list("rolled_until", flat=True).first()
        )
        if source_done is None:
            return 0
        end = source_done // level * level
    start = _epoch(mark.rolled_until)
    written = buckets = 0
    while buckets < max_buckets:
        if (
            start is None
            or not DigestPoll.objects.filter(resolution=source, ts__gte=start, ts__lt=start + level).exists()
        ):
            # Jump over empty stretches (the poller was stopped) to the next bucket with data.
            nxt = (
                DigestPoll.objects.filter(resolution=source, **({"ts__gte": start} if start is not None else {}))
                .order_by("ts")
                .values_list("ts", flat=True)
                .first()
            )
            start = end if nxt is None or nxt >= end else nxt // level * level
        if start >= end:
            break
        stop = start + level
        with transaction.atomic():
            written += _roll_bucket(level, source, start, stop)
            RollupMark.objects.filter(name=name).update(rolled_until=datetime.fromtimestamp(stop, tz=timezone.utc))
        start = stop
        buckets += 1
    marked = _epoch(mark.rolled_until)
    if start is not None and start >= end and (marked is None or end > marked):
        RollupMark.objects.filter(name=name).update(rolled_until=datetime.fromtimestamp(end, tz=timezone.utc))
    return written


def retention_s() -> dict[int, float]:
    raw = settings.MONITOR_RETENTION_RAW_H * 3600
    minute = settings.MONITOR_RETENTION_MINUTE_D * 86400
    hour = settings.MONITOR_RETENTION_HOUR_D * 86400
    return {RAW: raw, FIVE_MINUTES: minute, HOUR: hour, DAY: hour}


PRUNE_SLICE_S = {RAW: 3600, FIVE_MINUTES: 6 * 3600, HOUR: 5 * 86400, DAY: 120 * 86400}


def prune(now: float | None = None) -> dict[int, int]:
    """Delete rows past their level's retention, never rows a coarser level has not rolled up yet.
    Each run deletes at most one slice per level (bounded work after a long pause)."""
    now = int(now or time.time())
    marks = rolled_until()
    coarser = {RAW: FIVE_MINUTES, FIVE_MINUTES: HOUR, HOUR: DAY, DAY: None}
    deleted = {}
    for level, keep in retention_s().items():
        cutoff = int(now - keep)
        rolled_into = coarser[level]
        if rolled_into is not None:
            cutoff = min(cutoff, marks[rolled_into] or 0)
        oldest = DigestPoll.objects.filter(resolution=level).order_by("ts").values_list("ts", flat=True).first()
        if oldest is None:
            oldest = DigestStat.objects.filter(resolution=level).order_by("ts").values_list("ts", flat=True).first()
        if oldest is None or oldest >= cutoff:
            deleted[level] = 0
            continue
        limit = min(cutoff, oldest + PRUNE_SLICE_S[level])
        count, _ = DigestStat.objects.filter(resolution=level, ts__lt=limit).delete()
        DigestPoll.objects.filter(resolution=level, ts__lt=limit).delete()
        deleted[level] = count
    return deleted


def refresh_span(now: float | None = None) -> int | None:
    """Write the DigestSpan ending at the last complete hour, if not there yet; drop older ones (the
    previous stays an hour, for pages that chose it a moment ago). Returns its end (or None)."""
    end = rolled_until()[HOUR]
    if end is None:
        return None
    end = end // HOUR * HOUR
    span, stat = DigestSpan._meta.db_table, DigestStat._meta.db_table
    if not DigestSpan.objects.filter(end_ts=end).exists():
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                f"INSERT INTO {span} (end_ts, digest_id, count_star, sum_time, avg_time, max_time, min_time)"
                f" SELECT %s, digest_id, SUM(count_star), SUM(sum_time), SUM(sum_time) * 1e0 / SUM(count_star),"
                f" MAX(max_time), MIN(min_time) FROM {stat} WHERE resolution = %s AND ts >= %s AND ts < %s"
                f" GROUP BY digest_id",
                [end, HOUR, end - SPAN_S, end],
            )
            # An empty span is a span too: a marker row is not needed, its absence of rows is exact.
    DigestSpan.objects.filter(end_ts__lt=end - HOUR).delete()
    return end


def rollup_and_prune(now: float | None = None) -> RollupSummary:
    written = {level: rollup(level, now) for level in LEVELS}
    return {"written": written, "span": refresh_span(now), "deleted": prune(now), "words_indexed": search.index_words()}
