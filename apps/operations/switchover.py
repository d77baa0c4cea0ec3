"""Planned switchover, writer A to writer B: the planner. It reads every ProxySQL node of the cluster
and both backends now, checks the guards, looks at what holds the old writer (pinned sessions and why),
and writes the plan: per node the exact statements and their rollback.

Steps: [Galera: promote B] -> [lower auto_increment_delay_multiplex] -> drain A (OFFLINE_SOFT) -> wait for
ConnUsed 0 on every node -> [Galera catch-up: B's wsrep_last_committed >= A's] -> [others: promote B] ->
move hostgroups (B and A swap their role rows) -> verify runtime -> save to disk -> [restore the variable]
-> inventory. The writer is held from the drain's LOAD to the move's: nothing else happens in between.
"""

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypedDict

from django.db.models import F

from apps.clients.backend import BackendClient, NodeState
from apps.clients.proxysql import ServerRow, configured, configured_status, node_admin
from apps.clients.wire import ClientError
from apps.configuration.services import ServerFields, ServerKey
from apps.fleet.choices import ClusterKind
from apps.fleet.drift import AUTOINC
from apps.fleet.layout import swapped_roles
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.plans.vocabulary import (
    no_other_operation,
    BACKEND,
    DRAIN_POLL_MS,
    INVENTORY,
    PROXYSQL,
    SERVER_COLUMNS,
    VERIFY,
    WAIT_CATCHUP,
    WAIT_DRAIN,
    Guard,
    Plan,
    Sql,
    Step,
)

from . import pending_rows, shared
from .choices import OnDrainTimeout, OperationKind
from .locks import current_holder

EXTENDED = "mysql-show_processlist_extended"
AUTOINC_TOKEN = "auto_increment_delay_token"
# Reasons a session keeps its backend connection until the client ends it (or undoes what it did): a drain
# does not wait them out, and lowering the auto-increment delay does not free them.
HOLDING = (
    "user_variable",
    "temporary_table",
    "lock_tables",
    "get_lock",
    "prepared_statement",
    "no_multiplex",
    "no_multiplex_HG",
    "multiplexing disabled",
)

BackendState = NodeState | ClientError  # a backend's BackendClient.state(), or the ClientError that read raised
ReplicaStatus = dict[str, Any]  # SHOW REPLICA STATUS as read ({} no replica, {"error": why} the read failed)
Session = dict[str, Any]  # pinned_sessions(): one processlist row with the reasons it is pinned


class Part(TypedDict):
    """One node's statements for one step, and their way back."""

    sql: list[str]
    rollback: list[str]


class Note(TypedDict):
    """A line of notes(): "info", "warning" or "error", and what it says."""

    level: str
    text: str


WRITER_ORDER = ("-weight", "server__port")  # of a writer hostgroup's members not OFFLINE_HARD: the first writes


def current_writer(cluster: Cluster) -> HostgroupMembership | None:
    """The inventory's writer: the ONLINE member of the writer hostgroup with the highest weight."""
    return (
        HostgroupMembership.objects.filter(server__cluster=cluster, hostgroup_id=cluster.writer_hostgroup)
        .exclude(status="OFFLINE_HARD")
        .select_related("server")
        .order_by(*WRITER_ORDER)
        .first()
    )


def current_writers(clusters: Iterable[Cluster]) -> dict[int, HostgroupMembership]:
    """{cluster id: current_writer(cluster)} of many clusters in one query (a cluster with none left out): the
    writer watch reads its targets every second, a query a cluster would cost a fleet hundreds a second."""
    by_pk = {c.pk: c for c in clusters}
    writers: dict[int, HostgroupMembership] = {}
    members = (
        HostgroupMembership.objects.filter(
            server__cluster__in=list(by_pk), hostgroup_id=F("server__cluster__writer_hostgroup")
        )
        .exclude(status="OFFLINE_HARD")
        .select_related("server")
        .order_by("server__cluster_id", *WRITER_ORDER)
    )
    for member in members:
        writers.setdefault(member.server.cluster_id, member)  # the first of each cluster in WRITER_ORDER
    return writers


def replica_of(client: BackendClient) -> ReplicaStatus:
    """A backend's SHOW REPLICA STATUS as backend_guards judges it: {} when it is no replica, {"error": why} when
    the read failed."""
    try:
        return client.replica_status() or {}
    except ClientError as exc:
        return {"error": exc.message}


def read_replica(server: Server) -> ReplicaStatus:
    """replica_of() on a connection of its own (the error of opening it said the same way)."""
    try:
        with BackendClient.for_server(server) as client:
            return replica_of(client)
    except ClientError as exc:
        return {"error": exc.message}


