"""What /metrics and /metrics/pool export: the fleet as the pages show it, in the Prometheus text exposition format,
built with the official client library (prometheus_client): a custom collector yields its metric families.

Two kinds of scrape, as the multi-target exporter pattern has them (scrape_targets() lists them for Prometheus's
HTTP service discovery):
- /metrics: the fleet. Clusters, ProxySQL nodes, backends, mirror rules; operations and alerts are the sections
  their own apps add (apps/operations/metrics.py, apps/alerts/metrics.py; composed in apps/pages/metrics.py).
- /metrics/pool?cluster=NAME: the connection pool rows (stats_mysql_connection_pool) of one cluster's nodes. They
  are most of the bytes (6 series per node x hostgroup x server): in one body with the rest, 1,000 nodes and 3,000
  backends made 11.5-15.4 MB, over the 10 MB a scrape should stay under (Prometheus's body_size_limit counts the
  uncompressed body); one target per cluster keeps every body small and every series readable (no opaque ids).
  The series' names and labels are the same whichever body carries them.

Read like the fleet overview (overview.py), never from a node: three flat inventory queries, one MGET per
kind of latest-state document (decoded by msgspec into only the fields exported), and a few small queries
(operations by cluster, kind and state and their run times as a histogram, kept up to date by
operations/counts.py; pending rollbacks and finishes; the last measured mirror loss per rule). When Redis does not answer, proxysql_fleet_live_up is 0 and the series read
from the documents are absent; the database's series are still there. When the database does not answer,
proxysql_fleet_database_up is 0 and nothing else is (the inventory names every series). /metrics/pool answers
either failure with a 503 (its target is down), an unknown cluster with a 404.

Choices, by the Prometheus conventions (README "Prometheus" says more):
- Counters ProxySQL keeps (stats_mysql_global's Questions..., the pool's Queries and ConnERR) are exported
  as they are, `_total`, not as the per-second rates the pages show: Prometheus computes a rate over any
  window from them, a missed scrape loses nothing, and a ProxySQL restart is a counter reset it handles.
  The other figures are gauges in base units (seconds, ratios 0..1).
- A node's or backend's figures (and a node's pool rows) are exported only while its latest poll answered and is
  fresh (not older than status.STALE_FACTOR intervals): a failed or stale poll's last figures are old, so their
  series stop (Prometheus marks them stale) while `_up` says 0 and `_poll_age_seconds` how old the last poll is.
- The pool row's status is one series with the current status as a label and the value 1 (the other
  statuses have no series): a full state set (five statuses, 0 or 1) would be five series per row, 45
  per node: 36,000 lines more at 1,000 nodes.
- Labels: cluster, node, hostgroup, server (host:port), role, rule, kind, state, status, command, errno, user:
  bounded by the inventory and by fixed sets (users: the USERS_EXPORTED busiest per node, the rest summed);
  never a digest, a session, a query text or an error message.

At 1,000 ProxySQL nodes and 3,000 backends the two kinds hold about 105,000 samples. prometheus_client's
generate_latest() escapes and sorts every sample's labels (~4 us a sample here: 400 ms of CPU), so render()
writes the same text with each label set escaped once per scrape and shared by the samples of a row;
tests hold it byte for byte equal to generate_latest() on the lab's expositions and on hostile names.
"""

import gc
import time
from collections import defaultdict
from contextlib import contextmanager
from datetime import datetime, timezone

import msgspec
from django.conf import settings
from django.db import DatabaseError
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from apps.fleet.models import Cluster, MirrorRule, ProxySQLNode, Server

from . import live, status
from .models import RAW, MirrorRuleSample
from .overview import Unreadable, read_docs

PREFIX = "proxysql_fleet_"
# Label values bounded at fleet scale (each series more is 1,000 samples at 1,000 nodes): users as a label only for
# the busiest few per node, commands of a fixed list, the rest summed under OTHER.
# Measured (bin/bench-metrics, 1,000 nodes): 5 users and 9 commands by name made /metrics 8.4 MB of its 10 MB budget.
USERS_EXPORTED = 3
COMMANDS_EXPORTED = ("SELECT", "INSERT", "UPDATE", "DELETE", "COMMIT")
OTHER = "(other)"
POOL_STATUSES = "ONLINE, SHUNNED, OFFLINE_SOFT, OFFLINE_HARD, SHUNNED_REPLICATION_LAG"


