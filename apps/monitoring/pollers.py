"""Polling rounds. A round takes the due nodes of one shard, polls them concurrently (each call bounded
by the clients' sub-second timeouts, so a hanging node costs one thread for one timeout, not the round),
writes the latest state to Redis as each poll finishes and the history to the database once per round.

Rates come from counter deltas against the previous poll (kept in the latest-state document). A counter
that went down (a stats reset, a ProxySQL restart: ProxySQL_Uptime went down) gives no rate for that
interval rather than a negative or doubled one.

At fleet scale (1,000 nodes at 5 s: 200 polls and ~2,000 history rows a second) the round's own work
must stay small beside the network: the shard's targets are listed by one narrow query without
decrypting credentials (a credential is decrypted only when a connection is opened), history rows are
plain tuples inserted with one executemany per table in one transaction, and latest-state documents are
written in small batches as polls complete (`bin/bench-monitoring` measures all of this).
"""

import hashlib
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import ExpressionWrapper, F, TextField

from apps.clients.backend import BackendClient
from apps.clients.proxysql import CLUSTER_VARIABLES, ProxySQLAdmin, configured
from apps.clients.wire import ClientError
from apps.fleet import secrets
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server, endpoint_key

from . import live
from . import pool as pool_history
from . import proxysql_cluster, query_stats
from .models import BackendSample, PoolSnapshot, ProxySQLSample

log = logging.getLogger(__name__)

MIRROR_VARIABLES = ("mysql-mirror_max_concurrency", "mysql-mirror_max_queue_length", "mysql-threads")
# The node's ProxySQL version, read with the variables (the pages show it, clients/proxysql_versions.py says what it supports).
VERSION_VARIABLE = "admin-version"
# stats_mysql_global counters turned into per-second rates, and gauges kept as they are.
GLOBAL_COUNTERS = {
    "Questions": "questions_ps",
    "Slow_queries": "slow_queries_ps",
    "Com_frontend_stmt_execute": "prepared_ps",
    "Client_Connections_created": "client_connections_created_ps",
    "Client_Connections_aborted": "client_connections_aborted_ps",
    "Server_Connections_aborted": "server_connections_aborted_ps",
}
GLOBAL_GAUGES = {
    "Client_Connections_connected": "client_connections_connected",
    "Server_Connections_connected": "server_connections_connected",
    "Active_Transactions": "active_transactions",
    "Mirror_concurrency": "mirror_concurrency",
    "Mirror_queue_length": "mirror_queue_length",
}
POOL_COUNTERS = {
    "ConnERR": "conn_err_ps",
    "Queries": "queries_ps",
    "Bytes_data_sent": "bytes_sent_ps",
    "Bytes_data_recv": "bytes_recv_ps",
}
# While a round runs, the documents of the polls finished so far are written at least this often: a
# node that hangs until its timeout delays its own document only.
PUBLISH_EVERY_S = 0.05
# What the alert rules read beside the figures (apps/alerts/conditions.py):
POLL_USUAL_TAU_S = 3600.0  # a node's usual poll time: an average over about an hour
STATUS_CHANGES_KEEP_S = 1800  # when each runtime row's status changed, for this long (flapping)
FC_MARK_EVERY_S = 10.0  # flow control: a reading of the paused-ns counter kept this often...
FC_MARKS_KEEP_S = 660.0  # ...for this long (the rule's window is at most 10 minutes)
# Memory and disk mysql_servers are read with the variables (MONITOR_VARIABLES_INTERVAL_S), and at every poll for
# this long after the runtime's configuration changed: an operation's LOAD is followed by its SAVE, and the
# restart_drift rule must not judge a disk read before that SAVE once the operation's hold is over.
LAYERS_AFTER_CHANGE_S = 30.0

# Per worker process: one open connection per node, reused across rounds (reconnects on failure).
_connections = {}


def _cached(kind, obj, factory, fingerprint):
    entry = _connections.get((kind, obj.pk))
    if entry and entry[0] == fingerprint:
        return entry[1]
    if entry:
        entry[1].close()
    client = factory(obj)
    _connections[(kind, obj.pk)] = (fingerprint, client)
    return client


def _decrypt_deferred(obj, field, token):
    """Give a model loaded by a shard query its plain credential, only when a connection is opened."""
    if token is not None and field in obj.get_deferred_fields():
        setattr(obj, field, secrets.decrypt(token))