def backend_guards(
    cluster: Cluster,
    server: Server,
    state: BackendState | None,
    prefix: str,
    source: Server | None = None,
    replica: ReplicaStatus | None = None,
) -> list[Guard]:
    """What a backend must be before it takes traffic (a switchover's new writer, a server back from
    maintenance). Galera: Synced, in the Primary component, wsrep_ready, its receive queue within the cluster's
    limit. Async: its replication threads running (from `source` when given) and its lag within the limit.
    `state` is its BackendClient.state() or the ClientError that read raised; `replica` (async) its replica_of()
    read beside it: the guards read nothing."""
    if isinstance(state, ClientError) or state is None:
        return [
            Guard(f"{prefix}_reachable", f"{server} answers", False, getattr(state, "message", "not polled"), False)
        ]
    if cluster.kind == ClusterKind.GALERA:
        return [
            Guard(
                f"{prefix}_synced",
                f"{server} is Synced",
                state.local_state == 4,
                f"{state.local_state} {state.local_state_comment}",
            ),
            Guard(
                f"{prefix}_primary",
                f"{server} is in the Primary component",
                state.cluster_status == "Primary",
                str(state.cluster_status),
            ),
            Guard(f"{prefix}_ready", f"{server} wsrep_ready is ON", bool(state.ready), "ON" if state.ready else "OFF"),
            Guard(
                f"{prefix}_queue",
                f"{server} recv queue <= {cluster.max_replication_lag}",
                (state.local_recv_queue or 0) <= cluster.max_replication_lag,
                str(state.local_recv_queue),
            ),
        ]
    if cluster.kind != ClusterKind.ASYNC:
        return []
    replica = replica or {}
    lag = replica.get("Seconds_Behind_Master")
    guards: list[Guard] = []
    if source is not None:
        guards.append(
            Guard(
                f"{prefix}_replicates_old",
                f"{server} replicates from {source}",
                str(replica.get("Master_Port")) == str(source.port)
                and replica.get("Master_Host") in (source.hostname, "127.0.0.1", "localhost"),
                f"{replica.get('Master_Host')}:{replica.get('Master_Port')}" if replica else "not a replica",
            )
        )
    return guards + [
        Guard(
            f"{prefix}_replication_running",
            f"{server}'s replication threads run",
            replica.get("Slave_IO_Running") == "Yes" and replica.get("Slave_SQL_Running") == "Yes",
            f"IO {replica.get('Slave_IO_Running')}, SQL {replica.get('Slave_SQL_Running')}",
        ),
        Guard(
            f"{prefix}_lag",
            f"{server} lag <= {cluster.max_replication_lag} s",
            lag is not None and lag != "" and int(lag) <= cluster.max_replication_lag,
            str(lag),
        ),
    ]


def pinned_sessions(rows: Iterable[Mapping[str, Any]], hostgroup: int, hostname: str, port: int) -> list[Session]:
    """Sessions holding a backend connection to (hostgroup, host:port), with the reason each is pinned
    when the extended processlist names one."""
    out: list[Session] = []
    for row in rows:
        if row.get("hostgroup") != hostgroup or row.get("srv_host") != hostname or row.get("srv_port") != port:
            continue
        reasons: list[str] = []
        for backend in (row.get("extended_info") or {}).get("backends", []):
            conn = backend.get("conn") or {}
            if conn.get("auto_increment_delay_token"):
                reasons.append("auto_increment_delay_token")
            for flag, on in (conn.get("status") or {}).items():
                if on is True:
                    reasons.append(flag)
            if conn.get("MultiplexDisabled") and not reasons:
                reasons.append("multiplexing disabled")
        out.append(
            {
                "session": row.get("SessionID"),
                "user": row.get("user"),
                "command": row.get("command"),
                "time_ms": row.get("time_ms"),
                "info": (row.get("info") or "")[:200],
                "reasons": sorted(set(reasons))
                or (["unknown (extended processlist off)"] if row.get("extended_info") is None else ["in a query"]),
            }
        )
    return out


NATIVE_REFUSAL = (
    "The cluster is not natively managed (here {manager} and ProxySQL's Monitor choose the writer and "
    "move the servers themselves: this product's switchover moves the rows and would fight them, so it "
    "is refused. Move the writer through the manager: {how}; a switchover that does that for you is not "
    "built yet)"
)
# How each manager is made to move the writer (lab/reference/native-galera/, native-replication/).
NATIVE_HOW = {
    "replication": "promote the new primary on the backends (read_only ON on the old one, the replicas "
    "re-pointed, read_only OFF on the new one): Monitor follows read_only within one check"
}
# The managers whose switchover this product plans through them (native_switchover.py, native_galera_switchover.py:
# the Galera manager by the weights, OFFLINE_SOFT alone does not move it): the others are refused.
NATIVE_WAYS = ("replication", "galera")
# Their planners, put here by this app's AppConfig.ready(): they build on this module's helpers, so this module
# never imports them (no import circle).
NATIVE_PLANNERS: dict[str, "NativePlanner"] = {}


class NativePlanner(Protocol):
    """A native manager's planner (native_switchover.py, native_galera_switchover.py), as plan_switchover calls it."""

    def __call__(
        self,
        cluster: Cluster,
        new_writer: Server,
        *,
        drain_timeout_ms: int,
        on_timeout: str,
        lower_autoinc: bool | None,
        monitor_timeout_ms: int | None,
        catchup_timeout_ms: int,
    ) -> Plan: ...


