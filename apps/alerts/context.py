"""What the evaluation knows besides the documents: the inventory (clusters, nodes, backends, intended
mysql_servers rows), kept per process for INVENTORY_CACHE_S because it changes rarely and the rules that
read it are slow ones (drift counts in minutes); and, read fresh at every round, which backends are in
maintenance and which operations run or ended (holds, operation alerts).
"""

import time
from dataclasses import dataclass, field
from datetime import timedelta
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from apps.clients.proxysql import SERVER_FIELDS, configured_status
from apps.dr.models import ReplicationChannel
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server, endpoint_key
from apps.operations.choices import OperationState
from apps.monitoring import status
from apps.monitoring.pollers import STATUS_CHANGES_KEEP_S
from apps.operations.models import Operation

RowKey = tuple[int, str, int]  # (hostgroup, host, port)
INVENTORY_CACHE_S = 60.0
SITUATION_CACHE_S = 1.0
_ROW = itemgetter("hostgroup_id", "hostname", "port", *SERVER_FIELDS)  # SERVER_FIELDS starts with status
RUNNING = (
    OperationState.PENDING,
    OperationState.RUNNING,
    OperationState.ROLLING_BACK,
)  # planned work in progress (holds)
# An operation waiting for a node to take what it missed: its alert rule has the state's name; the summary's
# fallback when the operation has no error text.
PENDING: dict[str, str] = {
    OperationState.ROLLBACK_PENDING: "a node stopped answering during the rollback",
    OperationState.FINISH_PENDING: "a node stopped answering after the point of no return",
}
FAILED = OperationState.FAILED
OPERATION_WINDOW_MAX_S = 7 * 86400
OWN_CHANGES_S = STATUS_CHANGES_KEEP_S  # operations whose row changes the latest-state documents may still hold


@dataclass
class NodeCtx:
    pk: int
    name: str
    admin_host: str
    admin_port: int
    cluster_id: int
    also_serves: list[str] = field(default_factory=list)  # the other clusters of this ProxySQL (one row each)


@dataclass
class ServerCtx:
    pk: int
    hostname: str
    port: int
    cluster_id: int
    maintenance: bool = False

    def __str__(self) -> str:
        return f"{self.hostname}:{self.port}"


@dataclass
class ChannelCtx:
    """A DR channel, judged on its replica cluster."""

    pk: int
    name: str
    max_lag_s: int
    replica_server: int


@dataclass
class ClusterCtx:
    pk: int
    name: str
    kind: str
    writer_hostgroup: int
    reader_hostgroup: int
    interval: float  # ProxySQL nodes are polled this often...
    backend_interval: float  # ...and backends this often
    max_replication_lag: int
    min_available_readers: int
    poll_interval_s: float
    hostgroups: set[int] = field(default_factory=set)
    nodes: dict[int, NodeCtx] = field(default_factory=dict)
    servers: dict[int, ServerCtx] = field(default_factory=dict)
    channels: dict[int, ChannelCtx] = field(default_factory=dict)  # the DR channels into this cluster
    by_endpoint: dict[tuple[str, int], int] = field(default_factory=dict)  # (host, port) -> server pk
    intended: dict[RowKey, dict[str, Any]] = field(default_factory=dict)  # drift.compare() input
    intended_fingerprint: frozenset[tuple[Any, ...]] = frozenset()
    managed: set[int] = field(default_factory=set)  # natively managed: the hostgroups ProxySQL's Monitor places

    def server_at(self, host: str, port: int) -> int | None:
        return self.by_endpoint.get((host, port))

    @staticmethod
    def row_tuple(r: dict[str, Any]) -> tuple[Any, ...]:
        """A runtime row as a comparable tuple of its configuration (ProxySQL's own SHUNNED reads as ONLINE)."""
        t = _ROW(r)
        return t if t[3] != "SHUNNED" else (*t[:3], configured_status(t[3]), *t[4:])


@dataclass
class Inventory:
    clusters: dict[int, ClusterCtx]
    node_cluster: dict[int, int]  # node pk -> cluster pk
    server_cluster: dict[int, int]  # server pk -> cluster pk
    loaded: float  # monotonic, for the cache's age
    loaded_at: float = 0.0  # epoch, to compare with when operations ended
    channel_cluster: dict[int, int] = field(default_factory=dict)  # DR channel pk -> its replica cluster's pk


@dataclass
class _Cache:
    inventory: "Inventory | None" = None
    situation: "Situation | None" = None
    situation_at: float = 0.0


_cache = _Cache()


def forget() -> None:
    _cache.inventory = None
    _cache.situation = None


