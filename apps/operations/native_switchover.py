"""Planned switchover on a cluster whose writer ProxySQL's replication manager places (Cluster.native_manager
"replication": mysql_replication_hostgroups with Monitor; fleet/native.py, lab/reference/native-replication/).
Monitor moves the servers between the writer and reader hostgroups at runtime from each backend's read_only, on every
ProxySQL node by itself, so this plan writes no row for the move: it makes the backends say who the writer is.

Steps: [lower auto_increment_delay_multiplex] -> drain A (OFFLINE_SOFT; the LOAD carries Monitor's placement as it is,
A also reading in the reader hostgroup, so that it moves no server) -> wait for ConnUsed 0 on every node -> promote B
as the async switchover does (read_only ON on A, B at A's GTID position and no longer replicating, the others
following B, read_only OFF on B) -> wait until Monitor on every node has placed B in the writer hostgroup and A out
of it (bounded) -> memory back to the configured rows (no LOAD: the runtime is Monitor's; disk never written) ->
verify memory -> [restore the variable] -> record the writer Monitor placed.

A rollback (the wait timed out, a node failed) puts read_only back as it was and the replicas back on A, then loads
the placement as it was before the drain and puts memory back: the servers where Monitor had them, A writable.
"""

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.proxysql import (
    ProxySQLAdmin,
    ReplicationHostgroups,
    ServerRow,
    configured,
    configured_status,
    node_admin,
)
from apps.clients.wire import ClientError
from apps.configuration.services import ServerFields, ServerKey, record_operation
from apps.fleet.choices import ClusterKind
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.plans.registry import StepFailed, capture
from apps.plans.vocabulary import (
    BACKEND,
    DRAIN_POLL_MS,
    MONITOR_WRITER,
    PROXYSQL,
    VERIFY,
    WAIT_DRAIN,
    WAIT_MONITOR,
    Guard,
    Plan,
    Sql,
    Step,
)

from . import shared
from .choices import OnDrainTimeout, OperationKind
from .inventory import _once
from .models import Operation, OperationStep
from .repair import managers_view
from .switchover import (
    AUTOINC,
    EXTENDED,
    Part,
    SessionTally,
    _fields_row,
    _promote_actions,
    autoinc_parts,
    pinned_sessions,
    role_statements,
    ClusterRead,
    read_cluster,
    shared_guards,
    unloaded_edits,
)

READ_ONLY_INTERVAL = "mysql-monitor_read_only_interval"
MONITOR_ENABLED = "mysql-monitor_enabled"
# How long ProxySQL holds a query sent to a hostgroup without a usable server: the writes held from the drain until
# Monitor places the new writer wait this long, then fail.
HOLD_MAX = "mysql-connect_timeout_server_max"
# The wait's bound when the operator gives none: this many of Monitor's read_only checks (real 2.7.1 placed within
# one check of a flip of read_only: lab/reference/native-replication/), at least MIN_WAIT_MS.
MONITOR_CHECKS, MIN_WAIT_MS = 5, 3000
PLACEMENT_POLL_MS = 50

Rows = dict[ServerKey, ServerFields]  # a node's mysql_servers rows: (hostgroup, host, port) -> configured columns
Variables = dict[str, str]  # a node's global variables as read: name -> value
Own = TypeVar("Own")  # a planner's own read of a node: its manager's rows (replication) or row (Galera)


@dataclass
class Weights:
    """The Galera manager's weights of A and B in the writer hostgroup on one node (native_galera_switchover.py):
    the rows' weights to write, swapped ([[W, host, port, weight], ...]; None: nothing to swap), whether B would be
    the heaviest with A's weight, and that said for the guard."""

    swap: list[list[Any]] | None
    heaviest: bool
    said: str


@dataclass
class NativeNodeStatements:
    """One node's statements in a switchover through ProxySQL's own manager (switchover.py's NodeStatements is the
    product's own switchover's), planned from its read: each step's part (drain, offline_hard, memory_back,
    autoinc_off, autoinc_restore; the Galera manager's move), the rows its memory ends with ([hostgroup, host, port,
    columns]: the verify's) and, with the Galera manager, the weights swapped."""

    parts: dict[str, Part]
    configured: list[list[Any]]
    weights: Weights | None = None