def plan_switchover(
    cluster: Cluster,
    new_writer: Server,
    *,
    drain_timeout_ms: int | None = None,
    on_timeout: str = OnDrainTimeout.ROLLBACK,
    lower_autoinc: bool | None = None,
    old_writer_to: str = "reader",
    catchup_timeout_ms: int = 2000,
    monitor_timeout_ms: int | None = None,
) -> Plan:
    """Build the switchover plan from what the nodes say now. Network reads only; writes nothing. In three parts:
    read (read_switchover: every ProxySQL node and backend once), judge (switchover_guards: the guards and facts,
    from the read alone), build (switchover_steps: the steps and their statements, from the read alone).

    lower_autoinc None: the planner chooses, the auto-increment way when sessions are pinned by
    auto_increment_delay_multiplex (the stored options keep the choice it made); True or False: the operator's.
    A cluster whose writer ProxySQL's own manager moves (NATIVE_WAYS) is planned through it; monitor_timeout_ms is
    that plan's bound on Monitor's placement (None: the planner's)."""
    longer_timeout = drain_timeout_ms is not None and drain_timeout_ms > cluster.drain_timeout_ms
    drain_timeout_ms = drain_timeout_ms if drain_timeout_ms is not None else cluster.drain_timeout_ms
    if cluster.native_manager in NATIVE_WAYS:  # Monitor moves the writer; the plan makes it (native_switchover.py)
        return NATIVE_PLANNERS[cluster.native_manager](
            cluster,
            new_writer,
            drain_timeout_ms=drain_timeout_ms,
            on_timeout=on_timeout,
            lower_autoinc=lower_autoinc,
            monitor_timeout_ms=monitor_timeout_ms,
            catchup_timeout_ms=catchup_timeout_ms,
        )
    if cluster.native_manager:  # Monitor chooses the writer: moving rows here would fight it (fleet/native.py)
        refusal = NATIVE_REFUSAL.format(
            manager=cluster.get_native_manager_display(),
            how=NATIVE_HOW.get(cluster.native_manager, "as its documentation says"),
        )
        guard = Guard("native_manager", refusal, False, cluster.native_manager, False)
        return Plan(OperationKind.SWITCHOVER, cluster.pk, f"Switchover {cluster.name}", [guard], [], {"nodes": {}})
    old = current_writer(cluster)
    if old is None:
        guard = Guard("writer", "The cluster has a writer in its writer hostgroup", False, "none", False)
        return Plan(OperationKind.SWITCHOVER, cluster.pk, "Switchover", [guard], [], {"nodes": {}})
    A, B = old.server, new_writer
    read = read_switchover(cluster, A, B, old_writer_to)
    guards, facts, lower_autoinc = switchover_guards(
        cluster,
        A,
        B,
        read,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        longer_timeout=longer_timeout,
        lower_autoinc=lower_autoinc,
    )
    steps = switchover_steps(
        cluster,
        A,
        B,
        read,
        lower_autoinc=lower_autoinc,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        catchup_timeout_ms=catchup_timeout_ms,
        old_writer_to=old_writer_to,
    )
    options = {
        "drain_timeout_ms": drain_timeout_ms,
        "on_timeout": on_timeout,
        "lower_autoinc": lower_autoinc,
        "old_writer_to": old_writer_to,
        "new_writer": B.pk,
        "old_writer": A.pk,
        "autoinc_values": {str(pk): n.variables.get(AUTOINC) for pk, n in read.answered.items()},
    }
    title = f"Switchover {cluster.name}: writer {A} → {B}"
    return shared.annotate(Plan(OperationKind.SWITCHOVER, cluster.pk, title, guards, steps, facts, options), cluster)


@dataclass
class NodeRead:
    """One ProxySQL node as a switchover reads it: its mysql_servers (runtime, memory), the variables, the sessions
    on the old writer and the plan's statements for it, rendered with its driver's escaping (node_statements)."""

    node: ProxySQLNode
    runtime: list[ServerRow]
    memory: list[ServerRow]
    variables: dict[str, str]
    sessions: list[Session]
    statements: "NodeStatements"


@dataclass
class NodeStatements:
    """One node's statements for a switchover: each step's part (autoinc_off, autoinc_restore, save, drain,
    offline_hard, move) and the rows its runtime must have after the move ([hostgroup, host, port, columns]: the
    verify's)."""

    parts: dict[str, Part]
    expect: list[list[Any]]


@dataclass
class ClusterRead:
    """What every switchover (the product's and the native managers') reads besides its ProxySQL nodes: the cluster's
    backends and each one's state ({server pk: state, or the ClientError it answered}), and the console's own: the
    operation holding the cluster's lock, the guard on rows pending a rollback's retry."""

    servers: list[Server]
    backends: dict[int, BackendState]
    holder: str | None
    pending: Guard
    replicas: dict[int, ReplicaStatus] = field(
        default_factory=dict
    )  # async: {server pk: replica_of()} read on the state's connection


def read_cluster(cluster: Cluster) -> ClusterRead:
    """Every backend of the cluster read once (an async one's replica status too), then the cluster's lock and
    pending rows."""
    servers = list(cluster.servers.order_by("hostname", "port"))
    states: dict[int, BackendState] = {}
    replicas: dict[int, ReplicaStatus] = {}
    for server in servers:
        try:
            with BackendClient.for_server(server) as client:
                states[server.pk] = client.state()
                if cluster.kind == ClusterKind.ASYNC:
                    replicas[server.pk] = replica_of(client)
        except ClientError as exc:
            states[server.pk] = exc
    return ClusterRead(servers, states, current_holder(cluster), pending_rows.guard(cluster), replicas)


@dataclass
class SwitchoverRead:
    """Everything a switchover plan reads, before it judges: every ProxySQL node once (answered: {pk: NodeRead},
    in node order; unreachable: "name: why"), then the cluster (ClusterRead)."""

    nodes: list[ProxySQLNode]
    answered: dict[int, NodeRead] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)
    cluster: ClusterRead | None = None