def _proxysql_admin(node):
    # The fingerprint holds the stored token when the shard query loaded one (see *_for_shard), else the
    # plain password of a model the caller loaded: a changed credential opens a new connection either way.
    token = getattr(node, "admin_password_stored", None)

    def connect(n):
        _decrypt_deferred(n, "admin_password", token)
        return ProxySQLAdmin.for_node(n)

    # The cluster's TLS setting too: a changed CA or verify opens a new connection at the next poll.
    return _cached(
        live.PROXYSQL,
        node,
        connect,
        (
            node.admin_host,
            node.admin_port,
            node.admin_user,
            node.admin_password if token is None else token,
            node.cluster.tls_ca,
            node.cluster.tls_verify,
        ),
    )


def _backend_client(server):
    cluster = server.cluster
    token = getattr(server, "monitor_password_stored", None)

    def connect(s):
        _decrypt_deferred(cluster, "monitor_password", token)
        return BackendClient.for_server(s)

    # The credential hosts too: a host an admin no longer allows loses its open connection at the next poll.
    return _cached(
        live.BACKEND,
        server,
        connect,
        (
            server.hostname,
            server.port,
            cluster.monitor_user,
            cluster.monitor_password if token is None else token,
            cluster.credential_hosts,
            cluster.tls_ca,
            cluster.tls_verify,
        ),
    )


def _rate(current, previous, dt):
    if current is None or previous is None or dt <= 0 or current < previous:
        return None
    return (current - previous) / dt


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _now():
    return time.time()


def _dt(ts):
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def _failure(prev, exc, ts):
    """The latest-state document of a failed poll: the error, since when, and the last good figures."""
    doc = dict(prev or {})
    failing_already = prev is not None and not prev.get("ok", True)
    doc.update(
        ts=ts,
        ok=False,
        error=str(exc),
        error_kind=getattr(exc, "kind", "error"),
        error_since=(prev.get("error_since") if failing_already else ts),
    )
    return doc


# -- history rows ----------------------------------------------------------------------------------
class _Table:
    """Rows of one sample table as plain tuples in column order, inserted with one executemany.

    ORM bulk_create prepares every field of every model instance (~60 us a row); at ~2,000 rows a second
    that was the largest share of a worker's CPU. Values here are already what the column stores, except
    datetimes, adapted once per distinct value (a round's rows share one timestamp).
    """

    def __init__(self, model):
        fields = [f for f in model._meta.concrete_fields if not f.primary_key]
        self.model = model
        self.attnames = [f.attname for f in fields]
        self.columns = [f.column for f in fields]
        self.defaults = [f.get_default() for f in fields]  # RAW resolution, reachable=True, None elsewhere
        self.datetimes = [i for i, f in enumerate(fields) if f.get_internal_type() == "DateTimeField"]

    def row(self, **values):
        unknown = values.keys() - set(self.attnames)
        if unknown:
            raise TypeError(f"{self.model.__name__} has no field {sorted(unknown)}")
        return tuple(values.get(a, d) for a, d in zip(self.attnames, self.defaults))

    def insert(self, rows):
        if not rows:
            return
        ops = connection.ops
        if self.datetimes:
            adapted = {}
            rows = [list(r) for r in rows]
            for r in rows:
                for i in self.datetimes:
                    v = r[i]
                    if v is not None:
                        if v not in adapted:
                            adapted[v] = ops.adapt_datetimefield_value(v)
                        r[i] = adapted[v]
        sql = (
            f"INSERT INTO {ops.quote_name(self.model._meta.db_table)} "
            f"({', '.join(ops.quote_name(c) for c in self.columns)}) VALUES ({', '.join(['%s'] * len(self.columns))})"
        )
        with connection.cursor() as cursor:
            cursor.executemany(sql, rows)


_tables = {}


def _table(model):
    if model not in _tables:
        _tables[model] = _Table(model)
    return _tables[model]


def _insert_history(*batches):
    """(model, rows) pairs, in one transaction: one commit per round."""
    with transaction.atomic():
        for model, rows in batches:
            _table(model).insert(rows)


# -- ProxySQL --------------------------------------------------------------------------------------
@dataclass
class ProxySQLReading:
    """What one poll reads from a ProxySQL admin endpoint (variables, memory, disk: None when not read this time)."""

    pool: list
    stats: dict
    runtime: list
    variables: dict | None
    memory: list | None = None  # mysql_servers rows
    disk: list | None = None  # disk.mysql_servers rows
    runtime_fp: str = ""  # runtime_fingerprint(runtime)
    # ProxySQL Cluster: admin-cluster_* variables and proxysql_servers (read with the variables), the node's own
    # checksums and what it read from its peers (every poll while it is in a cluster); None when not read
    cluster_settings: dict | None = None
    peers: list | None = None
    checksums: list | None = None
    peer_checksums: list | None = None
    query_stats: dict | None = None  # query_stats.read(): every MONITOR_QUERY_STATS_INTERVAL_S, else None