# (guards, facts, lower_autoinc resolved, monitor_timeout_ms resolved): a judgement; both are resolved once Monitor
# has placed a writer, and given back as they came without one
Judgement = tuple[list[Guard], dict[str, Any], bool | None, int | None]


def plan_native_switchover(
    cluster: Cluster,
    new_writer: Server,
    *,
    drain_timeout_ms: int | None = None,
    on_timeout: str = OnDrainTimeout.ROLLBACK,
    lower_autoinc: bool | None = None,
    monitor_timeout_ms: int | None = None,
    catchup_timeout_ms: int | None = None,
) -> Plan:
    """The switchover through ProxySQL's replication manager, from what the nodes and backends say now. Network
    reads only; writes nothing. The old writer is the one Monitor placed. In three parts, as plan_switchover: read
    (read_replication_switchover), judge (replication_guards) and build (replication_steps) from the read alone.
    catchup_timeout_ms is the Galera manager's (the planners share one signature): here the promotion waits for the
    GTID position itself (MASTER_GTID_WAIT, its own bound)."""
    return plan_through_monitor(
        cluster,
        new_writer,
        (read_replication_switchover, replication_guards, replication_steps),
        "replication",
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        lower_autoinc=lower_autoinc,
        monitor_timeout_ms=monitor_timeout_ms,
    )


def read_replication_switchover(cluster: Cluster, B: Server) -> "NativeRead[list[ReplicationHostgroups]]":
    """The read: every node once (its mysql_replication_hostgroups rows, and its statements rendered with its
    driver's escaping once Monitor's writer is known), then the cluster."""
    managed, W, R = cluster.managed_hostgroups(), cluster.writer_hostgroup, cluster.reader_hostgroup

    def more(
        node: ProxySQLNode,
        admin: ProxySQLAdmin,
        runtime: list[ServerRow],
        memory: list[ServerRow],
        variables: Variables,
        A: Server | None,
    ) -> tuple[list[ReplicationHostgroups], NativeNodeStatements | None]:
        statements = _node_statements(Sql(admin), managed, W, R, A, runtime, memory, variables) if A else None
        return admin.replication_hostgroups(), statements

    return read_native_nodes(cluster, B, [READ_ONLY_INTERVAL, HOLD_MAX], configured_status, more)


def replication_guards(
    cluster: Cluster,
    B: Server,
    read: "NativeRead[list[ReplicationHostgroups]]",
    *,
    drain_timeout_ms: int,
    on_timeout: str,
    longer_timeout: bool,
    lower_autoinc: bool | None,
    monitor_timeout_ms: int | None,
) -> Judgement:
    """The judgement, from the read alone: (guards, facts, lower_autoinc resolved, monitor_timeout_ms resolved)."""
    W, R, A = cluster.writer_hostgroup, cluster.reader_hostgroup, read.A
    if A is None:
        return writer_guards(cluster, read, B), native_facts(read)[0], lower_autoinc, monitor_timeout_ms
    unmanaged = [
        n.node.name
        for n in read.answered
        if not any((r.writer_hostgroup, r.reader_hostgroup) == (W, R) for r in n.own) or not monitor_on(n.variables)
    ]
    topology = Guard(
        "async_topology",
        f"The cluster is async replication ({B} is promoted by GTID)",
        cluster.kind == ClusterKind.ASYNC,
        cluster.kind,
        False,
    )
    guards, facts, lower_autoinc = native_guards(
        cluster,
        B,
        read,
        [topology],
        cluster.managed_hostgroups(),
        f"Every node runs mysql_replication_hostgroups writer {W} / reader {R} with Monitor enabled (it moves the "
        f"servers)",
        unmanaged,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        longer_timeout=longer_timeout,
        lower_autoinc=lower_autoinc,
    )
    interval = max([int(n.variables.get(READ_ONLY_INTERVAL) or 1000) for n in read.answered] or [1000])
    if monitor_timeout_ms is None:
        monitor_timeout_ms = max(MIN_WAIT_MS, MONITOR_CHECKS * interval)
    holds = {n.node.name: int(n.variables.get(HOLD_MAX) or 10000) for n in read.answered}
    short = {name: ms for name, ms in holds.items() if ms <= monitor_timeout_ms}
    guards.append(
        Guard(
            "hold_budget",
            f"Writes held while Monitor moves the writer wait, not fail: the wait's bound "
            f"({monitor_timeout_ms} ms) is below {HOLD_MAX} on every node",
            not short,
            "; ".join(f"{name}: {ms} ms" for name, ms in short.items()) or "yes",
        )
    )
    facts["monitor_moves"] = (
        f"ProxySQL's replication manager moves the servers on each node: this plan writes no row for the move. It "
        f"drains {A} as a switchover does, makes {B} the primary on the backends (read_only), and waits up to "
        f"{monitor_timeout_ms} ms for Monitor to place {B} in writer hostgroup {W} and {A} out of it on every node "
        f"(it checks read_only every {interval} ms); otherwise it rolls back, read_only as it was. "
        f"Memory ends as configured and disk is not written."
    )
    return guards, facts, lower_autoinc, monitor_timeout_ms