def read_switchover(cluster: Cluster, A: Server, B: Server, old_writer_to: str) -> SwitchoverRead:
    """The read: every ProxySQL node once (through the executor's open connection at an operation's start), then
    every backend, then the cluster's lock and pending rows. The only part of the plan that reads anything."""
    W = cluster.writer_hostgroup
    read = SwitchoverRead(list(cluster.proxysql_nodes.order_by("pk")))
    for node in read.nodes:
        try:
            with node_admin(node) as admin:
                runtime = admin.servers("runtime")
                memory = admin.servers("memory")
                variables = admin.global_variables([AUTOINC, EXTENDED])
                sessions = pinned_sessions(admin.processlist(), W, A.hostname, A.port)
                statements = _node_statements(Sql(admin), cluster, A, B, runtime, variables, old_writer_to)
        except ClientError as exc:
            read.unreachable.append(f"{node.name}: {exc.message}")
            continue
        read.answered[node.pk] = NodeRead(node, runtime, memory, variables, sessions, statements)
    read.cluster = read_cluster(cluster)
    return read


def switchover_guards(
    cluster: Cluster,
    A: Server,
    B: Server,
    read: SwitchoverRead,
    *,
    drain_timeout_ms: int,
    on_timeout: str,
    longer_timeout: bool,
    lower_autoinc: bool | None,
) -> tuple[list[Guard], dict[str, Any], bool]:
    """The judgement, from the read alone: (guards, facts, lower_autoinc resolved)."""
    W = cluster.writer_hostgroup
    guards = [
        Guard(
            "target",
            "The new writer is another backend of this cluster",
            B.pk != A.pk and B.cluster_id == cluster.pk,
            f"{A} → {B}",
            False,
        )
    ]
    nodes: dict[str, dict[str, Any]] = {}
    facts: dict[str, Any] = {"nodes": nodes}
    not_writer: list[str] = []
    pending_edits: list[str] = []
    tally = SessionTally()
    for pk, n in read.answered.items():
        # Configured ONLINE is what counts: a SHUNNED row is ProxySQL's own verdict on that node (it
        # recovers by itself, and the drain's LOAD resets it), not an operator's edit.
        a_rows = [r for r in n.runtime if r.hostgroup_id == W and (r.hostname, r.port) == (A.hostname, A.port)]
        if not any(configured_status(r.status) == "ONLINE" for r in a_rows):
            not_writer.append(n.node.name)
        edits = unloaded_edits(n.runtime, n.memory)
        if edits:
            pending_edits.append(
                f"{n.node.name} (" + ", ".join(f"hg {k[0]} {k[1]}:{k[2]}" for k in sorted(edits)) + ")"
            )
        tally.add(n.node, n.sessions, n.variables)
        nodes[str(pk)] = {
            "name": n.node.name,
            "pinned": n.sessions,
            "autoinc": n.variables.get(AUTOINC),
            "processlist_extended": n.variables.get(EXTENDED),
            "shunned": [
                f"hg {r.hostgroup_id} {r.hostname}:{r.port}"
                for r in n.runtime
                if r.status != configured_status(r.status)
            ],
        }
    guards.append(
        Guard(
            "proxysql_reachable",
            "Every ProxySQL node of the cluster answers",
            not read.unreachable and bool(read.nodes),
            "; ".join(read.unreachable) or f"{len(read.nodes)} of {len(read.nodes)}",
            False,
        )
    )
    guards.append(
        Guard(
            "old_writer_online",
            f"{A} is ONLINE in writer hostgroup {W} on every node",
            not not_writer,
            ", ".join(not_writer) or "yes",
        )
    )
    guards.append(
        Guard(
            "no_pending_edits",
            "No unloaded mysql_servers edits on any node (they would be loaded too)",
            not pending_edits,
            "; ".join(pending_edits) or "none",
        )
    )
    # Shown, not a guard: ProxySQL's own verdict, reset on that node by the drain's LOAD.
    facts["shunned"] = {n["name"]: n["shunned"] for n in nodes.values() if n["shunned"]}
    native = cluster.active_native_hostgroups()
    manager_guard = Guard(
        "no_native_hostgroups",
        "ProxySQL's native hostgroup manager is not active on these hostgroups",
        not native,
        ", ".join(f"{n['kind']} writer {n['writer_hostgroup']}" for n in native) or "inactive",
    )
    more, lower_autoinc = shared_guards(
        cluster,
        A,
        B,
        tally,
        facts,
        manager_guard,
        read.cluster,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        longer_timeout=longer_timeout,
        lower_autoinc=lower_autoinc,
    )
    return guards + more, facts, lower_autoinc