@dataclass
class Scope:
    """What one cluster's node row takes of a ProxySQL that serves several clusters: the pool and runtime rows
    of its own hostgroups (the endpoint's first row also those no cluster owns, so none is dropped)."""

    hostgroups: frozenset
    unowned_too: bool
    owned_by_any: frozenset
    shared_with: list

    def keeps(self, hostgroup):
        return hostgroup in self.hostgroups or (self.unowned_too and hostgroup not in self.owned_by_any)


def read_proxysql(node, want_variables, prevs=(), ts=None):
    """One read of a ProxySQL; memory and disk mysql_servers with the variables, or when a previous document
    (`prevs`: of the rows read from this ProxySQL) says its runtime changed lately (_wants_layers)."""
    admin = _proxysql_admin(node)
    pool, stats, runtime = admin.connection_pool(), admin.stats_global(), admin.servers("runtime")
    fp = runtime_fingerprint(runtime)
    # A restart may be an upgrade: the version (admin-version) and the variables are read again at the first poll
    # after it, not up to MONITOR_VARIABLES_INTERVAL_S later; between restarts a version cannot change.
    want_variables = want_variables or any(_restarted(prev, stats) for prev in prevs)
    layers = want_variables or any(_wants_layers(prev, fp, ts) for prev in prevs)
    variables = cluster_settings = peers = None
    if want_variables:
        read = admin.global_variables(MIRROR_VARIABLES + CLUSTER_VARIABLES + (VERSION_VARIABLE,))
        variables = {k: v for k, v in read.items() if k in MIRROR_VARIABLES or k == VERSION_VARIABLE}
        cluster_settings = {k: v for k, v in read.items() if k in CLUSTER_VARIABLES}
        peers = [(p.hostname, p.port) for p in admin.proxysql_servers()]
        clustered = bool(cluster_settings.get("admin-cluster_username")) and bool(peers)
    else:
        clustered = any(proxysql_cluster.configured((prev or {}).get("proxysql_cluster")) for prev in prevs)
    return ProxySQLReading(
        pool=pool,
        stats=stats,
        runtime=runtime,
        variables=variables,
        memory=admin.servers("memory") if layers else None,
        disk=admin.servers("disk") if layers else None,
        runtime_fp=fp,
        cluster_settings=cluster_settings,
        peers=peers,
        checksums=admin.checksums() if clustered else None,
        peer_checksums=admin.peer_checksums() if clustered else None,
        query_stats=query_stats.read(admin, ts) if query_stats.wanted(prevs, ts) else None,
    )


def runtime_fingerprint(rows):
    """A short digest of the runtime's configuration (ProxySQL's own SHUNNED reads as ONLINE: no read for it)."""
    digest = hashlib.blake2b(digest_size=8)
    for r in rows:
        digest.update(repr((r.hostgroup_id, r.hostname, r.port, *configured(r).values())).encode())
    return digest.hexdigest()


def _restarted(prev, stats):
    """Has the node restarted since the previous document (its uptime went down)?"""
    uptime, before = _int(stats.get("ProxySQL_Uptime")), (prev or {}).get("uptime")
    return uptime is not None and before is not None and uptime < before


def _wants_variables(prev, ts):
    return (
        not prev
        or not prev.get("variables")
        or ts - prev.get("variables_ts", 0) >= settings.MONITOR_VARIABLES_INTERVAL_S
    )


def _wants_layers(prev, runtime_fp, ts):
    if not prev or "disk_servers" not in prev:
        return True
    return prev.get("runtime_fp") != runtime_fp or (ts or 0) - prev.get("runtime_changed_ts", 0) < LAYERS_AFTER_CHANGE_S


def poll_proxysql(node, prev, ts, want_variables, scope=None):
    """Poll one ProxySQL node. Returns (latest doc, ProxySQLSample row (a tuple), pool rows for its
    PoolSnapshot: [((hostgroup, host, port), status, {figure: value})])."""
    reading = read_proxysql(node, want_variables or not (prev or {}).get("variables"), [prev], ts)
    return proxysql_result(node, prev, ts, reading, scope)