def replication_steps(
    cluster: Cluster,
    B: Server,
    read: "NativeRead[list[ReplicationHostgroups]]",
    *,
    lower_autoinc: bool | None,
    drain_timeout_ms: int,
    on_timeout: str,
    monitor_timeout_ms: int,
) -> list[Step]:
    """The build, from the read alone (a writer placed: read.A): the steps, each node's statements in them."""
    W, R, A = cluster.writer_hostgroup, cluster.reader_hostgroup, read.writer
    steps = drain_steps(
        read,
        lower_autoinc,
        W,
        drain_timeout_ms,
        on_timeout,
        f"{A} to OFFLINE_SOFT in writer hostgroup {W}, loaded with Monitor's placement as it is "
        f"({A} also reading in {R}): the LOAD moves no server",
    )
    steps.append(
        Step(
            "promote",
            f"Promote {B}: read_only ON on {A}, {B} at {A}'s GTID position stops replicating, "
            f"the others follow it, read_only OFF on {B}",
            BACKEND,
            params={"actions": _promote_actions(cluster, A, B)},
        )
    )
    steps.append(
        wait_monitor_step(
            read,
            B,
            W,
            f"Wait until Monitor has placed {B} in writer hostgroup {W} and {A} out of it on every node (up to "
            f"{monitor_timeout_ms} ms)",
            monitor_timeout_ms,
        )
    )
    return steps + closing_steps(
        read,
        cluster.managed_hostgroups(),
        lower_autoinc,
        "Memory back to the configured rows on every node (no LOAD: the runtime is Monitor's; disk was never written)",
        "Verify every node's memory holds the configured rows",
        Step(
            "record_writer",
            f"Record {B} as the writer Monitor placed",
            MONITOR_WRITER,
            params={"old": A.pk, "new": B.pk, "old_name": str(A), "new_name": str(B)},
        ),
    )


# -- what both native planners share: the read, the judgement's common part, the common steps -------------------------
class Judge(Protocol[Own]):
    """A native planner's judgement (replication_guards, galera_guards), from the read alone."""

    def __call__(
        self,
        cluster: Cluster,
        B: Server,
        read: "NativeRead[Own]",
        *,
        drain_timeout_ms: int,
        on_timeout: str,
        longer_timeout: bool,
        lower_autoinc: bool | None,
        monitor_timeout_ms: int | None,
    ) -> Judgement: ...