def switchover_steps(
    cluster: Cluster,
    A: Server,
    B: Server,
    read: SwitchoverRead,
    *,
    lower_autoinc: bool,
    drain_timeout_ms: int,
    on_timeout: str,
    catchup_timeout_ms: int,
    old_writer_to: str,
) -> list[Step]:
    """The build, from the read alone: the steps, each node's statements in them."""
    W, R = cluster.writer_hostgroup, cluster.reader_hostgroup

    def per_node(part: str) -> dict[str, dict[str, Any]]:
        return {str(pk): {"name": n.node.name, **n.statements.parts[part]} for pk, n in read.answered.items()}

    steps: list[Step] = []
    promote = Step("promote", f"Promote {B}", BACKEND, params={"actions": _promote_actions(cluster, A, B)})
    if cluster.kind == ClusterKind.GALERA:
        # Every Galera node takes writes: read_only OFF on B can come before the drain, out of the time
        # the writer is held (nothing routes writes to B until the move).
        promote.title = f"Promote {B} (read_only OFF, before the drain: no writes reach it until the move)"
        steps.append(promote)
    if lower_autoinc:
        steps.append(
            Step(
                "autoinc_off",
                f"Lower {AUTOINC} to 0 for the drain (sessions release the old writer)",
                PROXYSQL,
                per_node("autoinc_off"),
            )
        )
    steps.append(Step("drain", f"{A} to OFFLINE_SOFT in writer hostgroup {W}", PROXYSQL, per_node("drain")))
    steps.append(
        Step(
            "wait_drain",
            f"Wait until {A}'s ConnUsed in hostgroup {W} is 0 on every node",
            WAIT_DRAIN,
            params={
                "targets": [[W, A.hostname, A.port]],
                "timeout_ms": drain_timeout_ms,
                "poll_ms": DRAIN_POLL_MS,
                "on_timeout": on_timeout,
                "offline_hard": per_node("offline_hard"),
            },
        )
    )
    if cluster.kind == ClusterKind.GALERA:
        steps.append(
            Step(
                "catch_up",
                f"Wait until {B} has applied everything {A} committed (wsrep_last_committed)",
                WAIT_CATCHUP,
                params={"old": A.pk, "new": B.pk, "timeout_ms": catchup_timeout_ms},
            )
        )
    else:
        steps.append(promote)
    roles = "reader" + (" and backup-writer" if cluster.backup_writer_hostgroup is not None else "")
    steps.append(
        Step(
            "move",
            f"{B} into writer hostgroup {W}; {B} and {A} swap their {roles} rows "
            f"(writer_is_also_reader={cluster.writer_is_also_reader}); {A} "
            f"{'reads' if old_writer_to == 'reader' else 'does not read'} in reader hostgroup {R}",
            PROXYSQL,
            per_node("move"),
        )
    )
    steps.append(
        Step(
            "verify",
            "Verify every node's runtime has every row of the plan",
            VERIFY,
            params={"expect": {str(pk): n.statements.expect for pk, n in read.answered.items()}},
        )
    )
    steps.append(
        Step("save", "Save MYSQL SERVERS to disk on every node", PROXYSQL, per_node("save"), point_of_no_return=True)
    )
    if lower_autoinc:
        steps.append(Step("autoinc_restore", f"Restore {AUTOINC}", PROXYSQL, per_node("autoinc_restore")))
    steps.append(
        Step(
            "inventory",
            "Record the new writer in the inventory",
            INVENTORY,
            params={"old": A.pk, "new": B.pk, "old_writer_to": old_writer_to},
        )
    )
    return steps


class SessionTally:
    """The sessions holding the old writer on every node, counted as the guards and the auto-increment way read them."""

    def __init__(self) -> None:
        self.total = 0
        self.reasons: Counter[str] = Counter()
        self.autoinc = 0
        self.inferred = False
        self.held: list[str] = []

    def add(self, node: ProxySQLNode, sessions: list[Session], variables: Mapping[str, str]) -> None:
        self.total += len(sessions)
        for s in sessions:
            self.reasons.update(s["reasons"])
            if AUTOINC_TOKEN in s["reasons"]:
                self.autoinc += 1
            elif s["reasons"][0].startswith("unknown") and str(variables.get(AUTOINC)) not in ("0", "None"):
                self.autoinc, self.inferred = self.autoinc + 1, True  # ProxySQL 2.7's default 5: likely
            holding = [r for r in s["reasons"] if r in HOLDING]
            if holding:
                self.held.append(f"{node.name} session {s['session']} ({s['user']}): {', '.join(holding)}")


def shared_guards(
    cluster: Cluster,
    A: Server,
    B: Server,
    tally: SessionTally,
    facts: dict[str, Any],
    manager_guard: Guard,
    read: ClusterRead | None,
    *,
    drain_timeout_ms: int,
    on_timeout: str,
    longer_timeout: bool,
    lower_autoinc: bool | None,
) -> tuple[list[Guard], bool]:
    """The guards every switchover has besides its nodes' (B healthy, enough nodes left, no other work, the drain's
    way through its sessions), `manager_guard` in its place, judged from `read` (a ClusterRead, read_cluster); fills
    `facts`. Returns (guards, lower_autoinc resolved)."""
    facts.update(pinned_total=tally.total, pinned_reasons=dict(tally.reasons), old_writer=str(A), new_writer=str(B))
    if read is None:  # a read's cluster part comes after its nodes: a judgement never sees it missing
        raise ValueError("the cluster is not read: read_cluster() comes before the judgement")
    states, servers = read.backends, read.servers
    guards = backend_guards(cluster, B, states.get(B.pk), "new_writer", source=A, replica=read.replicas.get(B.pk))
    if cluster.kind == ClusterKind.ASYNC:
        guards.append(
            Guard(
                "replication_credentials",
                "The cluster has replication credentials to re-point replicas",
                bool(cluster.replication_user),
                cluster.replication_user or "not set",
                False,
            )
        )
    # Counted besides B, by name: B may itself be unavailable, and the operator sees which nodes are (not) counted.
    available: list[str] = []
    unavailable: list[str] = []
    for server in (server for server in servers if server.pk != B.pk):
        s = states[server.pk]
        if not isinstance(s, ClientError) and (s.synced_primary or not s.wsrep_on):
            available.append(str(server))
        else:
            unavailable.append(
                f"{server} ({'does not answer' if isinstance(s, ClientError) else 'not Synced/Primary'})"
            )
    guards.append(
        Guard(
            "min_available",
            f"At least {cluster.min_available_readers} available node(s) besides the new writer",
            len(available) >= cluster.min_available_readers,
            f"{len(available)} available: {', '.join(available) or 'none'}"
            + (f"; not counted: {', '.join(unavailable)}" if unavailable else ""),
        )
    )
    holder = read.holder
    guards.append(no_other_operation(holder))
    guards.append(read.pending)
    guards.append(manager_guard)
    guards.append(
        Guard("drain_timeout", "A drain timeout is set", drain_timeout_ms > 0, f"{drain_timeout_ms} ms", False)
    )
    if on_timeout == OnDrainTimeout.OFFLINE_HARD:
        facts["sessions_cut_if_timeout"] = tally.total
    guards.append(_held_guard(tally.held, on_timeout, longer_timeout, drain_timeout_ms))
    facts["held"] = tally.held
    lower_autoinc, facts["autoinc_way"] = _autoinc_way(lower_autoinc, tally.autoinc, tally.inferred)
    return guards, lower_autoinc