def proxysql_result(node, prev, ts, reading, scope=None):
    """One node row's document, sample and pool rows from a reading (pure). With a scope (the ProxySQL serves
    several clusters), the pool and runtime rows are this cluster's hostgroups only, and so are the figures
    summed from the pool (conn_used, conn_free, conn_err_ps); the others are the ProxySQL's own (node-wide)."""
    if reading.variables is not None:
        variables, variables_ts = reading.variables, ts
    else:
        variables, variables_ts = (prev or {}).get("variables") or {}, (prev or {}).get("variables_ts", ts)
    stats = reading.stats
    pool = [r for r in reading.pool if scope is None or scope.keeps(r.hostgroup)]
    runtime = [r for r in reading.runtime if scope is None or scope.keeps(r.hostgroup_id)]
    layers = _layers(prev, ts, reading, scope)

    prev_ok = prev if prev and prev.get("counters") else None
    dt = ts - prev_ok["counters_ts"] if prev_ok else 0
    counters = {name: _int(stats.get(name)) for name in GLOBAL_COUNTERS}
    uptime = _int(stats.get("ProxySQL_Uptime"))
    restarted = prev_ok is not None and _restarted(prev_ok, stats)
    rates = {
        field: (None if restarted or not prev_ok else _rate(counters[name], prev_ok["counters"].get(name), dt))
        for name, field in GLOBAL_COUNTERS.items()
    }
    gauges = {field: _int(stats.get(name)) for name, field in GLOBAL_GAUGES.items()}

    when = _dt(ts)
    prev_pool = {tuple(r["key"]): r for r in (prev_ok or {}).get("pool", [])} if not restarted else {}
    pool_rows, pool_samples = [], []
    for row in pool:
        k = [row.hostgroup, row.srv_host, row.srv_port]
        counters_row = {name: getattr(row, name) for name in POOL_COUNTERS}
        before = prev_pool.get(tuple(k), {}).get("counters", {})
        row_rates = {
            field: (_rate(counters_row[name], before.get(name), dt) if before else None)
            for name, field in POOL_COUNTERS.items()
        }
        pool_rows.append(
            {
                "key": k,
                "status": row.status,
                "conn_used": row.ConnUsed,
                "conn_free": row.ConnFree,
                "latency_us": row.Latency_us,
                "counters": counters_row,
                **row_rates,
            }
        )
        pool_samples.append(
            (
                tuple(k),
                row.status,
                {"conn_used": row.ConnUsed, "conn_free": row.ConnFree, "latency_us": row.Latency_us, **row_rates},
            )
        )
    conn_err_rates = [r["conn_err_ps"] for r in pool_rows if r["conn_err_ps"] is not None]
    limits = {
        "mirror_max_concurrency": _int(variables.get("mysql-mirror_max_concurrency")),
        "mirror_max_queue_length": _int(variables.get("mysql-mirror_max_queue_length")),
        "mysql_threads": _int(variables.get("mysql-threads")),
    }
    figures = {
        **rates,
        **gauges,
        **limits,
        "conn_used": sum(r["conn_used"] for r in pool_rows),
        "conn_free": sum(r["conn_free"] for r in pool_rows),
        "conn_err_ps": sum(conn_err_rates) if conn_err_rates else None,
    }
    sample = _table(ProxySQLSample).row(node_id=node.pk, ts=when, **figures)
    runtime_rows = [r.__dict__ for r in runtime]
    doc = {
        "ts": ts,
        "ok": True,
        "error": None,
        "error_since": None,
        "last_ok": ts,
        "uptime": uptime,
        "counters": counters,
        "counters_ts": ts,
        "figures": figures,
        "pool": pool_rows,
        "runtime_servers": runtime_rows,
        "variables": variables,
        "variables_ts": variables_ts,
        "status_changes": status_changes(prev, runtime_rows, ts),
        **layers,
        "proxysql_cluster": _cluster(prev, reading),
        "query_stats": query_stats.document(prev, reading.query_stats, scope),
    }
    if scope is not None:
        doc["shared_with"] = scope.shared_with
    return doc, sample, pool_samples


def _cluster(prev, reading):
    """The document's ProxySQL Cluster part (proxysql_cluster.settings_part + checks_part): settings and peers as last
    read with the variables, checksums as read now (none when the node is in no cluster)."""
    before = (prev or {}).get("proxysql_cluster")
    checks = proxysql_cluster.checks_part(reading.checksums, reading.peer_checksums)
    if reading.cluster_settings is None:
        return None if before is None else {**before, **checks}
    return {**proxysql_cluster.settings_part(reading.cluster_settings, reading.peers), **checks}


