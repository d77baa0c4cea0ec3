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

from dataclasses import dataclass

from apps.clients.proxysql import SERVER_FIELDS, configured, on_each_node
from apps.configuration import content as C
from apps.configuration.services import versioned_variables
from apps.fleet import native
from apps.fleet.drift import MANAGED_VARIABLES, intended_rows
from apps.plans.vocabulary import INVENTORY, PROXYSQL, VERIFY, Guard, Plan, Sql, Step, no_other_operation

from . import pending_rows, shared
from .choices import OperationKind
from .locks import current_holder
from .switchover import _row, unloaded_edits


def _intended_row(key, fields):
    return {"hostgroup_id": key[0], "hostname": key[1], "port": key[2], **{f: fields[f] for f in SERVER_FIELDS}}


LAYERS = ("runtime", "memory", "disk")


def _by_value(layers, want):
    """[(value, [layer names])]: the layers whose value differs from `want`, grouped by what they hold."""
    groups = []
    for name, have in layers:
        if have != want:
            group = next((g for g in groups if g[0] == have), None)
            if group is None:
                groups.append((have, [name]))
            else:
                group[1].append(name)
    return groups


def _row_change(have, want):
    """How a layer's row differs from the intended one."""
    if want is None:
        return f"{have['status']}, not in the inventory"
    if have is None:
        return "missing"
    return ", ".join(f"{f} {have[f]!r} → {want[f]!r}" for f in SERVER_FIELDS if have[f] != want[f])


def _after_restart(key, have, want, writer_hostgroup):
    """What a restart (it loads disk) would do with writes, when the disk's row differs from intent."""

    def online(row):
        return row is not None and row["status"] == "ONLINE"

    if key[0] != writer_hostgroup or online(have) == online(want):
        return ""
    return f": a restart would {'send' if online(have) else 'not send'} writes to {key[1]}:{key[2]}"


def managers_view(rows, intended, managed):
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


def node_statements(sql, intended, hostgroups, read, writer_hostgroup, managed=()):
    """Statements that bring one node's memory, runtime and disk to the inventory's intent, from what it holds
    now (`read`); `changes` says, per row or variable, which layers differ and how. `managed`: the hostgroups
    ProxySQL's own manager places (Cluster.managed_hostgroups())."""
    runtime = {r.key: r for r in read["runtime"] if r.hostgroup_id in hostgroups}
    layers = {
        "runtime": managers_view({k: configured(r) for k, r in runtime.items()}, intended, managed),
        "memory": {r.key: configured(r) for r in read["memory"] if r.hostgroup_id in hostgroups},
        "disk": {r.key: configured(r) for r in read["disk"] if r.hostgroup_id in hostgroups},
    }
    rows, rows_undo, changes, save = [], [], [], []
    for key in sorted(set().union(intended, *layers.values())):
        want = intended.get(key)
        differing = _by_value([(name, layers[name].get(key)) for name in LAYERS], want)
        if not differing:
            continue
        where = f"hg {key[0]} {key[1]}:{key[2]}"
        for have, names in differing:
            after = _after_restart(key, have, want, writer_hostgroup) if "disk" in names else ""
            changes.append(f"{' and '.join(names)}: {where}: {_row_change(have, want)}{after}")
        if want == layers["runtime"].get(key) and want == layers["memory"].get(key):
            continue  # the disk alone differs: the SAVE puts it right
        rows.append(sql.delete_server(*key) if want is None else sql.replace_server(_intended_row(key, want)))
        rows_undo.append(sql.replace_server(_row(runtime[key])) if key in runtime else sql.delete_server(*key))
    disk_rows = layers["disk"] != intended
    variables, variables_undo, unknown, disk_variables = [], [], [], False
    for name, (value, source) in read["intended_variables"].items():
        if value is None:
            unknown.append(name)
            continue
        have = read["variables"].get(name)
        values = {
            "runtime": have,
            "memory": read["memory_variables"].get(name),
            "disk": read["disk_variables"].get(name),
        }
        for was, names in _by_value([(layer, values[layer]) for layer in LAYERS], value):
            changes.append(f"{' and '.join(names)}: {name}: {was} → {value} ({source})")
        disk_variables = disk_variables or values["disk"] != value
        if have == value and values["memory"] == value:
            continue
        variables.append(sql.set_variable(name, value))
        if have is not None:
            variables_undo.append(sql.set_variable(name, have))
    forward, undo = [], []
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

    def outside(rows):
        return [r for r in rows if r.hostgroup_id not in hostgroups]

    elsewhere = sorted(unloaded_edits(outside(read["runtime"]), outside(read["memory"])))
    return {
        "sql": forward,
        "rollback": undo,
        "save": save,
        "changes": changes,
        "unknown": unknown,
        "edits_elsewhere": [f"hg {k[0]} {k[1]}:{k[2]}" for k in elsewhere],
    }


OFFLINE = ("OFFLINE_SOFT", "OFFLINE_HARD")