def _held_guard(held: list[str], on_timeout: str, longer_timeout: bool, drain_timeout_ms: int) -> Guard:
    """Sessions pinned for a reason the drain cannot undo: it will not finish, unless the operator chose a way
    (OFFLINE_HARD at the timeout, which cuts them, or a drain timeout longer than the cluster's, to wait for
    their clients). Not an admin's override: only that choice lets it through."""
    label = (
        "No session holds the old writer for a reason the drain cannot undo (user variables, temporary "
        "tables, locks, prepared statements), or the operator chose a way"
    )
    if not held:
        return Guard("no_held_sessions", label, True, "none", False)
    sessions = f"{len(held)} session(s) pinned: " + "; ".join(held)
    if on_timeout == OnDrainTimeout.OFFLINE_HARD:
        return Guard(
            "no_held_sessions", label, True, f"{sessions} — chosen: OFFLINE_HARD at the timeout cuts them", False
        )
    if longer_timeout:
        return Guard(
            "no_held_sessions",
            label,
            True,
            f"{sessions} — chosen: a longer drain timeout ({drain_timeout_ms} ms) for their clients to end them",
            False,
        )
    return Guard(
        "no_held_sessions",
        label,
        False,
        f"{sessions} — this drain will not finish: choose OFFLINE_HARD on timeout (cuts them) or a longer "
        f"drain timeout than the cluster's",
        False,
    )


def _autoinc_way(lower_autoinc: bool | None, pinned: int, inferred: bool) -> tuple[bool, dict[str, Any]]:
    """(lower_autoinc resolved, the facts saying who chose it and why). inferred: the extended processlist is off,
    so the connections' reason is not read, only that the variable is not 0 where they are."""
    chosen_by = "planner" if lower_autoinc is None else "operator"
    if lower_autoinc is None:
        lower_autoinc = pinned > 0
    why = (
        f"{pinned} session(s) pinned by {AUTOINC}"
        if not inferred
        else f"{pinned} connection(s) in use on the old writer, on nodes where {AUTOINC} is not 0 (it keeps a "
        f"connection to the writer for the next statements after an INSERT, so under continuous writes it may "
        f"never be returned)"
    )
    reason = ""
    if lower_autoinc and chosen_by == "planner":
        reason = f"{why}: lowering it to 0 for the drain, restored after" + (" (a precaution)" if inferred else "")
    elif lower_autoinc:
        reason = f"chosen by the operator: lowering {AUTOINC} to 0 for the drain, restored after"
    elif pinned and chosen_by == "operator":
        reason = (
            f"{why}, and the operator chose not to lower it: under continuous writes this drain "
            f"{'may' if inferred else 'will'} not finish"
        )
    return lower_autoinc, {
        "taken": lower_autoinc,
        "chosen_by": chosen_by,
        "pinned": pinned,
        "inferred": inferred,
        "reason": reason,
    }


def notes(plan: Plan) -> list[Note]:
    """What the plan page shows besides the guards and the steps, for every door (the page, the command):
    [{"level": "info" | "warning" | "error", "text"}]."""
    facts, options = plan.facts, plan.options
    out: list[Note] = []
    if facts.get("cluster_sync_held"):  # sync_hold.py: the nodes run ProxySQL Cluster sync of what the plan loads
        out.append({"level": "info", "text": facts["cluster_sync_held"]["said"] + "."})
    if facts.get("cluster_sync_propagated"):  # sync_hold.propagate: the cluster asks its sync to carry the change
        out.append({"level": "info", "text": facts["cluster_sync_propagated"]["said"] + "."})
    if facts.get("replica_undo"):  # dr/moves.py: the new replica's user cannot RESET SLAVE ALL
        out.append({"level": "warning", "text": facts["replica_undo"][0].upper() + facts["replica_undo"][1:] + "."})
    if facts.get("monitor_moves"):  # native_switchover.py: how ProxySQL's own manager is made to move the writer
        out.append({"level": "info", "text": facts["monitor_moves"]})
    server = _drained(plan)
    if facts.get("pinned_total"):
        out += _in_use_notes(plan, server)
    way = facts.get("autoinc_way") or {"pinned": facts.get("pinned_total", 0) if _autoinc_likely(facts) else 0}
    if way.get("taken") and way.get("reason"):
        out.append({"level": "info", "text": f"The auto-increment way: {way['reason']}."})
    elif way.get("pinned") and not options.get("lower_autoinc"):
        values = ", ".join(f"{n['name']}: {n.get('autoinc') or '?'}" for n in facts.get("nodes", {}).values())
        if way.get("inferred"):  # the extended processlist is off: likely, not read
            said = (
                f"These connections may be held by auto-increment tokens ({AUTOINC} is {values}): under "
                f"continuous writes such a connection is never returned, so this drain may not finish."
            )
        else:
            said = (
                f"These sessions are pinned by auto-increment tokens ({AUTOINC} is {values}). Under continuous "
                f"writes they never release the old writer, so this drain will not finish."
            )
        out.append(
            {
                "level": "warning",
                "text": f"{said} Safe ways through: plan again lowering {AUTOINC} to 0 during "
                f"the drain (the default), or a longer drain timeout. OFFLINE_HARD would cut "
                f"{facts['pinned_total']} session(s).",
            }
        )
    if facts.get("held"):
        out.append(
            {
                "level": "error" if not plan.guards_passed else "warning",
                "text": f"Pinned for a reason the drain cannot undo: {'; '.join(facts['held'])}.",
            }
        )
    if options.get("on_timeout") == OnDrainTimeout.OFFLINE_HARD:
        out.append(
            {
                "level": "error",
                "text": f"If the drain times out, OFFLINE_HARD will cut the sessions still on "
                f"{server}: {facts.get('sessions_cut_if_timeout', 0)} now.",
            }
        )
    return out


