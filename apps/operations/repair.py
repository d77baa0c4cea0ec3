"""Repair ProxySQL nodes from the inventory: the planner. For one node or every node of a cluster it writes
the inventory's intent, in the cluster's hostgroups only: every intended mysql_servers row (REPLACE), no row
the inventory does not hold (DELETE), and every variable operations change (drift.MANAGED_VARIABLES) at its
intended value; then load, verify the runtime, save, verify the disk. All three layers are compared (a restart
loads disk): rows and variables that match in memory and at runtime produce no statement, and a node whose disk
alone differs gets just the SAVE. A repair goes forward only: a node that stops answering keeps the rest of its
statements for later (finish pending, retried until it answers), since undoing the nodes that answered would put
back the drift (the rollback statements, what the node ran before, are kept for the record). Once done, pending
rollbacks of the repaired nodes are resolved (they would undo the repair).

Compared as configuration: a SHUNNED runtime row is ProxySQL's verdict on that node, not a difference.

A repair never moves the writer and never drains (operations own them, issue 39): when the nodes send writes to
another server than the inventory names (and no node runs the inventory's writer: then the repaired one only lags
behind the others), or every node agrees that a server is drained (or in service) where the inventory says otherwise,
the repair is refused and says what fits instead (operational_differences).
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from apps.clients.proxysql import SERVER_FIELDS, ProxySQLAdmin, ServerRow, configured, on_each_node
from apps.configuration import content as C
from apps.configuration.services import ServerKey, versioned_variables
from apps.fleet import native
from apps.fleet.drift import MANAGED_VARIABLES, intended_rows
from apps.fleet.models import Cluster, ProxySQLNode
from apps.plans.vocabulary import INVENTORY, PROXYSQL, VERIFY, Guard, Plan, Sql, Step, no_other_operation

from . import pending_rows, shared
from .choices import OperationKind
from .locks import current_holder
from .switchover import _row, unloaded_edits

Fields = dict[str, int | str | None]  # a mysql_servers row's configured columns (SERVER_FIELDS), as configured() gives
Rows = dict[ServerKey, Fields]  # (hostgroup, host, port) -> its configured columns
V = TypeVar("V")


def _intended_row(key: ServerKey, fields: Mapping[str, object]) -> dict[str, object]:
    return {"hostgroup_id": key[0], "hostname": key[1], "port": key[2], **{f: fields[f] for f in SERVER_FIELDS}}


LAYERS = ("runtime", "memory", "disk")


def _by_value(layers: Iterable[tuple[str, V]], want: V) -> list[tuple[V, list[str]]]:
    """[(value, [layer names])]: the layers whose value differs from `want`, grouped by what they hold."""
    groups: list[tuple[V, list[str]]] = []
    for name, have in layers:
        if have != want:
            group = next((g for g in groups if g[0] == have), None)
            if group is None:
                groups.append((have, [name]))
            else:
                group[1].append(name)
    return groups


def _row_change(have: Fields | None, want: Fields | None) -> str:
    """How a layer's row differs from the intended one (they differ: not both None)."""
    if have is None:
        return "missing"
    if want is None:
        return f"{have['status']}, not in the inventory"
    return ", ".join(f"{f} {have[f]!r} → {want[f]!r}" for f in SERVER_FIELDS if have[f] != want[f])


def _after_restart(key: ServerKey, have: Fields | None, want: Fields | None, writer_hostgroup: int) -> str:
    """What a restart (it loads disk) would do with writes, when the disk's row differs from intent."""

    def online(row: Fields | None) -> bool:
        return row is not None and row["status"] == "ONLINE"

    if key[0] != writer_hostgroup or online(have) == online(want):
        return ""
    return f": a restart would {'send' if online(have) else 'not send'} writes to {key[1]}:{key[2]}"