def plan_through_monitor(
    cluster: Cluster,
    B: Server,
    # (read, judge, build): the build takes the judgement's options by keyword, and the planner's own
    # (build_options: the Galera manager's catchup_timeout_ms)
    parts: tuple[Callable[[Cluster, Server], "NativeRead[Own]"], Judge[Own], Callable[..., list[Step]]],
    manager: str,
    *,
    drain_timeout_ms: int | None,
    on_timeout: str,
    lower_autoinc: bool | None,
    monitor_timeout_ms: int | None,
    **build_options: Any,
) -> Plan:
    """The planner both native switchovers are, from its three parts (read, judge, build): the read first, then the
    judgement and the build from the read alone; without a writer placed by Monitor, its guard alone."""
    read_switchover, judge, build = parts
    longer_timeout = drain_timeout_ms is not None and drain_timeout_ms > cluster.drain_timeout_ms
    drain_timeout_ms = drain_timeout_ms if drain_timeout_ms is not None else cluster.drain_timeout_ms
    read = read_switchover(cluster, B)
    guards, facts, lower_autoinc, monitor_timeout_ms = judge(
        cluster,
        B,
        read,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        longer_timeout=longer_timeout,
        lower_autoinc=lower_autoinc,
        monitor_timeout_ms=monitor_timeout_ms,
    )
    if read.A is None:
        return Plan(OperationKind.SWITCHOVER, cluster.pk, f"Switchover {cluster.name}", guards, [], facts)
    assert monitor_timeout_ms is not None  # resolved by the judgement once a writer is placed (Judgement)
    steps = build(
        cluster,
        B,
        read,
        lower_autoinc=lower_autoinc,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        monitor_timeout_ms=monitor_timeout_ms,
        **build_options,
    )
    title = f"Switchover {cluster.name}: writer {read.A} → {B} (through ProxySQL's {manager} manager)"
    options = native_options(read, B, drain_timeout_ms, on_timeout, lower_autoinc, monitor_timeout_ms)
    return shared.annotate(Plan(OperationKind.SWITCHOVER, cluster.pk, title, guards, steps, facts, options), cluster)


@dataclass
class NativeNode(Generic[Own]):
    """One ProxySQL node that answered, as a native planner reads it: its mysql_servers (runtime, memory), the
    variables, the sessions pinned to Monitor's writer, the planner's own read (its manager's rows) and the plan's
    statements for it (None: no writer placed, or no manager row to plan with)."""

    node: ProxySQLNode
    runtime: list[ServerRow]
    memory: list[ServerRow]
    variables: Variables
    sessions: list[dict[str, Any]]  # pinned_sessions(): processlist rows with the reasons each is pinned
    own: Own
    statements: NativeNodeStatements | None


@dataclass
class NativeRead(Generic[Own]):
    """What both native planners read, before they judge: of every ProxySQL node, Monitor's writer A (as the first
    node places it), each node's writers, the answering nodes (NativeNode, in node order) and the unreachable ones
    ("name: why"); then the cluster (ClusterRead: backends, lock, pending rows)."""

    nodes: list[ProxySQLNode]
    A: Server | None = None
    writers: dict[str, list[str]] = field(default_factory=dict)  # node name -> ["host:port", ...]
    unreachable: list[str] = field(default_factory=list)
    answered: list[NativeNode[Own]] = field(default_factory=list)
    cluster: ClusterRead | None = None  # the backends, the lock, pending rows (read after the nodes)

    @property
    def writer(self) -> Server:
        """Monitor's writer A, for the parts that run only once one is placed (the judgement past its writer guard,
        the build)."""
        if self.A is None:
            raise ValueError("no writer placed by Monitor: the plan is its writer guard alone")
        return self.A


def read_native_nodes(
    cluster: Cluster,
    B: Server,
    variable_names: list[str],
    writer_status: Callable[[str], str],
    more: Callable[
        [ProxySQLNode, ProxySQLAdmin, list[ServerRow], list[ServerRow], Variables, Server | None],
        tuple[Own, NativeNodeStatements | None],
    ],
) -> NativeRead[Own]:
    """Read every node once (at an operation's start, through the executor's open connection), then the cluster: the
    only part of a native plan that reads anything. writer_status(status) says which status counts as a writer in
    the writer hostgroup; more(node, admin, runtime, memory, variables, A) is the planner's own read on the same
    connection: (its manager's rows, the node's statements or None)."""
    W = cluster.writer_hostgroup
    read: NativeRead[Own] = NativeRead(list(cluster.proxysql_nodes.order_by("pk")))
    for node in read.nodes:
        try:
            with node_admin(node) as admin:
                runtime, memory = admin.servers("runtime"), admin.servers("memory")
                variables = admin.global_variables([AUTOINC, EXTENDED, MONITOR_ENABLED, *variable_names])
                placed = sorted(
                    (r.hostname, r.port) for r in runtime if r.hostgroup_id == W and writer_status(r.status) == "ONLINE"
                )
                read.writers[node.name] = [f"{host}:{port}" for host, port in placed]
                if read.A is None and len(placed) == 1:  # Monitor's writer, as the first node places it
                    read.A = cluster.servers.filter(hostname=placed[0][0], port=placed[0][1]).first()
                A = read.A
                sessions = pinned_sessions(admin.processlist(), W, A.hostname, A.port) if A else []
                own, statements = more(node, admin, runtime, memory, variables, A)
        except ClientError as exc:
            read.unreachable.append(f"{node.name}: {exc.message}")
            continue
        read.answered.append(NativeNode(node, runtime, memory, variables, sessions, own, statements))
    read.cluster = read_cluster(cluster)
    return read