def _drained(plan: Plan) -> str:
    """The server the plan drains, as the notes name it: a switchover's old writer, a drain's backend."""
    if plan.facts.get("old_writer"):  # a switchover's facts name the old writer, a drain's its server
        return f"the old writer {plan.facts['old_writer']}"
    return plan.facts.get("server") or "the server to drain"


def _in_use_notes(plan: Plan, server: str) -> list[Note]:
    """The connections in use on the server to drain when planned, per node; why, where the extended processlist
    says it (off: said plainly that it cannot be read, and how to turn it on); what the drain does with them."""
    facts = plan.facts
    if "nodes" in facts:  # a switchover: per node id
        by_node = {n["name"]: (n.get("pinned") or [], n.get("processlist_extended")) for n in facts["nodes"].values()}
    else:  # a drain: per node name
        by_node = {name: (sessions, None) for name, sessions in (facts.get("pinned") or {}).items()}
    unread = [
        name
        for name, (sessions, extended) in by_node.items()
        if any(s["reasons"][0].startswith("unknown") for s in sessions) or (sessions and extended == "0")
    ]
    reasons = Counter(
        r for sessions, _ in by_node.values() for s in sessions for r in s["reasons"] if not r.startswith("unknown")
    )
    counts = ", ".join(f"{name}: {len(sessions)}" for name, (sessions, _) in by_node.items() if sessions)
    text = f"{facts['pinned_total']} connection(s) in use on {server} when planned ({counts})."
    if reasons:
        text += (
            " Read from the extended processlist: " + ", ".join(f"{r} × {n}" for r, n in sorted(reasons.items())) + "."
        )
    if unread:
        text += (
            f" Why {'the others are' if reasons else 'they are'} in use cannot be read: {EXTENDED} is 0 on "
            f"{', '.join(unread)} (SET {EXTENDED}=1; LOAD MYSQL VARIABLES TO RUNTIME there, and plan again, "
            f"names the reason per connection)."
        )
    out: list[Note] = [{"level": "info", "text": text}]
    wait = next((s for s in plan.steps if s.key == "wait_drain"), None)  # both planners key their drain's wait so
    if wait is not None:
        then = (
            "cuts those still in use (OFFLINE_HARD)"
            if wait.params.get("on_timeout") == OnDrainTimeout.OFFLINE_HARD
            else "rolls back: the server ONLINE again as before, no connection cut"
        )
        out.append(
            {
                "level": "info",
                "text": f"The drain sets {server} OFFLINE_SOFT: no new statement goes to it, and "
                f"each connection is returned to the pool when its statement or transaction ends. It waits up to "
                f"{wait.params['timeout_ms']} ms (probing every {wait.params['poll_ms']} ms) for ConnUsed 0 on "
                f"every node; if some are still in use then, it {then}.",
            }
        )
    return out


def _autoinc_likely(facts: Mapping[str, Any]) -> bool:
    """A plan stored before the planner chose the way: auto-increment tokens named by the extended processlist, or,
    when it is off, pinned sessions on a node whose variable is not 0."""
    reasons = facts.get("pinned_reasons", {})
    if AUTOINC_TOKEN in reasons:
        return True
    unknown = any(r.startswith("unknown") for r in reasons)
    return unknown and any(n.get("autoinc") not in (None, "0") for n in facts.get("nodes", {}).values())


def unloaded_edits(
    runtime: Iterable[ServerRow], memory: Iterable[ServerRow]
) -> dict[ServerKey, tuple[ServerFields | None, ServerFields | None]]:
    """Rows whose configuration differs between memory and runtime on one node: {key: (memory, runtime)}.
    Runtime-only states (SHUNNED) are not edits."""
    mem = {r.key: configured(r) for r in memory}
    run = {r.key: configured(r) for r in runtime}
    return {k: (mem.get(k), run.get(k)) for k in mem.keys() | run.keys() if mem.get(k) != run.get(k)}