def _layers(prev, ts, reading, scope):
    """The document's memory and disk mysql_servers (scoped as the runtime rows; status.polled_layer() reads them), read
    now or kept from the previous document with when they were read (layers_ts), and when the runtime's
    configuration last changed."""
    prev = prev or {}
    # A first document (or one written before the fingerprint was kept) is not a change.
    changed = ts if prev.get("runtime_fp") not in (None, reading.runtime_fp) else prev.get("runtime_changed_ts", 0)
    out = {"runtime_fp": reading.runtime_fp, "runtime_changed_ts": changed}
    if reading.disk is None:
        if "disk_servers" in prev:
            out.update({k: prev[k] for k in ("memory_servers", "disk_servers", "layers_ts")})
        return out
    out["layers_ts"] = ts
    runtime = _configured_rows(reading.runtime, scope)
    for key, rows in (("memory_servers", reading.memory), ("disk_servers", reading.disk)):
        rows = [r for r in rows if scope is None or scope.keeps(r.hostgroup_id)]
        # Usually a layer is the runtime's configuration: "runtime" says so in 9 bytes instead of a copy of the rows
        # (it stays true while the document keeps it: a change of the runtime's configuration is read again at once).
        out[key] = "runtime" if _configured_rows(rows, None) == runtime else [r.__dict__ for r in rows]
    return out


def _configured_rows(rows, scope):
    return [(r.key, configured(r)) for r in rows if scope is None or scope.keeps(r.hostgroup_id)]


def _pool_snapshot(node_pk, ts, rows):
    """One PoolSnapshot row (a tuple): every server of the node's pool packed."""
    ids = pool_history.server_ids(node_pk, [key for key, _, _ in rows])
    packed = pool_history.pack([(ids[key], status, values) for key, status, values in rows])
    return _table(PoolSnapshot).row(node_id=node_pk, ts=_dt(ts), servers=packed)


def status_changes(prev, runtime_rows, ts):
    """{"hg:host:port": [epoch, ...]}: when each runtime row's status changed, over the last
    STATUS_CHANGES_KEEP_S (a row that appears or goes counts as a change too)."""
    keep_after = ts - STATUS_CHANGES_KEEP_S
    out = {k: [t for t in v if t > keep_after] for k, v in ((prev or {}).get("status_changes") or {}).items()}
    before = {
        f"{r['hostgroup_id']}:{r['hostname']}:{r['port']}": r["status"]
        for r in (prev or {}).get("runtime_servers") or []
    }
    now = {f"{r['hostgroup_id']}:{r['hostname']}:{r['port']}": r["status"] for r in runtime_rows}
    if prev and prev.get("runtime_servers") is not None:
        for key in before.keys() | now.keys():
            if before.get(key) != now.get(key):
                out.setdefault(key, []).append(ts)
    return {k: v for k, v in out.items() if v}


def _poll_time(doc, prev, ms, ts):
    """The poll's own duration and the node's usual one (an exponential average over POLL_USUAL_TAU_S)."""
    usual = (prev or {}).get("poll_ms_usual")
    last = (prev or {}).get("poll_ms_usual_ts")
    if usual is None or last is None or ts <= last:
        usual = ms
    else:
        usual += (ms - usual) * (1 - math.exp(-(ts - last) / POLL_USUAL_TAU_S))
    doc.update(poll_ms=round(ms, 3), poll_ms_usual=round(usual, 3), poll_ms_usual_ts=ts)


def proxysql_round(nodes, *, now=None, threads=None, claim=None):
    """Poll these ProxySQL nodes concurrently; store latest state and history. Returns a summary. claim(node),
    when given, is asked right before each poll; a node it refuses is not polled (rounds.py: the lease).

    A ProxySQL that serves several clusters has one node row per cluster: it is read once, and each of its
    rows due in this round gets the reading scoped to its cluster (proxysql_result)."""
    ts = now or _now()
    prevs = _read_prev(live.PROXYSQL, [n.pk for n in nodes])
    scopes = shared_scopes(nodes)
    unreachable = _table(ProxySQLSample).row
    groups = {}
    for node in nodes:
        groups.setdefault(node.endpoint, []).append(node)

    def one(rows):
        started = time.monotonic()
        try:
            reading = read_proxysql(
                rows[0], any(_wants_variables(prevs.get(n.pk), ts) for n in rows), [prevs.get(n.pk) for n in rows], ts
            )
        except Exception as exc:  # ClientError, or a bug / an answer we cannot read: this ProxySQL only
            if not isinstance(exc, ClientError):
                log.exception("poll of ProxySQL node %s failed", rows[0].pk)
            reading = exc
        ms = (time.monotonic() - started) * 1000
        out = []
        for node in rows:
            prev = prevs.get(node.pk)
            result = None
            if not isinstance(reading, Exception):
                try:
                    result = proxysql_result(node, prev, ts, reading, scopes.get(node.pk))
                    _poll_time(result[0], prev, ms, ts)
                except Exception as exc:
                    log.exception("poll of ProxySQL node %s failed", node.pk)
                    reading_error = exc
            if result is None:
                error = reading if isinstance(reading, Exception) else reading_error
                result = (_failure(prev, error, ts), unreachable(node_id=node.pk, ts=_dt(ts), reachable=False), [])
            result[0]["poll_s"] = round(ms / 1000, 4)
            out.append((node.pk, result))
        return out

    batches = _fan_out(
        one,
        list(groups.values()),
        threads,
        lambda done: _write_latest(live.PROXYSQL, {pk: r[0] for batch in done for pk, r in batch}),
        claim and _claim_rows(claim),
    )
    results = [item for batch in batches for item in batch]
    _insert_history(
        (ProxySQLSample, [r[1] for _, r in results]),
        (PoolSnapshot, [_pool_snapshot(pk, ts, r[2]) for pk, r in results if r[2]]),
    )
    return _summary(nodes, results, prevs, ts)