def _writers(rows, writer_hostgroup):
    return sorted(
        (k[1], k[2]) for k, fields in rows.items() if k[0] == writer_hostgroup and fields["status"] == "ONLINE"
    )


def _drained(rows):
    """{(host, port): True when every row of that server is OFFLINE_SOFT/HARD (drained as a drain leaves it)}."""
    out = {}
    for (_, host, port), fields in rows.items():
        out[(host, port)] = out.get((host, port), True) and fields["status"] in OFFLINE
    return out


def operational_differences(intended, runtimes, selected, writer_hostgroup):
    """What a repair of the `selected` node names would change that operations own: [sentence]. `runtimes`: every
    answering node's runtime rows in the cluster's hostgroups ({name: {key: fields}}). Pure."""
    problems = []
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


def instead(runtimes, every_node_answered):
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

    nodes: list
    intended: dict
    hostgroups: set
    per_node: dict
    unreachable: list
    runtimes: dict
    others_silent: bool
    holder: str | None
    native: list
    pending: list


def read_repair(cluster, node_ids=None):
    nodes = list(cluster.proxysql_nodes.order_by("pk"))
    if node_ids:
        nodes = [n for n in nodes if n.pk in set(node_ids)]
    intended = intended_rows(cluster)
    hostgroups = cluster.hostgroup_ids()
    managed = cluster.managed_hostgroups()
    versioned = versioned_variables(cluster)

    def read(node, admin):
        state = {
            "runtime": admin.servers("runtime"),
            "memory": admin.servers("memory"),
            "disk": admin.servers("disk"),
            "variables": admin.global_variables(MANAGED_VARIABLES),
            "memory_variables": admin.global_variables(MANAGED_VARIABLES, layer="memory"),
            "disk_variables": admin.global_variables(MANAGED_VARIABLES, layer="disk"),
            "intended_variables": versioned,
        }
        return {
            **node_statements(Sql(admin), intended, hostgroups, state, cluster.writer_hostgroup, managed),
            "expect_variables": {k: v for k, (v, _) in state["intended_variables"].items() if v is not None},
        }

    per_node, unreachable = {}, []
    for node, result, error in on_each_node(nodes, read):
        if error is not None:
            unreachable.append(f"{node.name}: {error.message}")
        else:
            per_node[str(node.pk)] = {"name": node.name, **result}
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


def plan_repair(cluster, node_ids=None):
    """The repair plan for these ProxySQL nodes of the cluster (all when None). Network reads only: read
    (read_repair), then judged (repair_guards) and built (repair_steps) from the read alone."""
    read = read_repair(cluster, node_ids)
    guards, operational = repair_guards(cluster, read)
    facts = {
        "nodes": {
            k: {"name": v["name"], "changes": v["changes"], "nothing_to_do": not v["sql"] and not v["save"]}
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


def repair_guards(cluster, read):
    """(guards, operational differences: the writer moves and drains the repair refuses)."""
    W, intended, per_node = cluster.writer_hostgroup, read.intended, read.per_node
    operational = operational_differences(intended, read.runtimes, [v["name"] for v in per_node.values()], W)
    writers = [k for k, v in intended.items() if k[0] == W and v["status"] == "ONLINE"]
    unknown = sorted({f"{v['name']}: {name}" for v in per_node.values() for name in v["unknown"]})
    elsewhere = [f"{v['name']} ({', '.join(v['edits_elsewhere'])})" for v in per_node.values() if v["edits_elsewhere"]]
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


def repair_steps(read):
    per_node = read.per_node
    expect = {
        "expect": {},
        "hostgroups": sorted(read.hostgroups),
        "rows": {k: [[*key, fields] for key, fields in sorted(read.intended.items())] for k in per_node},
        "variables": {k: v["expect_variables"] for k, v in per_node.items()},
    }
    return [
        # Forward only: a node that stops answering keeps the rest for later (finish pending), and the nodes that
        # answered stay repaired; a rollback would put back the drift the repair was asked to remove.
        Step(
            "repair",
            "Write the inventory's rows and variables on each node and load them",
            PROXYSQL,
            {k: {"name": v["name"], "sql": v["sql"], "rollback": v["rollback"]} for k, v in per_node.items()},
            forward_only=True,
        ),
        Step("verify", "Verify each node's runtime equals the inventory", VERIFY, params=expect),
        Step(
            "save",
            "Save to disk on each node",
            PROXYSQL,
            {k: {"name": v["name"], "sql": v["save"], "rollback": []} for k, v in per_node.items()},
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


def _runtimes(cluster, hostgroups):
    """Every node's runtime rows in the cluster's hostgroups ({name: {key: configured fields}}), the nodes that answer;
    and whether one did not."""

    def read(node, admin):
        return {r.key: configured(r) for r in admin.servers("runtime") if r.hostgroup_id in hostgroups}

    results = on_each_node(cluster.proxysql_nodes.order_by("pk"), read)
    return (
        {node.name: rows for node, rows, error in results if error is None},
        any(error is not None for _, _, error in results),
    )