def inventory(changed_after: float | None = None) -> Inventory:
    """The fleet's inventory as plain objects, in four flat queries, reused for INVENTORY_CACHE_S, or read
    again when it was read before `changed_after` (epoch: an operation, which may change it, ended then)."""
    cached = _cache.inventory
    if (
        cached is not None
        and time.monotonic() - cached.loaded < INVENTORY_CACHE_S
        and (changed_after is None or cached.loaded_at > changed_after)
    ):
        return cached
    clusters: dict[int, ClusterCtx] = {}
    for c in Cluster.objects.values(
        "id",
        "name",
        "kind",
        "writer_hostgroup",
        "reader_hostgroup",
        "backup_writer_hostgroup",
        "offline_hostgroup",
        "poll_interval_s",
        "backend_poll_interval_s",
        "max_replication_lag",
        "min_available_readers",
        "native_manager",
    ):
        ctx = ClusterCtx(
            pk=c["id"],
            name=c["name"],
            kind=c["kind"],
            writer_hostgroup=c["writer_hostgroup"],
            reader_hostgroup=c["reader_hostgroup"],
            interval=status.interval_of(c["poll_interval_s"]),
            backend_interval=status.interval_of(c["backend_poll_interval_s"]),
            max_replication_lag=c["max_replication_lag"],
            min_available_readers=c["min_available_readers"],
            poll_interval_s=c["poll_interval_s"],
        )
        ctx.hostgroups = {
            hg
            for hg in (
                c["writer_hostgroup"],
                c["reader_hostgroup"],
                c["backup_writer_hostgroup"],
                c["offline_hostgroup"],
            )
            if hg is not None
        }
        ctx.managed = set(ctx.hostgroups) if c["native_manager"] else set()
        clusters[ctx.pk] = ctx
    node_cluster: dict[int, int] = {}
    server_cluster: dict[int, int] = {}
    for pk, cluster_id, name, host, port in ProxySQLNode.objects.values_list(
        "id", "cluster_id", "name", "admin_host", "admin_port"
    ):
        clusters[cluster_id].nodes[pk] = NodeCtx(pk, name, host, port, cluster_id)
        node_cluster[pk] = cluster_id
    by_endpoint: dict[Any, list[NodeCtx]] = {}
    for ctx in clusters.values():
        for n in ctx.nodes.values():
            by_endpoint.setdefault(endpoint_key(n.admin_host, n.admin_port), []).append(n)
    for rows in by_endpoint.values():
        for n in rows if len(rows) > 1 else ():
            n.also_serves = sorted(clusters[o.cluster_id].name for o in rows if o is not n)
    for pk, cluster_id, host, port, maintenance in Server.objects.values_list(
        "id", "cluster_id", "hostname", "port", "maintenance"
    ):
        clusters[cluster_id].servers[pk] = ServerCtx(pk, host, port, cluster_id, maintenance)
        clusters[cluster_id].by_endpoint[(host, port)] = pk
        server_cluster[pk] = cluster_id
    for server_id, hg, *values in HostgroupMembership.objects.values_list("server_id", "hostgroup_id", *SERVER_FIELDS):
        cluster = clusters[server_cluster[server_id]]
        s = cluster.servers[server_id]
        cluster.intended[(hg, s.hostname, s.port)] = dict(zip(SERVER_FIELDS, values))
        cluster.hostgroups.add(hg)
    channel_cluster: dict[int, int] = {}
    for pk, cluster_id, name, max_lag_s, replica in ReplicationChannel.objects.values_list(
        "id", "replica_cluster_id", "name", "max_lag_s", "replica_server_id"
    ):
        clusters[cluster_id].channels[pk] = ChannelCtx(pk, name, max_lag_s, replica)
        channel_cluster[pk] = cluster_id
    for ctx in clusters.values():
        ctx.intended_fingerprint = frozenset((*k, *(v[f] for f in SERVER_FIELDS)) for k, v in ctx.intended.items())
    fresh = Inventory(clusters, node_cluster, server_cluster, time.monotonic(), time.time(), channel_cluster)
    _cache.inventory = fresh
    return fresh


# -- operations and maintenance: read at every evaluation --------------------------------------------
@dataclass
class Work:
    """Planned work on a cluster: an operation running (or just ended, until the polls have seen its end),
    or a backend in maintenance."""

    kind: str
    cluster_id: int
    operation_id: int | None
    involved: set[int]
    until: float | None  # epoch: the hold ends then (None: while it runs)
    reason: str


@dataclass
class OwnChanges:
    """When an operation of the cluster changed its ProxySQL nodes' rows, as the polls date what they saw: from
    a round before its start (a round is dated when it begins) until the first poll after its end (at the
    latest when a node not polled since would be stale), or while it runs (end None)."""

    kind: str
    operation_id: int
    start: float
    end: float | None
    involved: set[int]


@dataclass
class OperationAlert:
    pk: int
    cluster_id: int
    rule: str
    title: str
    summary: str
    started: float | None
    error: str
    ended: float | None = None


@dataclass
class Situation:
    work: dict[int, list[Work]]  # cluster pk -> its work
    op_alerts: dict[int, list[OperationAlert]]  # cluster pk -> its operation alerts
    last_ended: float | None = None  # epoch: the latest end of an operation in the last minute
    own_changes: dict[int, list[OwnChanges]] = field(default_factory=dict)  # of the last OWN_CHANGES_S