def _claim_rows(claim):
    """claim() for a group of rows of one ProxySQL: the rows it grants (the ProxySQL is read if any)."""

    def rows_claim(rows):
        rows[:] = [n for n in rows if claim(n)]
        return bool(rows)

    return rows_claim


def _hostgroups_of(cluster_ids):
    """{cluster id: frozenset of its hostgroups} as Cluster.hostgroup_ids() says, in two queries for all."""
    owned = {}
    roles = ("writer_hostgroup", "reader_hostgroup", "backup_writer_hostgroup", "offline_hostgroup")
    for pk, *hostgroups in Cluster.objects.filter(pk__in=cluster_ids).values_list("pk", *roles):
        owned[pk] = {hg for hg in hostgroups if hg is not None}
    for cluster_id, hg in HostgroupMembership.objects.filter(server__cluster_id__in=cluster_ids).values_list(
        "server__cluster_id", "hostgroup_id"
    ):
        owned[cluster_id].add(hg)
    return {pk: frozenset(hgs) for pk, hgs in owned.items()}


def shared_scopes(nodes):
    """{node pk: Scope} for the nodes whose ProxySQL serves several clusters ({} for the usual fleet: a node
    listed by proxysql_nodes_for_shard says how many rows its endpoint has, so no query is made then)."""
    candidates = {n.endpoint for n in nodes if getattr(n, "endpoint_rows", 2) > 1}
    if not candidates:
        return {}
    by_endpoint = {}
    for pk, host, port, cluster_id, cluster_name in ProxySQLNode.objects.filter(
        admin_host__in={n.admin_host for n in nodes if n.endpoint in candidates},
        admin_port__in={n.admin_port for n in nodes if n.endpoint in candidates},
    ).values_list("pk", "admin_host", "admin_port", "cluster_id", "cluster__name"):
        key = endpoint_key(host, port)
        if key in candidates:
            by_endpoint.setdefault(key, []).append((pk, cluster_id, cluster_name))
    shared = [rows for rows in by_endpoint.values() if len(rows) > 1]
    if not shared:
        return {}
    owned = _hostgroups_of({cluster_id for rows in shared for _, cluster_id, _ in rows})
    scopes = {}
    for rows in shared:
        first = min(pk for pk, _, _ in rows)
        owned_by_any = frozenset().union(*(owned[cluster_id] for _, cluster_id, _ in rows))
        for pk, cluster_id, name in rows:
            scopes[pk] = Scope(
                hostgroups=owned[cluster_id],
                unowned_too=pk == first,
                owned_by_any=owned_by_any,
                shared_with=sorted(other for p, _, other in rows if p != pk),
            )
    return scopes


# -- backends --------------------------------------------------------------------------------------
def poll_backend(server, ts, prev=None):
    """Poll one backend. Returns (latest doc, BackendSample row)."""
    client = _backend_client(server)
    state = client.state()
    lag = replica_threads = None
    if not state.wsrep_on:
        replica = client.replica_status()
        if replica is not None:
            lag = _int(replica.get("Seconds_Behind_Master"))
            replica_threads = {
                "io": replica.get("Slave_IO_Running"),
                "sql": replica.get("Slave_SQL_Running"),
                "error": (replica.get("Last_SQL_Error") or replica.get("Last_IO_Error") or "")[:300],
            }
    doc = {
        "ts": ts,
        "ok": True,
        "error": None,
        "error_since": None,
        "last_ok": ts,
        "state": state.__dict__,
        "synced_primary": state.synced_primary,
        "lag_seconds": lag,
        "replica": replica_threads,
        "fc_marks": fc_marks(prev, state.flow_control_paused_ns, ts),
    }
    sample = _table(BackendSample).row(
        server_id=server.pk,
        ts=_dt(ts),
        local_state=state.local_state,
        primary=None if state.cluster_status is None else state.cluster_status == "Primary",
        ready=state.ready,
        cluster_size=state.cluster_size,
        recv_queue=state.local_recv_queue,
        flow_control_paused=state.flow_control_paused,
        desync=state.desync,
        reject_queries=None if state.reject_queries is None else state.reject_queries.upper() != "NONE",
        read_only=state.read_only,
        lag_seconds=lag,
    )
    return doc, sample