# -- the documents, as far as they are exported --------------------------------------------------------
# Typed: msgspec checks and converts every figure while decoding (in C). pollers.py writes numbers there; a
# document of another shape is Unreadable: its node's _up is 0, never a wrong figure.
Figure = float | None


class PoolCounters(msgspec.Struct, frozen=True):
    Queries: Figure = None
    ConnERR: Figure = None


class PoolRow(msgspec.Struct):
    key: tuple[int, str, int]
    status: str | None = None
    conn_used: Figure = None
    conn_free: Figure = None
    latency_us: Figure = None
    counters: PoolCounters = PoolCounters()


class GlobalCounters(msgspec.Struct, frozen=True):
    Questions: Figure = None
    Slow_queries: Figure = None
    Com_frontend_stmt_execute: Figure = None


class Figures(msgspec.Struct, frozen=True):
    client_connections_connected: Figure = None
    mirror_queue_length: Figure = None
    mirror_concurrency: Figure = None
    mirror_max_concurrency: Figure = None
    mirror_max_queue_length: Figure = None
    mysql_threads: Figure = None


class QueryStats(msgspec.Struct, frozen=True):
    """query_stats.py's reading (every MONITOR_QUERY_STATS_INTERVAL_S): the parts exported."""

    ts: float
    users: list[tuple[str, int, int]] = []
    sessions: dict[str, tuple[int, int]] = {}
    commands: dict[str, tuple[int, int]] = {}
    error_totals: list[tuple[int, int, int]] = []


class ProxySQLDoc(msgspec.Struct):
    """The part of pollers.py's ProxySQL document that /metrics exports (the pool rows are skipped while decoding:
    /metrics/pool exports them)."""

    ts: float
    ok: bool = True
    poll_s: Figure = None
    counters: GlobalCounters = GlobalCounters()
    figures: Figures = Figures()
    query_stats: QueryStats | None = None


class PoolDoc(msgspec.Struct):
    """The part /metrics/pool exports: the pool rows, and what says whether they are fresh."""

    ts: float
    ok: bool = True
    pool: list[PoolRow] = []


PROXYSQL_DECODER = msgspec.json.Decoder(ProxySQLDoc)  # backends: the overview's decoder reads what is exported
POOL_DECODER = msgspec.json.Decoder(PoolDoc)