def monitor_on(variables: Mapping[str, str]) -> bool:
    return str(variables.get(MONITOR_ENABLED)).lower() in ("true", "1")


def native_facts(read: NativeRead[Own]) -> tuple[dict[str, Any], SessionTally]:
    """The facts of every answering node, and its pinned sessions counted (SessionTally), from the read alone."""
    nodes: dict[str, dict[str, Any]] = {}
    facts: dict[str, Any] = {"nodes": nodes}
    tally = SessionTally()
    for n in read.answered:
        tally.add(n.node, n.sessions, n.variables)
        nodes[str(n.node.pk)] = {
            "name": n.node.name,
            "pinned": n.sessions,
            "autoinc": n.variables.get(AUTOINC),
            "processlist_extended": n.variables.get(EXTENDED),
            "shunned": [],
            "writers": read.writers[n.node.name],
        }
    return facts, tally


def native_guards(
    cluster: Cluster,
    B: Server,
    read: NativeRead[Own],
    own: list[Guard],
    managed: Collection[int],
    manager_said: str,
    unmanaged: list[str],
    *,
    drain_timeout_ms: int,
    on_timeout: str,
    longer_timeout: bool,
    lower_autoinc: bool | None,
) -> tuple[list[Guard], dict[str, Any], bool | None]:
    """The judgement both native planners share (a writer placed: read.A), from the read alone: writer_guards, the
    planner's `own` guards, no unloaded edits in `managed`, then every switchover's (shared_guards) with the
    native_manager guard (`manager_said`; the nodes in `unmanaged` fail it). (guards, facts, lower_autoinc)."""
    facts, tally = native_facts(read)
    pending_edits = [said for n in read.answered for said in _pending(n.node, n.runtime, n.memory, managed)]
    guards = writer_guards(cluster, read, B) + own
    guards.append(
        Guard(
            "no_pending_edits",
            "No unloaded mysql_servers edits on any node (they would be loaded too)",
            not pending_edits,
            "; ".join(pending_edits) or "none",
        )
    )
    manager = Guard(
        "native_manager",
        manager_said,
        not unmanaged,
        f"not on {', '.join(unmanaged)}" if unmanaged else "yes",
        False,
    )
    more, lower_autoinc = shared_guards(
        cluster,
        read.writer,
        B,
        tally,
        facts,
        manager,
        read.cluster,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        longer_timeout=longer_timeout,
        lower_autoinc=lower_autoinc,
    )
    return guards + more, facts, lower_autoinc


def writer_guards(cluster: Cluster, read: NativeRead[Own], B: Server) -> list[Guard]:
    """The guards both native planners start with. Without one writer placed by Monitor: that guard alone (the plan
    stops there). Re-checked at start like every guard (recheck.py): a writer Monitor moved since the plan refuses it."""
    W, A = cluster.writer_hostgroup, read.A
    if A is None:
        return [
            Guard(
                "writer",
                f"Monitor has placed one writer in writer hostgroup {W}",
                False,
                "; ".join(f"{n}: {', '.join(w) or 'none'}" for n, w in read.writers.items()) or "no node read",
                False,
            )
        ]
    nodes = read.nodes
    other = {n: w for n, w in read.writers.items() if w != [f"{A.hostname}:{A.port}"]}
    return [
        Guard(
            "target",
            "The new writer is another backend of this cluster",
            B.pk != A.pk and B.cluster_id == cluster.pk,
            f"{A} → {B}",
            False,
        ),
        Guard(
            "proxysql_reachable",
            "Every ProxySQL node of the cluster answers",
            not read.unreachable and bool(nodes),
            "; ".join(read.unreachable) or f"{len(nodes)} of {len(nodes)}",
            False,
        ),
        Guard(
            "monitor_writer",
            f"Monitor has placed {A} as the only writer in hostgroup {W} on every node",
            not other,
            "; ".join(f"{n}: {', '.join(w) or 'none'}" for n, w in other.items()) or "yes",
            False,
        ),
    ]