def backend_round(servers, *, now=None, threads=None, claim=None):
    ts = now or _now()
    prevs = _read_prev(live.BACKEND, [s.pk for s in servers])
    unreachable = _table(BackendSample).row

    @_timed
    def one(server):
        prev = prevs.get(server.pk)
        try:
            return server.pk, poll_backend(server, ts, prev)
        except Exception as exc:  # ClientError, or anything unexpected: recorded for this node only
            if not isinstance(exc, ClientError):
                log.exception("poll of backend %s failed", server.pk)
            return server.pk, (_failure(prev, exc, ts), unreachable(server_id=server.pk, ts=_dt(ts), reachable=False))

    results = _fan_out(
        one, servers, threads, lambda done: _write_latest(live.BACKEND, {pk: r[0] for pk, r in done}), claim
    )
    _insert_history((BackendSample, [r[1] for _, r in results]))
    return _summary(servers, results, prevs, ts)


def fc_marks(prev, paused_ns, ts):
    """[[epoch, paused ns], ...]: readings of the flow-control counter at least FC_MARK_EVERY_S apart over
    the last FC_MARKS_KEEP_S, the newest last (the current reading is always last). A counter that went
    down (a restart) starts the list afresh."""
    if paused_ns is None:
        return []
    marks = [m for m in ((prev or {}).get("fc_marks") or []) if m[0] > ts - FC_MARKS_KEEP_S]
    if marks and marks[-1][1] > paused_ns:
        marks = []
    if len(marks) >= 2 and marks[-1][0] - marks[-2][0] < FC_MARK_EVERY_S:
        marks.pop()  # the newest stands in for the last reading until FC_MARK_EVERY_S has passed
    return marks + [[ts, paused_ns]]


# -- shared ----------------------------------------------------------------------------------------
def _summary(targets, results, prevs, ts):
    summary = {
        "polled": len(results),
        "failed": sum(1 for _, r in results if not r[0]["ok"]),
        "seconds": _now() - ts,
        "docs": {pk: (prevs.get(pk), r[0]) for pk, r in results},
    }
    if len(results) < len(targets):
        summary["unclaimed"] = len(targets) - len(results)
    return summary


def _timed(poll):
    """The document of each poll says how long the poll took (poll_s: its reads, or until its error):
    /metrics exports it as the poll latency."""

    def timed(item):
        started = time.monotonic()
        pk, result = poll(item)
        result[0]["poll_s"] = round(time.monotonic() - started, 4)
        return pk, result

    return timed


def _fan_out(fn, items, threads, publish, claim=None):
    """fn over items on up to `threads` threads. Finished results are handed to publish() in batches while
    the others still run (every PUBLISH_EVERY_S at most), so one slow item delays only itself. Returns
    every result (in completion order). An item that claim(item) refuses, asked just before fn, is left out."""
    if not items:
        return []
    workers = min(threads or settings.MONITOR_THREADS, len(items))
    if claim is not None:
        fn = _claimed(fn, claim)
    if workers == 1:
        results = []
        for item in items:
            result = fn(item)
            if result is not None:
                results.append(result)
                publish(results[-1:])
        return results

    def in_thread(item):
        try:
            return fn(item)
        finally:
            close_old_connections()  # threads must not keep database connections open

    results = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = {pool.submit(in_thread, item) for item in items}
        while pending:
            done, pending = wait(pending, timeout=PUBLISH_EVERY_S)
            batch = [result for result in (future.result() for future in done) if result is not None]
            if batch:
                publish(batch)
                results += batch
    return results


def _claimed(fn, claim):
    def claimed(item):
        return fn(item) if claim(item) else None

    return claimed


def _read_prev(kind, pks):
    try:
        return live.read_many(kind, pks)
    except live.LiveUnavailable:
        return {}  # no rates this round; history still gets the gauges