def involved_servers(plan: dict[str, Any]) -> set[int]:
    """The backends an operation is about, from its stored plan."""
    out: set[int] = set()
    options, facts = plan.get("options") or {}, plan.get("facts") or {}
    for value in (options.get("server"), facts.get("old_writer"), facts.get("new_writer")):
        if isinstance(value, int):
            out.add(value)
    for step in plan.get("steps") or []:
        params = step.get("params") or {}
        for key in ("old", "new", "server"):
            if isinstance(params.get(key), int):
                out.add(params[key])
    return out


def situation(inv: Inventory, now: float) -> Situation:
    """Holds and operation alerts (the last read of this process when under SITUATION_CACHE_S old)."""
    if _cache.situation is not None and 0 <= now - _cache.situation_at < SITUATION_CACHE_S:
        return _cache.situation
    value = read_situation(inv, now)
    _cache.situation, _cache.situation_at = value, now
    return value


def read_situation(inv: Inventory, now: float) -> Situation:
    """Holds and operation alerts, from two small indexed queries and the maintenance flags."""
    settle_max = timedelta(seconds=2 * max([c.interval for c in inv.clusters.values()] or [2]) + 5)
    work: dict[int, list[Work]] = {}
    op_alerts: dict[int, list[OperationAlert]] = {}
    own_since = timezone.now() - timedelta(seconds=OWN_CHANGES_S)
    wanted = (
        Q(state__in=RUNNING)
        | Q(finished_at__gte=min(timezone.now() - settle_max, own_since))
        | Q(state__in=PENDING)
        | Q(state=FAILED, finished_at__gte=timezone.now() - timedelta(seconds=OPERATION_WINDOW_MAX_S))
    )
    rows = list(
        _operations()
        .filter(wanted)
        .values("id", "cluster_id", "kind", "state", "title", "plan", "error", "started_at", "finished_at")
    )
    own_changes: dict[int, list[OwnChanges]] = {}
    last_done = dict(
        _operations()
        .filter(state=OperationState.DONE, finished_at__gte=timezone.now() - timedelta(seconds=OPERATION_WINDOW_MAX_S))
        .values("cluster_id")
        .annotate(last=Max("finished_at"))
        .values_list("cluster_id", "last")
    )
    for op in rows:
        c = inv.clusters.get(op["cluster_id"])
        if c is None:
            continue
        finished = op["finished_at"].timestamp() if op["finished_at"] else None
        started = op["started_at"].timestamp() if op["started_at"] else None
        settle = settings.ALERTS_HOLD_SETTLE_POLLS * max(c.interval, c.backend_interval)
        running = op["state"] in RUNNING
        if started is not None and (running or (finished is not None and finished >= own_since.timestamp())):
            own_changes.setdefault(c.pk, []).append(
                OwnChanges(
                    op["kind"],
                    op["id"],
                    started - c.interval,
                    None if running else finished + max(settle, status.stale_after(c.interval)),
                    involved_servers(op["plan"] or {}),
                )
            )
        if op["state"] in RUNNING or (finished is not None and now < finished + settle and op["state"] not in PENDING):
            work.setdefault(c.pk, []).append(
                Work(
                    op["kind"],
                    c.pk,
                    op["id"],
                    involved_servers(op["plan"] or {}),
                    None if op["state"] in RUNNING else finished + settle,
                    f"operation #{op['id']} ({op['kind']}) " + ("running" if op["state"] in RUNNING else "just ended"),
                )
            )
        if (
            op["state"] in PENDING
        ):  # "operation #5 left a finish pending: done on the other nodes; FINISH PENDING on ..."
            op_alerts.setdefault(c.pk, []).append(
                OperationAlert(
                    op["id"],
                    c.pk,
                    op["state"],
                    op["title"],
                    f"operation #{op['id']} left a "
                    f"{op['state'].replace('_', ' ')}: {op['error'][:300] or PENDING[op['state']]}",
                    finished or started,
                    op["error"][:1000],
                )
            )
        elif op["state"] == FAILED and finished is not None:
            later = last_done.get(c.pk)
            if later is None or later.timestamp() < finished:
                op_alerts.setdefault(c.pk, []).append(
                    OperationAlert(
                        op["id"],
                        c.pk,
                        "operation_failed",
                        op["title"],
                        f"operation #{op['id']} ({op['kind']}) failed: {op['error'][:300]}",
                        finished,
                        op["error"][:1000],
                        finished,
                    )
                )
    for pk, cluster_id in Server.objects.filter(maintenance=True).values_list("id", "cluster_id"):
        if cluster_id in inv.clusters:
            work.setdefault(cluster_id, []).append(
                Work(
                    "maintenance",
                    cluster_id,
                    None,
                    {pk},
                    None,
                    f"backend {inv.clusters[cluster_id].servers.get(pk, pk)} in maintenance",
                )
            )
    ended = [op["finished_at"].timestamp() for op in rows if op["finished_at"]]
    return Situation(work, op_alerts, max(ended) if ended else None, own_changes)


def _operations() -> QuerySet[Operation]:
    return Operation.objects.all()