def per_node(read: NativeRead[Own], part: str) -> dict[str, dict[str, Any]]:
    """One part of every planned node's statements, as a step's nodes ({node id: {"name", "sql", "rollback"}})."""
    return {str(n.node.pk): {"name": n.node.name, **n.statements.parts[part]} for n in read.answered if n.statements}


def drain_steps(
    read: NativeRead[Own],
    lower_autoinc: bool | None,
    W: int,
    drain_timeout_ms: int,
    on_timeout: str,
    drain_said: str,
    autoinc_in_drain: bool = False,
) -> list[Step]:
    """The steps both native switchovers open with: [lower the auto-increment delay] -> drain A -> wait for its
    ConnUsed 0 in the writer hostgroup on every node. `autoinc_in_drain`: the delay lowered by the drain step itself,
    after its LOAD of the servers, instead of a step before it (the Galera manager's: see its caller)."""
    A = read.writer
    steps = []
    drain = per_node(read, "drain")
    if lower_autoinc and autoinc_in_drain:
        lower = per_node(read, "autoinc_off")
        drain = {
            node_id: {
                **spec,
                "sql": [*spec["sql"], *lower[node_id]["sql"]],
                "rollback": [*lower[node_id]["rollback"], *spec["rollback"]],
            }
            for node_id, spec in drain.items()
        }
        drain_said += f"; then {AUTOINC} lowered to 0 (sessions release the old writer)"
    elif lower_autoinc:
        steps.append(
            Step(
                "autoinc_off",
                f"Lower {AUTOINC} to 0 for the drain (sessions release the old writer)",
                PROXYSQL,
                per_node(read, "autoinc_off"),
            )
        )
    steps.append(Step("drain", drain_said, PROXYSQL, drain))
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
                "offline_hard": per_node(read, "offline_hard"),
            },
        )
    )
    return steps


def wait_monitor_step(
    read: NativeRead[Own], B: Server, W: int, said: str, monitor_timeout_ms: int, **more: str
) -> Step:
    """The wait for Monitor's placement of B in writer hostgroup W on every node (wait_monitor below); `more`: the
    Galera manager's old_marked."""
    A = read.writer
    return Step(
        "wait_monitor",
        said,
        WAIT_MONITOR,
        params={
            "writer_hostgroup": W,
            "new": [B.hostname, B.port],
            "old": [A.hostname, A.port],
            **more,
            "names": {str(n.pk): n.name for n in read.nodes},
            "timeout_ms": monitor_timeout_ms,
            "poll_ms": PLACEMENT_POLL_MS,
        },
    )


def closing_steps(
    read: NativeRead[Own],
    managed: Collection[int],
    lower_autoinc: bool | None,
    memory_back_said: str,
    verify_said: str,
    record_writer: Step,
) -> list[Step]:
    """The steps both native switchovers end with: memory back (the point of no return) -> verify memory ->
    [restore the auto-increment delay] -> record_writer."""
    steps = [
        Step("memory_back", memory_back_said, PROXYSQL, per_node(read, "memory_back"), point_of_no_return=True),
        Step(
            "verify_memory",
            verify_said,
            VERIFY,
            params={
                "rows": {str(n.node.pk): n.statements.configured for n in read.answered if n.statements},
                "hostgroups": sorted(managed),
                "variables": {},
                "layer": "memory",
            },
        ),
    ]
    if lower_autoinc:
        steps.append(Step("autoinc_restore", f"Restore {AUTOINC}", PROXYSQL, per_node(read, "autoinc_restore")))
    return steps + [record_writer]


def native_options(
    read: NativeRead[Own],
    B: Server,
    drain_timeout_ms: int,
    on_timeout: str,
    lower_autoinc: bool | None,
    monitor_timeout_ms: int,
) -> dict[str, Any]:
    """The options both native switchovers store (planned again at start with them)."""
    return {
        "drain_timeout_ms": drain_timeout_ms,
        "on_timeout": on_timeout,
        "lower_autoinc": lower_autoinc,
        "old_writer_to": "reader",
        "new_writer": B.pk,
        "old_writer": read.writer.pk,
        "monitor_timeout_ms": monitor_timeout_ms,
        "autoinc_values": {str(n.node.pk): n.variables.get(AUTOINC) for n in read.answered},
    }