def _write_latest(kind, docs):
    try:
        live.write_many(kind, docs)
    except live.LiveUnavailable as exc:
        log.warning("latest state not written: Redis unavailable (%s)", exc)


def _stored(field):
    """A credential column as stored (its token), without the field's decryption on load."""
    return ExpressionWrapper(F(field), output_field=TextField())


def proxysql_shards(shards):
    """{node pk: (its shard, how many rows its ProxySQL has)}. The ProxySQLs (endpoints), in the order of their
    first row, are dealt round the shards: every row of a ProxySQL serving several clusters is in one shard, and
    the shards stay even. Not a row's pk modulo shards: a pair adopted for two clusters gets first pks 1, 2, 5, 6,
    9... and half of four shards would idle. Deleting a ProxySQL moves the ones after it to the next shard: for
    one round some may be polled twice or skipped once."""
    return _endpoint_shards(ProxySQLNode.objects.order_by("pk").values_list("pk", "admin_host", "admin_port"), shards)


def _endpoint_shards(rows, shards):
    """proxysql_shards() of rows (pk, admin host, admin port) in pk order."""
    endpoints = {}
    for pk, host, port in rows:
        endpoints.setdefault(endpoint_key(host, port), []).append(pk)
    return {pk: (i % shards, len(pks)) for i, pks in enumerate(endpoints.values()) for pk in pks}


# A beat tick first reads which of its shard's targets are due from plain rows (one query, no model instances): most
# ticks find none (a node is due once per interval, the shard ticks every second); the due ones are loaded whole after.
def proxysql_schedule(shard, shards):
    """[(pk, its cluster's poll_interval_s, how many rows its ProxySQL has)] of the shard's nodes, in pk order."""
    rows = list(
        ProxySQLNode.objects.order_by("pk").values_list("pk", "admin_host", "admin_port", "cluster__poll_interval_s")
    )
    of = _endpoint_shards((row[:3] for row in rows), shards)
    return [(pk, interval, of[pk][1]) for pk, _, _, interval in rows if of[pk][0] == shard]


def backend_schedule(shard, shards):
    """[(pk, its cluster's backend_poll_interval_s, None)] of the shard's backends, in pk order."""
    return [
        (pk, interval, None)
        for pk, interval in Server.objects.annotate(shard_index=F("pk") % shards)
        .filter(shard_index=shard)
        .order_by("pk")
        .values_list("pk", "cluster__backend_poll_interval_s")
    ]


def proxysql_nodes_for_shard(shard, shards):
    """The shard's nodes (proxysql_shards), with only what a poll reads; the admin password stays encrypted
    (admin_password_stored) until a connection is opened. A ProxySQL is read once per round (proxysql_round);
    endpoint_rows says how many rows it has."""
    return proxysql_nodes({pk: rows for pk, (of, rows) in proxysql_shards(shards).items() if of == shard})


def proxysql_nodes(rows_of):
    """The nodes of rows_of {pk: how many rows its ProxySQL has}, loaded as proxysql_nodes_for_shard says."""
    nodes = list(
        ProxySQLNode.objects.select_related("cluster")
        .only(
            "name",
            "admin_host",
            "admin_port",
            "admin_user",
            "cluster__poll_interval_s",
            "cluster__tls_ca",
            "cluster__tls_verify",
        )
        .annotate(admin_password_stored=_stored("admin_password"))
        .filter(pk__in=rows_of)
        .order_by("pk")
    )
    for node in nodes:
        node.endpoint_rows = rows_of[node.pk]
    return nodes


def servers_for_shard(shard, shards, pks=None):
    """The shard's backends (of them, those in pks when given), as proxysql_nodes_for_shard: the monitor password
    stays encrypted (monitor_password_stored) until a connection is opened."""
    servers = _servers_to_poll().annotate(shard_index=F("pk") % shards).filter(shard_index=shard)
    return list(servers if pks is None else servers.filter(pk__in=pks))


def servers_of_cluster(cluster_id):
    """One cluster's backends, loaded as servers_for_shard loads them (a poll of that cluster outside the ticks)."""
    return list(_servers_to_poll().filter(cluster_id=cluster_id))


def _servers_to_poll():
    return (
        Server.objects.select_related("cluster")
        .only(
            "hostname",
            "port",
            "cluster__backend_poll_interval_s",
            "cluster__monitor_user",
            "cluster__credential_hosts",
            "cluster__tls_ca",
            "cluster__tls_verify",
        )
        .annotate(monitor_password_stored=_stored("cluster__monitor_password"))
        .order_by("pk")
    )
