"""Maintenance drain of one backend (out of every hostgroup, gracefully) and its restore.

Drain: OFFLINE_SOFT in each hostgroup the server is in, on every ProxySQL node -> wait for its ConnUsed
to reach 0 everywhere (on timeout: roll back, or OFFLINE_HARD if chosen) -> save -> mark it in
maintenance in the inventory. Restore puts back the statuses the inventory held before the drain, once the backend can serve (the
switchover's backend guards: Galera Synced, Primary, ready, receive queue; async replication running, lag).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from apps.clients.backend import BackendClient, NodeState
from apps.clients.proxysql import ServerRow, node_admin
from apps.clients.wire import ClientError
from apps.fleet.choices import ClusterKind
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.plans.vocabulary import (
    DRAIN_POLL_MS,
    INVENTORY,
    PROXYSQL,
    VERIFY,
    WAIT_DRAIN,
    Guard,
    Plan,
    Sql,
    Step,
    no_other_operation,
)

from . import pending_rows, shared
from .choices import OnDrainTimeout, OperationKind, OperationState
from .locks import current_holder
from .switchover import Part, Session, _row, backend_guards, current_writer, pinned_sessions, read_replica

RowKey = list[int | str]  # [hostgroup, host, port]: one of the server's rows, as the wait_drain step takes it
Expected = list[int | str]  # [hostgroup, host, port, status]: a row as the verify step expects it


@dataclass
class ServerStatements:
    """One node's statements for the server's rows there: the node's name, each step's part (drain, offline_hard,
    save; restore, save), the rows the verify expects and, for a drain, the rows the wait watches."""

    name: str
    parts: dict[str, Part]
    expect: list[Expected]
    targets: list[RowKey] = field(default_factory=list)


# build(node name, sql, the server's rows on that node): that node's statements
Build = Callable[[str, Sql, list[ServerRow]], ServerStatements]


def _read_nodes(
    cluster: Cluster, server: Server, build: Build
) -> tuple[dict[int, ServerStatements], list[str], dict[str, list[Session]]]:
    """Per node: build(name, sql, rows_of_server) -> statements; plus unreachable nodes and pinned sessions."""
    per_node: dict[int, ServerStatements] = {}
    unreachable: list[str] = []
    pinned: dict[str, list[Session]] = {}
    nodes = list(cluster.proxysql_nodes.order_by("pk"))
    others = {node.pk: shared.other_hostgroups(node) for node in nodes}  # a shared ProxySQL's other clusters
    for node in nodes:
        try:
            with node_admin(node) as admin:
                rows = [
                    r
                    for r in admin.servers("runtime")
                    if (r.hostname, r.port) == (server.hostname, server.port) and r.hostgroup_id not in others[node.pk]
                ]
                processlist = admin.processlist()
                per_node[node.pk] = build(node.name, Sql(admin), rows)
                pinned[node.name] = [
                    s for r in rows for s in pinned_sessions(processlist, r.hostgroup_id, r.hostname, r.port)
                ]
        except ClientError as exc:
            unreachable.append(f"{node.name}: {exc.message}")
    return per_node, unreachable, pinned


def _drain_build(name: str, sql: Sql, rows: list[ServerRow]) -> ServerStatements:
    """A drain's statements on one node, for the server's rows there."""
    return ServerStatements(
        name,
        {
            "drain": {
                "sql": [sql.set_status(r.hostgroup_id, r.hostname, r.port, "OFFLINE_SOFT") for r in rows]
                + [sql.LOAD_SERVERS],
                "rollback": [sql.replace_server(_row(r)) for r in rows] + [sql.LOAD_SERVERS],
            },
            "offline_hard": {
                "sql": [sql.set_status(r.hostgroup_id, r.hostname, r.port, "OFFLINE_HARD") for r in rows]
                + [sql.LOAD_SERVERS],
                "rollback": [sql.replace_server(_row(r)) for r in rows] + [sql.LOAD_SERVERS],
            },
            "save": {"sql": [sql.SAVE_SERVERS], "rollback": []},
        },
        [[r.hostgroup_id, r.hostname, r.port, "OFFLINE_SOFT"] for r in rows],
        [[r.hostgroup_id, r.hostname, r.port] for r in rows],
    )


@dataclass
class DrainRead:
    """What a drain reads, before it judges: per node the server's rows and the drain's statements for them
    (per_node), the nodes that did not answer, the sessions on the server; then the inventory (its memberships, the
    cluster's writers in service, its readers left besides it) and the cluster's lock and pending rows."""

    per_node: dict[int, ServerStatements]  # node pk -> its statements
    unreachable: list[str]  # "name: why"
    pinned: dict[str, list[Session]]  # node name -> the sessions pinned to the server there
    memberships: list[HostgroupMembership]
    writers: list[int]  # the pks of the servers writing now (in service)
    readers_left: int
    holder: str | None
    pending: Guard


def read_drain(server: Server) -> DrainRead:
    cluster = server.cluster
    per_node, unreachable, pinned = _read_nodes(cluster, server, _drain_build)
    in_service = HostgroupMembership.objects.filter(server__cluster=cluster, status="ONLINE", server__maintenance=False)
    return DrainRead(
        per_node,
        unreachable,
        pinned,
        list(HostgroupMembership.objects.filter(server=server)),
        list(in_service.filter(hostgroup_id=cluster.writer_hostgroup).values_list("server_id", flat=True)),
        in_service.filter(hostgroup_id=cluster.reader_hostgroup).exclude(server=server).count(),
        current_holder(cluster),
        pending_rows.guard(cluster),
    )


def plan_drain(
    server: Server, *, drain_timeout_ms: int | None = None, on_timeout: str = OnDrainTimeout.ROLLBACK, note: str = ""
) -> Plan:
    """The drain of one backend: read (read_drain), then judged (drain_guards) and built (drain_steps) from the read
    alone."""
    cluster = server.cluster
    timeout = drain_timeout_ms if drain_timeout_ms is not None else cluster.drain_timeout_ms
    read = read_drain(server)
    pinned_total = sum(len(v) for v in read.pinned.values())
    return shared.annotate(
        Plan(
            OperationKind.DRAIN,
            cluster.pk,
            f"Maintenance drain of {server} ({cluster.name})",
            drain_guards(server, read, timeout),
            drain_steps(server, read, timeout, on_timeout, note),
            facts={
                "pinned": read.pinned,
                "pinned_total": pinned_total,
                "sessions_cut_if_timeout": pinned_total,
                "server": str(server),
            },
            options={"server": server.pk, "drain_timeout_ms": timeout, "on_timeout": on_timeout, "note": note},
        ),
        cluster,
    )


def drain_guards(server: Server, read: DrainRead, timeout: int) -> list[Guard]:
    cluster = server.cluster
    only_writer = read.writers == [server.pk]
    return [
        Guard(
            "proxysql_reachable",
            "Every ProxySQL node of the cluster answers",
            not read.unreachable,
            "; ".join(read.unreachable) or "yes",
            False,
        ),
        # Said positively, with what was seen ("not ... only writer: no" read as a double negative).
        Guard(
            "not_the_writer",
            "Another writer stays for the cluster (if the server is its only writer: a switchover first)",
            not only_writer,
            "no: it is the only writer"
            if only_writer
            else ("yes: it is one of the writers" if server.pk in read.writers else "yes: not a writer"),
            False,
        ),
        Guard(
            "min_readers",
            f"At least {cluster.min_available_readers} reader(s) stay ONLINE",
            read.readers_left >= cluster.min_available_readers,
            f"{read.readers_left} left",
        ),
        no_other_operation(read.holder),
        read.pending,
        Guard(
            "not_in_maintenance",
            "The server is in service (a drained one is restored, not drained again)",
            not server.maintenance,
            "in maintenance" if server.maintenance else "yes",
            False,
        ),
        Guard("drain_timeout", "A drain timeout is set", timeout > 0, f"{timeout} ms", False),
    ]


def _per_node(read: "DrainRead | RestoreRead", part: str) -> dict[str, dict[str, object]]:
    """A step's params: per node (its pk) its name and its part of the step (sql, rollback)."""
    return {str(pk): {"name": v.name, **v.parts[part]} for pk, v in read.per_node.items()}


def drain_steps(server: Server, read: DrainRead, timeout: int, on_timeout: str, note: str) -> list[Step]:
    targets = sorted({tuple(t) for v in read.per_node.values() for t in v.targets})
    return [
        Step("drain", f"{server} to OFFLINE_SOFT in every hostgroup", PROXYSQL, _per_node(read, "drain")),
        Step(
            "wait_drain",
            f"Wait until {server}'s ConnUsed is 0 on every node",
            WAIT_DRAIN,
            params={
                "targets": [list(t) for t in targets],
                "timeout_ms": timeout,
                "poll_ms": DRAIN_POLL_MS,
                "on_timeout": on_timeout,
                "offline_hard": _per_node(read, "offline_hard"),
            },
        ),
        Step(
            "verify",
            "Verify every node's runtime",
            VERIFY,
            params={
                "expect": {str(pk): v.expect for pk, v in read.per_node.items()},
                "allow_offline_hard": on_timeout == OnDrainTimeout.OFFLINE_HARD,
            },
        ),
        Step(
            "save",
            "Save MYSQL SERVERS to disk on every node",
            PROXYSQL,
            _per_node(read, "save"),
            point_of_no_return=True,
        ),
        Step(
            "inventory",
            f"Mark {server} in maintenance",
            INVENTORY,
            params={
                "action": "maintenance_on",
                "server": server.pk,
                "note": note,
                "statuses": {str(m.hostgroup_id): m.status for m in read.memberships},
            },
        ),
    ]


@dataclass
class RestoreRead:
    """What a restore reads, before it judges: the statuses the inventory held before the last drain (before), its
    memberships (intended), per node the server's rows and the restore's statements, the nodes that did not answer,
    the backend's own guards (backend: they read the backend), the cluster's lock and pending rows."""

    before: dict[int, str]  # hostgroup -> the server's status there before the drain
    intended: dict[int, HostgroupMembership]  # hostgroup -> the server's membership
    per_node: dict[int, ServerStatements]
    unreachable: list[str]
    backend: list[Guard]
    holder: str | None
    pending: Guard


def read_restore(server: Server) -> RestoreRead:
    cluster = server.cluster
    intended = {m.hostgroup_id: m for m in HostgroupMembership.objects.filter(server=server)}
    before: dict[int, str] = {}
    last_drain = (
        cluster.operations.filter(kind=OperationKind.DRAIN, state=OperationState.DONE, plan__options__server=server.pk)
        .order_by("-id")
        .first()
    )
    if last_drain:
        step = next((s for s in last_drain.plan["steps"] if s["key"] == "inventory"), None)
        before = {int(k): v for k, v in (step or {}).get("params", {}).get("statuses", {}).items()}

    def build(name: str, sql: Sql, rows: list[ServerRow]) -> ServerStatements:
        forward: list[str] = []
        undo: list[str] = []
        expect: list[Expected] = []
        for r in rows:
            status = before.get(r.hostgroup_id, "ONLINE")
            forward.append(sql.set_status(r.hostgroup_id, r.hostname, r.port, status))
            undo.append(sql.replace_server(_row(r)))
            expect.append([r.hostgroup_id, r.hostname, r.port, status])
        return ServerStatements(
            name,
            {
                "restore": {"sql": forward + [sql.LOAD_SERVERS], "rollback": undo + [sql.LOAD_SERVERS]},
                "save": {"sql": [sql.SAVE_SERVERS], "rollback": []},
            },
            expect,
        )

    per_node, unreachable, _ = _read_nodes(cluster, server, build)
    return RestoreRead(
        before,
        intended,
        per_node,
        unreachable,
        _backend_guards(cluster, server, intended),
        current_holder(cluster),
        pending_rows.guard(cluster),
    )


def plan_restore(server: Server) -> Plan:
    """Back from maintenance: the statuses the inventory held before the drain, on every node. Read (read_restore),
    then judged and built from the read alone."""
    cluster = server.cluster
    read = read_restore(server)
    guards = [
        Guard(
            "proxysql_reachable",
            "Every ProxySQL node of the cluster answers",
            not read.unreachable,
            "; ".join(read.unreachable) or "yes",
            False,
        ),
        Guard(
            "in_maintenance",
            "The server is in maintenance",
            server.maintenance,
            "yes" if server.maintenance else "no",
            False,
        ),
        no_other_operation(read.holder),
        read.pending,
        *read.backend,
    ]
    steps = [
        Step("restore", f"{server} back to its statuses", PROXYSQL, _per_node(read, "restore")),
        Step(
            "verify",
            "Verify every node's runtime",
            VERIFY,
            params={"expect": {str(pk): v.expect for pk, v in read.per_node.items()}},
        ),
        Step(
            "save",
            "Save MYSQL SERVERS to disk on every node",
            PROXYSQL,
            _per_node(read, "save"),
            point_of_no_return=True,
        ),
        Step(
            "inventory",
            f"Take {server} out of maintenance",
            INVENTORY,
            params={
                "action": "maintenance_off",
                "server": server.pk,
                "statuses": {str(hg): read.before.get(hg, "ONLINE") for hg in read.intended},
            },
        ),
    ]
    return shared.annotate(
        Plan(
            OperationKind.RESTORE,
            cluster.pk,
            f"Restore {server} from maintenance ({cluster.name})",
            guards,
            steps,
            options={"server": server.pk},
        ),
        cluster,
    )


def _backend_guards(cluster: Cluster, server: Server, intended: dict[int, HostgroupMembership]) -> list[Guard]:
    """Can the server serve again? An async replica is also checked to replicate from the current writer;
    the async writer itself (back in the writer hostgroup) has no replication to check."""
    state: NodeState | ClientError
    try:
        with BackendClient.for_server(server) as client:
            state = client.state()
    except ClientError as exc:
        state = exc
    if isinstance(state, ClientError) or cluster.kind != ClusterKind.ASYNC:
        return backend_guards(cluster, server, state, "server")
    if cluster.writer_hostgroup in intended:
        return []  # the async writer: no replication of its own to check
    writer = current_writer(cluster)
    source = writer.server if writer and writer.server_id != server.pk else None
    return backend_guards(cluster, server, state, "server", source=source, replica=read_replica(server))