def _pending(
    node: ProxySQLNode, runtime: list[ServerRow], memory: list[ServerRow], managed: Collection[int]
) -> list[str]:
    """The node's unloaded edits said for the no_pending_edits guard (empty: none)."""
    edits = _unloaded_edits(runtime, memory, managed)
    return [f"{node.name} (" + ", ".join(f"hg {k[0]} {k[1]}:{k[2]}" for k in sorted(edits)) + ")"] if edits else []


def _unloaded_edits(
    runtime: list[ServerRow], memory: list[ServerRow], managed: Collection[int]
) -> dict[ServerKey, tuple[ServerFields | None, ServerFields | None] | None]:
    """unloaded_edits() with Monitor's placement in the managed hostgroups folded back to memory's rows (fleet/native.py):
    where Monitor put a server is no edit ({key: (memory, runtime)}, or None inside the managed hostgroups)."""
    run = {r.key: configured(r) for r in runtime}
    mem = {r.key: configured(r) for r in memory}
    outside = unloaded_edits(
        [r for r in runtime if r.hostgroup_id not in managed], [r for r in memory if r.hostgroup_id not in managed]
    )
    folded = managers_view(
        {k: v for k, v in run.items() if k[0] in managed}, {k: v for k, v in mem.items() if k[0] in managed}, managed
    )
    inside = {k for k in folded.keys() | mem.keys() if k[0] in managed and folded.get(k) != mem.get(k)}
    return {**outside, **dict.fromkeys(inside)}


def _node_statements(
    sql: Sql,
    managed: Collection[int],
    W: int,
    R: int,
    A: Server,
    runtime: list[ServerRow],
    memory: list[ServerRow],
    variables: Variables,
) -> NativeNodeStatements:
    """One node's statements. Memory takes Monitor's placement (runtime) with A OFFLINE_SOFT in the writer hostgroup
    and reading in the reader one, so the drain's LOAD moves no server (a LOAD starts Monitor again from the loaded
    rows); once Monitor has moved the writer, memory goes back to the configured rows without a LOAD."""

    def mine(rows: list[ServerRow]) -> Rows:
        return {r.key: configured(r) for r in rows if r.hostgroup_id in managed}

    placed, configured_rows = mine(runtime), mine(memory)
    a_key = (W, A.hostname, A.port)
    drained = dict(placed)
    if a_key in placed:
        drained[a_key] = {**placed[a_key], "status": "OFFLINE_SOFT"}
        drained.setdefault((R, A.hostname, A.port), {**placed[a_key], "status": "ONLINE"})
    every = sorted(placed.keys() | configured_rows.keys() | drained.keys())
    # The way back whatever a node ran of it: every row written, the placement loaded, then memory as configured.
    back = _every_row(sql, every, placed) + [sql.LOAD_SERVERS] + _every_row(sql, every, configured_rows)
    hard = {**drained, a_key: {**drained[a_key], "status": "OFFLINE_HARD"}} if a_key in drained else drained
    return NativeNodeStatements(
        {
            **autoinc_parts(sql, variables),
            "drain": {"sql": _changes(sql, configured_rows, drained) + [sql.LOAD_SERVERS], "rollback": back},
            "offline_hard": {"sql": _changes(sql, drained, hard) + [sql.LOAD_SERVERS], "rollback": back},
            "memory_back": {"sql": _changes(sql, drained, configured_rows), "rollback": []},
        },
        [[*k, configured_rows[k]] for k in sorted(configured_rows)],
    )


def _changes(sql: Sql, have: Rows, want: Rows) -> list[str]:
    """The statements that turn rows `have` into `want` (only the rows that differ), in key order."""
    return role_statements(sql, have, {k: want.get(k) for k in sorted(have.keys() | want.keys())})[0]


def _every_row(sql: Sql, keys: Iterable[ServerKey], want: Rows) -> list[str]:
    """Every row of `keys` written as `want` has it (REPLACE) or removed (DELETE): right from any state."""
    return [sql.replace_server(_fields_row(k, want[k])) if k in want else sql.delete_server(*k) for k in keys]