def managers_view(rows: Rows, intended: Mapping[ServerKey, Fields], managed: Collection[int]) -> Rows:
    """{key: configured fields} of a runtime with ProxySQL's own manager's placement in `managed` folded back to the
    inventory's rows (fleet/native.py): where Monitor put the servers is no change for a repair to make."""
    if not managed:
        return rows
    folded = native.fold(
        [{"hostgroup_id": k[0], "hostname": k[1], "port": k[2], **v} for k, v in rows.items()],
        [{"hostgroup_id": k[0], "hostname": k[1], "port": k[2], **v} for k, v in intended.items()],
        managed,
        columns=SERVER_FIELDS,
    )
    return {(r["hostgroup_id"], r["hostname"], r["port"]): {f: r[f] for f in SERVER_FIELDS} for r in folded}


@dataclass
class NodeLayers:
    """What a repair reads of one node: its mysql_servers in each layer, the managed variables in each layer
    ({name: value}) and their intent from the version ({name: (value or None when not known, source)})."""

    runtime: list[ServerRow]
    memory: list[ServerRow]
    disk: list[ServerRow]
    variables: dict[str, str]  # runtime
    memory_variables: dict[str, str]
    disk_variables: dict[str, str]
    intended_variables: dict[str, tuple[str | None, str]]


@dataclass
class NodeRepair:
    """One node's repair: the statements that bring its memory and runtime to the intent and their way back, the
    SAVEs (disk), per row or variable which layers differ and how (changes), the variables whose intent is not known,
    the unloaded edits outside the cluster's hostgroups; and, once read_repair() names them, the node's name and the
    variables the verify expects."""

    sql: list[str]
    rollback: list[str]
    save: list[str]
    changes: list[str]
    unknown: list[str]
    edits_elsewhere: list[str]
    name: str = ""
    expect_variables: dict[str, str] = field(default_factory=dict)


def node_statements(
    sql: Sql,
    intended: Rows,
    hostgroups: Collection[int],
    read: NodeLayers,
    writer_hostgroup: int,
    managed: Collection[int] = (),
) -> NodeRepair:
    """Statements that bring one node's memory, runtime and disk to the inventory's intent, from what it holds
    now (`read`); `changes` says, per row or variable, which layers differ and how. `managed`: the hostgroups
    ProxySQL's own manager places (Cluster.managed_hostgroups())."""
    runtime = {r.key: r for r in read.runtime if r.hostgroup_id in hostgroups}
    layers = {
        "runtime": managers_view({k: configured(r) for k, r in runtime.items()}, intended, managed),
        "memory": {r.key: configured(r) for r in read.memory if r.hostgroup_id in hostgroups},
        "disk": {r.key: configured(r) for r in read.disk if r.hostgroup_id in hostgroups},
    }
    rows: list[str] = []
    rows_undo: list[str] = []
    changes: list[str] = []
    save: list[str] = []
    keys: set[ServerKey] = set().union(intended, *layers.values())
    for key in sorted(keys):
        want = intended.get(key)
        differing = _by_value([(name, layers[name].get(key)) for name in LAYERS], want)
        if not differing:
            continue
        where = f"hg {key[0]} {key[1]}:{key[2]}"
        for held, names in differing:
            after = _after_restart(key, held, want, writer_hostgroup) if "disk" in names else ""
            changes.append(f"{' and '.join(names)}: {where}: {_row_change(held, want)}{after}")
        if want == layers["runtime"].get(key) and want == layers["memory"].get(key):
            continue  # the disk alone differs: the SAVE puts it right
        rows.append(sql.delete_server(*key) if want is None else sql.replace_server(_intended_row(key, want)))
        rows_undo.append(sql.replace_server(_row(runtime[key])) if key in runtime else sql.delete_server(*key))
    disk_rows = layers["disk"] != intended
    variables: list[str] = []
    variables_undo: list[str] = []
    unknown: list[str] = []
    disk_variables = False
    for name, (value, source) in read.intended_variables.items():
        if value is None:
            unknown.append(name)
            continue
        have = read.variables.get(name)
        values = {
            "runtime": have,
            "memory": read.memory_variables.get(name),
            "disk": read.disk_variables.get(name),
        }
        for was, names in _by_value([(layer, values[layer]) for layer in LAYERS], value):
            changes.append(f"{' and '.join(names)}: {name}: {was} → {value} ({source})")
        disk_variables = disk_variables or values["disk"] != value
        if have == value and values["memory"] == value:
            continue
        variables.append(sql.set_variable(name, value))
        if have is not None:
            variables_undo.append(sql.set_variable(name, have))
    forward: list[str] = []
    undo: list[str] = []
    if rows:
        forward += rows + [sql.LOAD_SERVERS]
        undo += rows_undo + [sql.LOAD_SERVERS]
    if rows or disk_rows:
        save.append(sql.SAVE_SERVERS)
    if variables:
        forward += variables + [sql.LOAD_VARIABLES]
        undo += variables_undo + [sql.LOAD_VARIABLES]
    if variables or disk_variables:
        save.append(sql.SAVE_VARIABLES)

    def outside(rows: list[ServerRow]) -> list[ServerRow]:
        return [r for r in rows if r.hostgroup_id not in hostgroups]

    elsewhere = sorted(unloaded_edits(outside(read.runtime), outside(read.memory)))
    return NodeRepair(forward, undo, save, changes, unknown, [f"hg {k[0]} {k[1]}:{k[2]}" for k in elsewhere])