def _num(value):
    """A figure as a float, or None for a missing or unreadable one (the backend documents are decoded loosely, as
    the overview reads them)."""
    if value is None or isinstance(value, (dict, list)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# -- the families ------------------------------------------------------------------------------------
GAUGE, COUNTER = "gauge", "counter"
# name (without the prefix; a counter without _total) -> (type, HELP). The order is the exposition's.
SPECS = {
    "live_up": (
        GAUGE,
        "1 when Redis answered with the latest-state documents; 0 when it did not, and the series "
        "read from them (per ProxySQL node and backend) are absent from this scrape, and "
        "/metrics/pool answers 503",
    ),
    "database_up": (GAUGE, "1 when the database answered; 0 when it did not, and every other series is absent"),
    "hostgroup_info": (
        GAUGE,
        "1 for each hostgroup of a cluster's roles: join on (cluster, hostgroup) to name the "
        "role (writer, reader, backup_writer, offline) of the pool series",
    ),
    "proxysql_poll_interval_seconds": (GAUGE, "Seconds between two polls of each ProxySQL node of the cluster"),
    "backend_poll_interval_seconds": (GAUGE, "Seconds between two polls of each backend of the cluster"),
    # ProxySQL nodes
    "proxysql_up": (
        GAUGE,
        "1 when the latest poll of the ProxySQL node answered and is fresh; 0 when it failed, "
        f"is older than {status.STALE_FACTOR} poll intervals (stale), or there is none yet",
    ),
    "proxysql_poll_age_seconds": (GAUGE, "Seconds since the latest poll of the ProxySQL node started"),
    "proxysql_poll_duration_seconds": (
        GAUGE,
        "How long the latest poll of the ProxySQL node took (its reads, or until its error)",
    ),
    "proxysql_questions": (COUNTER, "Client queries (Questions, stats_mysql_global)"),
    "proxysql_slow_queries": (COUNTER, "Slow queries (Slow_queries)"),
    "proxysql_prepared_executions": (
        COUNTER,
        "Prepared statement executions (Com_frontend_stmt_execute; ProxySQL does not mirror them)",
    ),
    "proxysql_client_connections": (GAUGE, "Client connections open (Client_Connections_connected)"),
    "mirror_queue_length": (
        GAUGE,
        "Queries waiting in the mirror queue, over every worker thread (Mirror_queue_length)",
    ),
    "mirror_queue_limit": (
        GAUGE,
        "The mirror queue's limit over every worker thread: mysql-mirror_max_queue_length "
        "(per thread) x mysql-threads; beyond it mirrored queries are dropped",
    ),
    "mirror_concurrency": (GAUGE, "Mirror sessions running (Mirror_concurrency)"),
    "mirror_concurrency_limit": (GAUGE, "mysql-mirror_max_concurrency"),
    # the query tools' figures (query_stats.py), read every MONITOR_QUERY_STATS_INTERVAL_S
    "proxysql_sessions": (
        GAUGE,
        "Client sessions by command (stats_mysql_processlist counted by ProxySQL: Sleep, "
        "Query, Execute...); no series per session",
    ),
    "proxysql_user_connections": (
        GAUGE,
        f"Client connections of a frontend user (stats_mysql_users): the "
        f"{USERS_EXPORTED} busiest users of the node by name, the others summed as "
        f'user="{OTHER}"',
    ),
    "proxysql_user_max_connections": (GAUGE, "The user's max_connections (stats_mysql_users), for the same users"),
    "proxysql_command_queries": (
        COUNTER,
        "Queries by command (stats_mysql_commands_counters Total_cnt): "
        + ", ".join(COMMANDS_EXPORTED)
        + f'; the others summed as command="{OTHER}"',
    ),
    "proxysql_command_time_seconds": (COUNTER, "Total time of those queries (Total_Time_us)"),
    "proxysql_backend_errors": (
        COUNTER,
        "Errors met on backends (stats_mysql_errors count_star), by hostgroup and "
        "MySQL errno, summed over servers, users and schemas",
    ),
    # pool rows: one per (node, hostgroup, server), as stats_mysql_connection_pool
    "pool_server_status": (
        GAUGE,
        "1, with the row's current status as the status label (" + POOL_STATUSES + "); "
        "the other statuses have no series",
    ),
    "pool_connections_used": (GAUGE, "Connections in use (ConnUsed)"),
    "pool_connections_free": (GAUGE, "Idle connections kept (ConnFree)"),
    "pool_queries": (COUNTER, "Queries sent to the server in the hostgroup (Queries)"),
    "pool_connection_errors": (COUNTER, "Connection errors (ConnERR)"),
    "pool_latency_seconds": (GAUGE, "Ping latency of the server as ProxySQL measures it (Latency_us)"),
    # mirror rules
    "mirror_rule_loss_ratio": (
        GAUGE,
        "Measured mirror loss of the rule in its last digest-poll window: 1 - mirrored / "
        "expected copies (apps/monitoring/mirror.py); no series without a figure",
    ),
    "mirror_rule_expected_per_second": (
        GAUGE,
        "Copies the rule should have mirrored per second in that window: its hits less the prepared-statement share",
    ),
    # backends
    "backend_up": (
        GAUGE,
        "1 when the latest poll of the backend answered and is fresh; 0 when it failed, is older "
        f"than {status.STALE_FACTOR} poll intervals (stale), or there is none yet",
    ),
    "backend_poll_age_seconds": (GAUGE, "Seconds since the latest poll of the backend started"),
    "backend_poll_duration_seconds": (GAUGE, "How long the latest poll of the backend took"),
    "backend_maintenance": (GAUGE, "1 while the backend is in maintenance (drained by the console), else 0"),
    "backend_read_only": (GAUGE, "1 when read_only is ON"),
    "backend_wsrep_local_state": (GAUGE, "wsrep_local_state: 1 Joining, 2 Donor/Desynced, 3 Joined, 4 Synced"),
    "backend_wsrep_cluster_primary": (GAUGE, "1 when wsrep_cluster_status is Primary"),
    "backend_wsrep_ready": (GAUGE, "1 when wsrep_ready is ON"),
    "backend_wsrep_local_recv_queue": (GAUGE, "Write sets waiting to be applied (wsrep_local_recv_queue)"),
    "backend_wsrep_flow_control_paused_ratio": (
        GAUGE,
        "Share of the time replication was paused by flow control "
        "since the last FLUSH STATUS (wsrep_flow_control_paused)",
    ),
    "backend_replica_lag_seconds": (GAUGE, "Seconds_Behind_Master of an async replica"),
    # operations
    "operations": (
        COUNTER,
        "Operations that ended, by cluster, kind and final state (a series starts at its first operation)",
    ),
    "operations_open": (
        GAUGE,
        "Operations not ended yet, by cluster, kind and state (planned, pending, running, "
        "rolling_back, rollback_pending, finish_pending)",
    ),
    "pending_rollbacks": (
        GAUGE,
        "Statements a ProxySQL node has not taken yet (one per node and operation): a "
        "rollback's, or an operation's rest past its point of no return (its state "
        "finish_pending), by state: pending (retried) or superseded (the node will be "
        "repaired)",
    ),
    # alerts (apps/alerts)
    "alerts": (
        GAUGE,
        "Open alerts by cluster, rule, severity and state: firing, pending (waiting for its `for`) or "
        "held (planned work is expected to cause it: nobody is paged); no series when none is open",
    ),
}
HISTOGRAM_HELP = (
    "Run time of the operations that ended, as the executor measured it (timings total_ms), by kind "
    "and final state; an operation that never ran (refused, expired) is not counted"
)


_new_tuple = tuple.__new__  # a Sample (a named tuple) built without its Python-level __new__: 100,000 a scrape


def _families(names=None):
    out = {}
    for name, (kind, help_text) in SPECS.items():
        if names is not None and name not in names:
            continue
        cls = CounterMetricFamily if kind == COUNTER else GaugeMetricFamily
        out[name] = cls(PREFIX + name, help_text)
    return out


class _Adder:
    """Samples appended straight to the families: one label dict per row, shared by the row's samples (render()
    escapes it once). prometheus_client's add_metric() would build a dict per sample."""

    def __init__(self, families):
        self.families = families
        self.appenders = {}

    def __call__(self, name, labels, value):
        add = self.appenders.get(name) or self.appender(name)
        add(labels, value)

    def appender(self, name):
        """add() of one family, for the loops that run per pool row."""
        if name in self.appenders:
            return self.appenders[name]
        family = self.families[name]
        sample_name = family.name + ("_total" if family.type == COUNTER else "")
        append = family.samples.append

        def add(labels, value):
            if value.__class__ is not float:
                value = _num(value)
                if value is None:
                    return
            append(_new_tuple(Sample, (sample_name, labels, value, None, None, None)))

        self.appenders[name] = add
        return add


# -- the collector -------------------------------------------------------------------------------------
class FleetCollector:
    """A prometheus_client collector (collect() returns metric families) over the inventory, the latest-state
    documents and a few aggregates. Register it with a CollectorRegistry, or call collect() directly.

    `sections`: the series of apps above monitoring (apps/pages/metrics.py passes operations' and alerts'), each
    called as section(add, inventory, now) after monitoring's own; one may return an extra family (a histogram).
    Their names and help are in SPECS with the rest, so that one table lists every series."""

    def __init__(self, now=None, sections=()):
        self.now = now
        self.sections = tuple(sections)

    def collect(self):
        with _no_gc():
            return self._collect(self.now or time.time())

    def _collect(self, now):
        families = _families()
        add = _Adder(families)
        try:
            inventory = _inventory()
        except DatabaseError:
            add("database_up", {}, 0)
            return [families["database_up"]]
        add("database_up", {}, 1)
        try:
            px_docs = read_docs(live.PROXYSQL, list(inventory.nodes), PROXYSQL_DECODER)
            be_docs = read_docs(live.BACKEND, list(inventory.servers))
            add("live_up", {}, 1)
        except live.LiveUnavailable:
            px_docs = be_docs = None
            add("live_up", {}, 0)
        try:
            _clusters(add, inventory)
            if px_docs is not None:
                _proxysql(add, inventory, px_docs, now)
                _backends(add, inventory, be_docs, now)
            else:
                _maintenance(add, inventory)
            _mirror_rules(add, inventory, now)
            extra = [section(add, inventory, now) for section in self.sections]
        except DatabaseError:
            families = _families()
            add = _Adder(families)
            add("database_up", {}, 0)
            return [families["database_up"]]
        return [f for f in [*families.values(), *(f for f in extra if f is not None)] if f.samples]


class UnknownCluster(LookupError):
    pass


class PoolCollector:
    """The pool rows of one cluster's ProxySQL nodes (/metrics/pool?cluster=NAME): one query for the cluster, one
    for its nodes, one MGET. Raises UnknownCluster, live.LiveUnavailable (Redis) or DatabaseError: the view answers
    those with an error status, so that Prometheus marks this target down rather than reading an empty pool."""

    def __init__(self, cluster_name, now=None):
        self.cluster_name, self.now = cluster_name, now

    def collect(self):
        with _no_gc():
            cluster = Cluster.objects.filter(name=self.cluster_name).values("id", "name", "poll_interval_s").first()
            if cluster is None or cluster["name"] != self.cluster_name:  # MariaDB's collation ignores case and
                raise UnknownCluster(self.cluster_name)  # trailing spaces: the name, exactly
            nodes = list(
                ProxySQLNode.objects.filter(cluster_id=cluster["id"]).order_by("name").values_list("id", "name")
            )
            docs = read_docs(live.PROXYSQL, [pk for pk, _ in nodes], POOL_DECODER)
            families = _families(POOL)
            _pool(_Adder(families), cluster, nodes, docs, self.now or time.time())
            return [f for f in families.values() if f.samples]


class _Inventory:
    """What a scrape reads first; the sections of other apps label their series from it."""

    def __init__(self):
        self.clusters = {}  # id -> {name, intervals, roles}
        self.nodes = {}  # id -> (cluster_id, labels {cluster, node})
        self.servers = {}  # id -> (cluster_id, labels {cluster, server}, maintenance)


def server_label(host, port):
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _inventory():
    inv = _Inventory()
    for c in Cluster.objects.values(
        "id",
        "name",
        "poll_interval_s",
        "backend_poll_interval_s",
        "writer_hostgroup",
        "reader_hostgroup",
        "backup_writer_hostgroup",
        "offline_hostgroup",
    ):
        roles = {c["writer_hostgroup"]: "writer", c["reader_hostgroup"]: "reader"}
        for field, role in (("backup_writer_hostgroup", "backup_writer"), ("offline_hostgroup", "offline")):
            if c[field] is not None:
                roles[c[field]] = role
        c["roles"] = roles
        inv.clusters[c["id"]] = c
    for pk, cluster_id, name in ProxySQLNode.objects.order_by("cluster_id", "name").values_list(
        "id", "cluster_id", "name"
    ):
        inv.nodes[pk] = (cluster_id, {"cluster": inv.clusters[cluster_id]["name"], "node": name})
    for pk, cluster_id, host, port, maintenance in Server.objects.order_by(
        "cluster_id", "hostname", "port"
    ).values_list("id", "cluster_id", "hostname", "port", "maintenance"):
        inv.servers[pk] = (
            cluster_id,
            {"cluster": inv.clusters[cluster_id]["name"], "server": server_label(host, port)},
            maintenance,
        )
    return inv


def _clusters(add, inv):
    for c in sorted(inv.clusters.values(), key=lambda c: c["name"]):
        labels = {"cluster": c["name"]}
        add("proxysql_poll_interval_seconds", labels, status.interval_of(c["poll_interval_s"]))
        add("backend_poll_interval_seconds", labels, status.interval_of(c["backend_poll_interval_s"]))
        for hostgroup, role in sorted(c["roles"].items()):
            add("hostgroup_info", {"cluster": c["name"], "hostgroup": str(hostgroup), "role": role}, 1)


def _polled(add, kind, labels, doc, interval, now):
    """The <kind>_up, _poll_age_seconds and _poll_duration_seconds series of one document; True when its poll
    answered and is fresh (then its figures are exported too)."""
    if doc is None or isinstance(doc, Unreadable):
        add(f"{kind}_up", labels, 0)
        return False
    state, age = status.freshness_of(doc.ts, doc.ok, interval, now)
    add(f"{kind}_up", labels, 1 if state == status.OK else 0)
    add(f"{kind}_poll_age_seconds", labels, round(age, 3))
    add(f"{kind}_poll_duration_seconds", labels, doc.poll_s)
    return state == status.OK


# What is exported of a node's stats_mysql_global (its errors are the pool rows' ConnERR, as on the pages). Each
# series more costs 1,000 samples at fleet scale: the figures the pages show, not every counter ProxySQL keeps.
GLOBAL_COUNTERS = (
    ("proxysql_questions", "Questions"),
    ("proxysql_slow_queries", "Slow_queries"),
    ("proxysql_prepared_executions", "Com_frontend_stmt_execute"),
)
GLOBAL_GAUGES = (
    ("proxysql_client_connections", "client_connections_connected"),
    ("mirror_queue_length", "mirror_queue_length"),
    ("mirror_concurrency", "mirror_concurrency"),
    ("mirror_concurrency_limit", "mirror_max_concurrency"),
)
POOL = (
    "pool_server_status",
    "pool_connections_used",
    "pool_connections_free",
    "pool_queries",
    "pool_connection_errors",
    "pool_latency_seconds",
)


def _proxysql(add, inv, docs, now):
    for pk, (cluster_id, labels) in inv.nodes.items():
        doc = docs.get(pk)
        if not _polled(add, "proxysql", labels, doc, inv.clusters[cluster_id]["poll_interval_s"], now):
            continue
        counters, figures = doc.counters, doc.figures
        for name, field in GLOBAL_COUNTERS:
            add(name, labels, getattr(counters, field))
        for name, field in GLOBAL_GAUGES:
            add(name, labels, getattr(figures, field))
        add(
            "mirror_queue_limit",
            labels,
            status.mirror(
                {"mirror_max_queue_length": figures.mirror_max_queue_length, "mysql_threads": figures.mysql_threads}
            ).queue_limit,
        )
        stats = doc.query_stats  # read every MONITOR_QUERY_STATS_INTERVAL_S: its own age
        if stats is not None and now - stats.ts <= status.stale_after(settings.MONITOR_QUERY_STATS_INTERVAL_S):
            _query_stats(add, labels, stats)


def _query_stats(add, labels, stats):
    """One node's users, sessions, command counters and backend errors, with bounded label values."""
    for command, (sessions, _longest) in stats.sessions.items():
        add("proxysql_sessions", {**labels, "command": command or OTHER}, float(sessions))
    users = sorted(stats.users, key=lambda u: (-u[1], u[0]))
    for name, connections, limit in users[:USERS_EXPORTED]:
        user_labels = {**labels, "user": name}
        add("proxysql_user_connections", user_labels, float(connections))
        add("proxysql_user_max_connections", user_labels, float(limit))
    if len(users) > USERS_EXPORTED:
        add("proxysql_user_connections", {**labels, "user": OTHER}, float(sum(u[1] for u in users[USERS_EXPORTED:])))
    totals = defaultdict(lambda: [0, 0])
    for command, (count, time_us) in stats.commands.items():
        total = totals[command if command in COMMANDS_EXPORTED else OTHER]
        total[0] += count
        total[1] += time_us
    for command, (count, time_us) in sorted(totals.items()):
        command_labels = {**labels, "command": command}
        add("proxysql_command_queries", command_labels, float(count))
        add("proxysql_command_time_seconds", command_labels, time_us / 1e6)
    for hostgroup, errno, count in stats.error_totals:
        add("proxysql_backend_errors", {**labels, "hostgroup": str(hostgroup), "errno": str(errno)}, float(count))


def _pool(add, cluster, nodes, docs, now):
    """The pool rows of a cluster's nodes whose latest poll answered and is fresh (the same rule as the nodes'
    figures on /metrics: a stale row's figures are old)."""
    status_of, used, free, queries, errors, latency = map(add.appender, POOL)
    for pk, node in nodes:
        doc = docs.get(pk)
        if doc is None or isinstance(doc, Unreadable):
            continue
        if status.freshness_of(doc.ts, doc.ok, cluster["poll_interval_s"], now)[0] != status.OK:
            continue
        for row in doc.pool:
            hostgroup, host, port = row.key
            row_labels = {
                "cluster": cluster["name"],
                "hostgroup": str(hostgroup),
                "node": node,
                "server": server_label(host, port),
            }
            if row.status is not None:
                status_of({**row_labels, "status": row.status}, 1.0)
            used(row_labels, row.conn_used)
            free(row_labels, row.conn_free)
            queries(row_labels, row.counters.Queries)
            errors(row_labels, row.counters.ConnERR)
            if row.latency_us is not None:
                latency(row_labels, row.latency_us / 1e6)


def _backends(add, inv, docs, now):
    for pk, (cluster_id, labels, maintenance) in inv.servers.items():
        add("backend_maintenance", labels, 1 if maintenance else 0)
        doc = docs.get(pk)
        if not _polled(add, "backend", labels, doc, inv.clusters[cluster_id]["backend_poll_interval_s"], now):
            continue
        add("backend_replica_lag_seconds", labels, doc.lag_seconds)
        s = doc.state
        if s is None:
            continue
        add("backend_read_only", labels, s.read_only)
        if not s.wsrep_on:
            continue
        add("backend_wsrep_local_state", labels, s.local_state)
        if s.cluster_status is not None:
            add("backend_wsrep_cluster_primary", labels, 1 if s.cluster_status == "Primary" else 0)
        add("backend_wsrep_ready", labels, s.ready)
        add("backend_wsrep_local_recv_queue", labels, s.local_recv_queue)
        add("backend_wsrep_flow_control_paused_ratio", labels, s.flow_control_paused)


def _maintenance(add, inv):
    for cluster_id, labels, maintenance in inv.servers.values():
        add("backend_maintenance", labels, 1 if maintenance else 0)


def _mirror_rules(add, inv, now):
    """The last measured window of each mirror rule, when it ended within STALE_FACTOR digest intervals: an older
    figure is not today's loss. One query for the rules, one for the recent windows of their nodes (indexed)."""
    rules = defaultdict(set)
    for node_id, rule_id in MirrorRule.objects.filter(mirror_hostgroup__isnull=False).values_list(
        "proxysql_node_id", "rule_id"
    ):
        rules[node_id].add(rule_id)
    if not rules:
        return
    since = now - status.stale_after(settings.MONITOR_DIGEST_INTERVAL_S)
    latest = {}
    for node_id, rule_id, loss, expected in (
        MirrorRuleSample.objects.filter(
            node_id__in=list(rules), resolution=RAW, ts__gte=datetime.fromtimestamp(since, tz=timezone.utc)
        )
        .order_by("ts")
        .values_list("node_id", "rule_id", "loss", "expected_ps")
    ):
        if rule_id in rules[node_id]:
            latest[node_id, rule_id] = (loss, expected)
    for (node_id, rule_id), (loss, expected) in sorted(latest.items()):
        if node_id not in inv.nodes:
            continue
        labels = {**inv.nodes[node_id][1], "rule": str(rule_id)}
        add("mirror_rule_loss_ratio", labels, loss)
        add("mirror_rule_expected_per_second", labels, expected)


# -- the text --------------------------------------------------------------------------------------------
_TYPES = {
    "counter": "counter",
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
    "unknown": "untyped",
}
_SUFFIXES = {"counter": "_total", "info": "_info"}


def render(families):
    """The Prometheus text format (0.0.4) of these families: byte for byte what prometheus_client's
    generate_latest() writes for them, with each label set escaped once (see the module's docstring).
    Families with OpenMetrics-only samples (_created, _gsum, _gcount) are not supported: ours have none."""
    escape_name = openmetrics.escape_metric_name
    out = []
    label_text = {}  # id(labels dict) -> "{...}": the dicts stay alive in `families` while this runs
    value_text = {}
    names = {}
    pair_text = _LabelPairs()
    for metric in families:
        mname = metric.name + _SUFFIXES.get(metric.type, "")
        mtype = _TYPES.get(metric.type, metric.type)
        shown = escape_name(mname)
        help_text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {shown} {help_text}\n# TYPE {shown} {mtype}\n")
        openmetrics_only = {metric.name + suffix for suffix in ("_created", "_gsum", "_gcount")}
        for sample_name, labels, value, timestamp, _, _ in metric.samples:
            if sample_name in openmetrics_only:
                raise ValueError(f"render() does not write OpenMetrics-only samples ({sample_name})")
            name = names.get(sample_name)
            if name is None:
                name = names[sample_name] = escape_name(sample_name)
            if labels:
                text = label_text.get(id(labels))
                if text is None:
                    text = label_text[id(labels)] = "{" + ",".join(map(pair_text, sorted(labels.items()))) + "}"
            else:
                text = ""
            key = value if value else repr(value)  # 0.0 and -0.0 are one key but two texts
            shown_value = value_text.get(key)
            if shown_value is None:
                shown_value = value_text[key] = floatToGoString(value)
            if timestamp is None:
                out.append(f"{name}{text} {shown_value}\n")
            else:
                out.append(f"{name}{text} {shown_value} {int(float(timestamp) * 1000):d}\n")
    return "".join(out).encode("utf-8")


class _LabelPairs(dict):
    """(name, value) -> 'name="value"', escaped as generate_latest() escapes them, once per distinct pair."""

    def __call__(self, pair):
        text = self.get(pair)
        if text is None:
            name, value = pair
            text = self[pair] = (
                f'{openmetrics.escape_label_name(name)}="{openmetrics._escape(value, openmetrics.ALLOWUTF8, False)}"'
            )
        return text


@contextmanager
def _no_gc():
    """A hundred thousand samples and their label dicts, none in a cycle: a cyclic-GC pass in the middle would scan
    them all, again and again (as in overview.py)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def exposition(now=None, sections=()):
    """The body of /metrics: apps/pages/metrics.py calls it with the sections of the apps above monitoring."""
    with _no_gc():
        return render(FleetCollector(now, sections).collect())


def pool_exposition(cluster_name, now=None):
    """The body of /metrics/pool?cluster=NAME (see PoolCollector for what it raises)."""
    with _no_gc():
        return render(PoolCollector(cluster_name, now).collect())


def scrape_targets(address, scheme):
    """Prometheus HTTP service discovery (http_sd_config): /metrics and one /metrics/pool target per cluster, all at
    the console's address. A pool target's instance label is "pool/" and its cluster's name (target labels must
    differ, or their `up` series would collide; no host:port starts so, whatever the cluster is named), as the
    multi-target exporter pattern sets it."""
    groups = [{"targets": [address], "labels": {"__scheme__": scheme, "__metrics_path__": "/metrics"}}]
    for name in Cluster.objects.order_by("name").values_list("name", flat=True):
        groups.append(
            {
                "targets": [address],
                "labels": {
                    "__scheme__": scheme,
                    "__metrics_path__": "/metrics/pool",
                    "__param_cluster": name,
                    "instance": f"pool/{name}",
                },
            }
        )
    return groups