def _row(server_row: ServerRow, **over: Any) -> dict[str, Any]:
    """A mysql_servers row to write (all SERVER_COLUMNS), from a runtime row: its configured status, never
    ProxySQL's own SHUNNED."""
    data = asdict(server_row)
    data["status"] = configured_status(data["status"])
    data.update(over)
    return {c: data[c] for c in SERVER_COLUMNS}


def role_statements(
    sql: Sql, rows: Mapping[ServerKey, ServerFields | None], changes: Mapping[ServerKey, ServerFields | None]
) -> tuple[list[str], list[str], list[list[Any]]]:
    """(forward, rollback, expect) for the rows that change: one REPLACE of every row to put, one DELETE of every
    row to remove, and the same the way back. One LOAD follows, so the order does not matter; each statement is an
    admin round trip inside the writer hold (a switchover's move), and under CPU contention one costs 10-30 ms
    (issue 37: six row statements took up to 106 ms before the move's LOAD on a real 2.7.1 node at load 22)."""
    forward: tuple[list[dict[str, Any]], list[ServerKey]] = ([], [])
    undo: tuple[list[dict[str, Any]], list[ServerKey]] = ([], [])
    expect: list[list[Any]] = []
    for key, want in changes.items():
        have = rows.get(key)
        expect.append([*key, want])
        if want == have:
            continue
        for side, row in ((forward, want), (undo, have)):
            if row is None:
                side[1].append(key)
            else:
                side[0].append(_fields_row(key, row))
    return _batched(sql, *forward), _batched(sql, *undo), expect


def _batched(sql: Sql, puts: list[dict[str, Any]], removes: list[ServerKey]) -> list[str]:
    """At most two statements: the rows put (REPLACE), then the rows removed (DELETE); a single row as before."""
    out: list[str] = []
    if puts:
        out.append(sql.replace_server(puts[0]) if len(puts) == 1 else sql.replace_servers(puts))
    if removes:
        out.append(sql.delete_server(*removes[0]) if len(removes) == 1 else sql.delete_servers(removes))
    return out


def _fields_row(key: ServerKey, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A whole mysql_servers row (SERVER_COLUMNS) from its key and its fields."""
    data = {"hostgroup_id": key[0], "hostname": key[1], "port": key[2], **fields}
    return {c: data[c] for c in SERVER_COLUMNS}


def autoinc_parts(sql: Sql, variables: Mapping[str, str]) -> dict[str, Part]:
    """The auto-increment way's statements on one node: lowered to 0 for the drain, then its value put back."""
    autoinc = variables.get(AUTOINC) or "5"
    return {
        "autoinc_off": {
            "sql": [sql.set_variable(AUTOINC, 0), sql.LOAD_VARIABLES],
            "rollback": [sql.set_variable(AUTOINC, autoinc), sql.LOAD_VARIABLES],
        },
        "autoinc_restore": {"sql": [sql.set_variable(AUTOINC, autoinc), sql.LOAD_VARIABLES], "rollback": []},
    }


def _node_statements(
    sql: Sql,
    cluster: Cluster,
    A: Server,
    B: Server,
    runtime: list[ServerRow],
    variables: Mapping[str, str],
    old_writer_to: str,
) -> NodeStatements:
    """Every statement this node needs, per part of the plan, from its own runtime rows."""
    W = cluster.writer_hostgroup
    rows = {r.key: configured(r) for r in runtime}
    a_w = next((r for r in runtime if r.key == (W, A.hostname, A.port)), None)
    parts: dict[str, Part] = {**autoinc_parts(sql, variables), "save": {"sql": [sql.SAVE_SERVERS], "rollback": []}}
    if a_w is None:
        nothing: dict[str, Part] = {part: {"sql": [], "rollback": []} for part in ("drain", "offline_hard", "move")}
        return NodeStatements({**parts, **nothing}, [])
    parts["drain"] = {
        "sql": [sql.set_status(W, A.hostname, A.port, "OFFLINE_SOFT"), sql.LOAD_SERVERS],
        "rollback": [sql.replace_server(_row(a_w)), sql.LOAD_SERVERS],
    }
    parts["offline_hard"] = {
        "sql": [sql.set_status(W, A.hostname, A.port, "OFFLINE_HARD"), sql.LOAD_SERVERS],
        "rollback": [sql.replace_server(_row(a_w)), sql.LOAD_SERVERS],
    }
    # B takes A's place in the writer hostgroup; the two swap their other role rows. The rollback puts
    # back every row as this node had it (A's writer row as before the drain).
    changes = swapped_roles(cluster, rows, (A.hostname, A.port), (B.hostname, B.port), old_writer_to)
    forward, undo, expect = role_statements(sql, rows, changes)
    parts["move"] = {"sql": forward + [sql.LOAD_SERVERS], "rollback": undo + [sql.LOAD_SERVERS]}
    return NodeStatements(parts, expect)


def _promote_actions(cluster: Cluster, A: Server, B: Server) -> list[dict[str, Any]]:
    """What the promote step does to the backends; `name` (host:port) is what the plan page shows."""
    a, b = {"server": A.pk, "name": str(A)}, {"server": B.pk, "name": str(B)}
    if cluster.kind == ClusterKind.GALERA:
        return [{**b, "action": "read_only", "value": False}]
    if cluster.kind == ClusterKind.ASYNC:
        return [
            {**a, "action": "read_only", "value": True},
            {**b, "action": "promote_replica", "old_primary": A.pk},
            {**b, "action": "read_only", "value": False},
        ]
    return [{**b, "action": "group_replication_set_as_primary"}]