OFFLINE = ("OFFLINE_SOFT", "OFFLINE_HARD")


def _writers(rows: Mapping[ServerKey, Fields], writer_hostgroup: int) -> list[tuple[str, int]]:
    return sorted(
        (k[1], k[2]) for k, fields in rows.items() if k[0] == writer_hostgroup and fields["status"] == "ONLINE"
    )


def _drained(rows: Mapping[ServerKey, Fields]) -> dict[tuple[str, int], bool]:
    """{(host, port): True when every row of that server is OFFLINE_SOFT/HARD (drained as a drain leaves it)}."""
    out: dict[tuple[str, int], bool] = {}
    for (_, host, port), fields in rows.items():
        out[(host, port)] = out.get((host, port), True) and fields["status"] in OFFLINE
    return out


def operational_differences(
    intended: Rows, runtimes: Mapping[str, Rows], selected: Sequence[str], writer_hostgroup: int
) -> list[str]:
    """What a repair of the `selected` node names would change that operations own: [sentence]. `runtimes`: every
    answering node's runtime rows in the cluster's hostgroups ({name: {key: fields}}). Pure."""
    problems: list[str] = []
    want = _writers(intended, writer_hostgroup)
    running = {name: _writers(rows, writer_hostgroup) for name, rows in runtimes.items()}
    if want not in running.values():  # no node writes where the inventory says: the repair would move writes
        for name in selected:
            if running.get(name) and running[name] != want:
                problems.append(
                    f"{name} sends writes to {C.endpoints(running[name])}, the inventory names "
                    f"{C.endpoints(want)}: the repair would move the writer without a drain"
                )
    intended_drained = _drained(intended)
    drained = [_drained(rows) for rows in runtimes.values()]
    for server, is_drained in sorted(intended_drained.items()):
        on_nodes = {d.get(server) for d in drained}
        if len(on_nodes) == 1 and None not in on_nodes and on_nodes != {is_drained} and selected:
            now, there = ("drained", "in service") if not is_drained else ("in service", "drained")
            problems.append(
                f"every node has {server[0]}:{server[1]} {now}, the inventory has it {there}: the repair "
                f"would {'restore' if now == 'drained' else 'drain'} it"
            )
    return problems


def instead(runtimes: Mapping[str, Rows], every_node_answered: bool) -> list[str]:
    """What fits instead of a refused repair, in the operator's words."""
    rows = list(runtimes.values())
    agree = every_node_answered and bool(rows) and all(r == rows[0] for r in rows)
    offers = ["a planned switchover, drain or restore (guarded, drained) to move writes or change who is drained"]
    if agree:
        offers.insert(
            0,
            "every node runs the same rows: an admin can record what the nodes run as the next version "
            "(with a reason, the difference shown, audited)",
        )
    return offers