# -- the step kinds of this way (registered in steps.py) -------------------------------------------------------------
class StepRun(Protocol):
    """What these step handlers use of the executor's Run (executor.py: above this module, which steps.py registers)."""

    op: Operation
    pool: Executor

    def admin(self, node_id: str | int) -> ProxySQLAdmin: ...

    def beat(self, force: bool = False) -> None: ...


def wait_monitor(
    run: StepRun, step: Step, row: OperationStep, executed: list[dict[str, Any]], detail: dict[str, Any]
) -> None:
    """Read runtime_mysql_servers on every node at once, every poll_ms, until each has the new writer ONLINE in the
    writer hostgroup and the old one out of it; past timeout_ms the step fails (the operation rolls back)."""
    p = step.params
    W, new, old = p["writer_hostgroup"], tuple(p["new"]), tuple(p["old"])
    nodes = list(p["names"])
    for node_id in nodes:
        run.admin(node_id)  # built here: node threads never touch the database
    start = time.monotonic()
    deadline = start + p["timeout_ms"] / 1000

    def writer_rows(node_id: str) -> list[tuple[str, int, str]]:
        return sorted(
            (r.hostname, r.port, r.status) for r in run.admin(node_id).servers("runtime") if r.hostgroup_id == W
        )

    def placed(rows: list[tuple[str, int, str]]) -> bool:
        """The new writer ONLINE; the old one out of the writer hostgroup, or (old_marked: the Galera manager) the only
        other writer there, with Monitor's mark of a backup writer: a row no plan writes, so its check ran."""
        if (*new, "ONLINE") not in rows:
            return False
        if marked is None:
            return not any((h, port) == old for h, port, _ in rows)
        return (*old, marked) in rows and [(h, port) for h, port, s in rows if s == "ONLINE"] == [new]

    marked = p.get("old_marked")
    rounds = 0
    while True:
        results = list(run.pool.map(capture(writer_rows), nodes))
        for _, error in results:
            if error is not None:
                raise error
        rounds += 1
        behind = {p["names"][n]: rows for n, (rows, _) in zip(nodes, results) if not placed(rows)}
        detail.update(
            rounds=rounds,
            waited_ms=round((time.monotonic() - start) * 1000, 2),
            behind={name: [f"{h}:{port} {status}" for h, port, status in rows] for name, rows in behind.items()},
        )
        if not behind:
            return
        if time.monotonic() >= deadline:
            said = "; ".join(
                f"{name}: hostgroup {W} holds {', '.join(f'{h}:{port} {s}' for h, port, s in rows) or 'nothing'}"
                for name, rows in behind.items()
            )
            where = f"marked {marked} in it" if marked else "out of it"
            undone = "the weights and the placement as they were" if marked else "read_only as it was on the backends"
            raise StepFailed(
                f"Monitor did not place {new[0]}:{new[1]} in writer hostgroup {W} with {old[0]}:{old[1]} "
                f"{where} within {p['timeout_ms']} ms ({said}); rolling back: {undone}, the drain undone"
            )
        run.beat()
        time.sleep(p["poll_ms"] / 1000)


def monitor_writer(
    run: StepRun, step: Step, row: OperationStep, executed: list[dict[str, Any]], detail: dict[str, Any]
) -> None:
    """The writer Monitor placed, recorded: its audit row (no inventory row moves: the configured rows are the
    intent and Monitor's placement is folded back to them, fleet/native.py)."""
    p = step.params
    if p.get("weights"):  # the Galera manager: the swapped weights are the intent now, the next configuration version

        def swapped(rows: Rows) -> Rows:
            return {
                key: {**rows[key], "weight": weight}
                for key, weight in (((hg, host, port), weight) for hg, host, port, weight in p["weights"])
                if key in rows
            }

        _once(run, detail, lambda: record_operation(run.op, swapped))
    record(
        f"writer placed by ProxySQL's {p.get('manager', 'replication')} manager",
        actor=Actor.of_operation(run.op),
        cluster=run.op.cluster,
        target=p["new_name"],
        details={"operation": run.op.pk, "old_writer": p["old_name"], "new_writer": p["new_name"]},
    )
    detail["writer"] = p["new_name"]