@dataclass
class RepairRead:
    """What a repair reads, before it judges: the selected nodes; the intent (the version's rows, hostgroups, managed
    hostgroups); per selected node that answered its statements (node_statements, rendered with its driver's
    escaping), and those that did not; every node's runtime in the cluster's hostgroups as the managers' view
    (runtimes) and whether a node did not answer that read; the cluster's lock, active native managers and the
    rollbacks pending on the selected nodes."""

    nodes: list[ProxySQLNode]
    intended: Rows
    hostgroups: set[int]
    per_node: dict[str, NodeRepair]  # node pk (str) -> its repair
    unreachable: list[str]  # "name: why"
    runtimes: dict[str, Rows]  # node name -> its runtime rows in the cluster's hostgroups, as the managers' view
    others_silent: bool
    holder: str | None
    native: list[dict[str, Any]]  # Cluster.active_native_hostgroups(): a manager's row (kind, writer_hostgroup...)
    pending: list[str]


def read_repair(cluster: Cluster, node_ids: Collection[int] | None = None) -> RepairRead:
    nodes = list(cluster.proxysql_nodes.order_by("pk"))
    if node_ids:
        nodes = [n for n in nodes if n.pk in set(node_ids)]
    intended = intended_rows(cluster)
    hostgroups = cluster.hostgroup_ids()
    managed = cluster.managed_hostgroups()
    versioned = versioned_variables(cluster)

    def read(node: ProxySQLNode, admin: ProxySQLAdmin) -> NodeRepair:
        state = NodeLayers(
            admin.servers("runtime"),
            admin.servers("memory"),
            admin.servers("disk"),
            admin.global_variables(MANAGED_VARIABLES),
            admin.global_variables(MANAGED_VARIABLES, layer="memory"),
            admin.global_variables(MANAGED_VARIABLES, layer="disk"),
            versioned,
        )
        return replace(
            node_statements(Sql(admin), intended, hostgroups, state, cluster.writer_hostgroup, managed),
            name=node.name,
            expect_variables={k: v for k, (v, _) in state.intended_variables.items() if v is not None},
        )

    per_node: dict[str, NodeRepair] = {}
    unreachable: list[str] = []
    for node, result, error in on_each_node(nodes, read):
        if error is not None:
            unreachable.append(f"{node.name}: {error.message}")
        elif result is not None:
            per_node[str(node.pk)] = result
    runtimes, others_silent = _runtimes(cluster, hostgroups)
    pending = pending_rows.open_rows(cluster).filter(node_id__in=[n.pk for n in nodes])
    return RepairRead(
        nodes,
        intended,
        hostgroups,
        per_node,
        unreachable,
        {name: managers_view(rows, intended, managed) for name, rows in runtimes.items()},
        others_silent,
        current_holder(cluster),
        cluster.active_native_hostgroups(),
        [
            f"#{p.operation_id} on {p.node.name} ({p.operation.finish_or_rollback} pending)"
            for p in pending.select_related("node", "operation")
        ],
    )


def plan_repair(cluster: Cluster, node_ids: Collection[int] | None = None) -> Plan:
    """The repair plan for these ProxySQL nodes of the cluster (all when None). Network reads only: read
    (read_repair), then judged (repair_guards) and built (repair_steps) from the read alone."""
    read = read_repair(cluster, node_ids)
    guards, operational = repair_guards(cluster, read)
    facts: dict[str, Any] = {
        "nodes": {
            k: {"name": v.name, "changes": v.changes, "nothing_to_do": not v.sql and not v.save}
            for k, v in read.per_node.items()
        },
        "pending_rollbacks": read.pending,
    }
    if operational:
        facts["instead"] = instead(read.runtimes, not read.unreachable and not read.others_silent)
    scope = read.nodes[0].name if len(read.nodes) == 1 else "every node"
    return shared.annotate(
        Plan(
            OperationKind.REPAIR,
            cluster.pk,
            f"Repair {scope} of {cluster.name} from the inventory",
            guards,
            repair_steps(read),
            facts,
            options={"nodes": [n.pk for n in read.nodes] if node_ids else None},
        ),
        cluster,
    )


def repair_guards(cluster: Cluster, read: RepairRead) -> tuple[list[Guard], list[str]]:
    """(guards, operational differences: the writer moves and drains the repair refuses)."""
    W, intended, per_node = cluster.writer_hostgroup, read.intended, read.per_node
    operational = operational_differences(intended, read.runtimes, [v.name for v in per_node.values()], W)
    writers = [k for k, v in intended.items() if k[0] == W and v["status"] == "ONLINE"]
    unknown = sorted({f"{v.name}: {name}" for v in per_node.values() for name in v.unknown})
    elsewhere = [f"{v.name} ({', '.join(v.edits_elsewhere)})" for v in per_node.values() if v.edits_elsewhere]
    guards = [
        Guard(
            "nodes_selected",
            "At least one ProxySQL node of this cluster is selected",
            bool(read.nodes),
            ", ".join(n.name for n in read.nodes) or "none",
            False,
        ),
        Guard(
            "proxysql_reachable",
            "Every selected ProxySQL node answers",
            not read.unreachable,
            "; ".join(read.unreachable) or "yes",
            False,
        ),
        # An empty or writer-less inventory would empty the node: never repair from that.
        Guard(
            "inventory_writer",
            f"The inventory has an ONLINE writer in writer hostgroup {W}",
            bool(writers),
            ", ".join(f"{k[1]}:{k[2]}" for k in writers) or "none",
            False,
        ),
        no_other_operation(read.holder),
        Guard(
            "no_native_hostgroups",
            "ProxySQL's native hostgroup manager is not active on these hostgroups",
            not read.native,
            ", ".join(f"{n['kind']} writer {n['writer_hostgroup']}" for n in read.native) or "inactive",
            False,
        ),
        Guard(
            "moves_no_writer",
            "The repair moves no writer and drains or restores no server (operations own them)",
            not operational,
            "; ".join(operational) or "none",
            False,
        ),
        Guard(
            "intended_variables_known",
            "The intended value of every variable operations change is known",
            not unknown,
            "; ".join(unknown) or "yes",
        ),
        Guard(
            "no_edits_elsewhere",
            "No unloaded mysql_servers edits outside this cluster's hostgroups (the LOAD would apply them too)",
            not elsewhere,
            "; ".join(elsewhere) or "none",
        ),
    ]
    return guards, operational


def repair_steps(read: RepairRead) -> list[Step]:
    per_node = read.per_node
    expect = {
        "expect": {},
        "hostgroups": sorted(read.hostgroups),
        "rows": {k: [[*key, fields] for key, fields in sorted(read.intended.items())] for k in per_node},
        "variables": {k: v.expect_variables for k, v in per_node.items()},
    }
    return [
        # Forward only: a node that stops answering keeps the rest for later (finish pending), and the nodes that
        # answered stay repaired; a rollback would put back the drift the repair was asked to remove.
        Step(
            "repair",
            "Write the inventory's rows and variables on each node and load them",
            PROXYSQL,
            {k: {"name": v.name, "sql": v.sql, "rollback": v.rollback} for k, v in per_node.items()},
            forward_only=True,
        ),
        Step("verify", "Verify each node's runtime equals the inventory", VERIFY, params=expect),
        Step(
            "save",
            "Save to disk on each node",
            PROXYSQL,
            {k: {"name": v.name, "sql": v.save, "rollback": []} for k, v in per_node.items()},
            point_of_no_return=True,
        ),
        Step(
            "verify_disk",
            "Verify each node's disk equals the inventory (a restart loads it)",
            VERIFY,
            params={**expect, "layer": "disk"},
        ),
        Step(
            "inventory",
            "Resolve what is pending (rollback or finish) on the repaired nodes",
            INVENTORY,
            params={"action": "resolve_pending_rollbacks", "nodes": [int(k) for k in per_node]},
        ),
    ]


def _runtimes(cluster: Cluster, hostgroups: Collection[int]) -> tuple[dict[str, Rows], bool]:
    """Every node's runtime rows in the cluster's hostgroups ({name: {key: configured fields}}), the nodes that answer;
    and whether one did not."""

    def read(node: ProxySQLNode, admin: ProxySQLAdmin) -> Rows:
        return {r.key: configured(r) for r in admin.servers("runtime") if r.hostgroup_id in hostgroups}

    results = on_each_node(cluster.proxysql_nodes.order_by("pk"), read)
    return (
        {node.name: rows for node, rows, error in results if rows is not None},
        any(error is not None for _, _, error in results),
    )
