"""Drift: the inventory's intended mysql_servers against each ProxySQL node's runtime, field by field,
and the nodes of one cluster against each other; and the global variables operations change
(MANAGED_VARIABLES) against their intended values.

ProxySQL keeps three layers (memory `main.*`, `runtime_*`, `disk.*`) and a restart loads disk: a change is
finished only when all three agree with intent. compare_layers() puts the three side by side and says what
a difference means (what a restart would load, what a LOAD would apply).

compare() and compare_layers() are pure (tests feed them rows); cluster_drift() reads every node's layers
concurrently, each read bounded by the client's timeouts, so one unreachable node costs at most one timeout.
"""
from dataclasses import dataclass, field

from apps.clients.proxysql import RUNTIME_ONLY_STATUSES, SERVER_FIELDS, configured, on_each_node

AUTOINC = "mysql-auto_increment_delay_multiplex"
# Global variables that operations change for a while (a switchover's drain lowers AUTOINC to 0): their
# intended values are recorded at adoption (ProxySQLNode.intended_variables), drift compares them, a
# repair writes them back.
MANAGED_VARIABLES = (AUTOINC,)

@dataclass
class FieldDrift:
    hostgroup_id: int
    hostname: str
    port: int
    field: str  # a mysql_servers column, or "row" when the whole row is missing/unexpected
    intended: object
    runtime: object
    note: str = ""


@dataclass
class NodeDrift:
    node_id: int
    node_name: str
    error: str = ""  # set when the node could not be read
    error_kind: str = ""
    differences: list = field(default_factory=list)
    runtime_rows: list = field(default_factory=list)
    runtime_states: list = field(default_factory=list)  # SHUNNED rows: ProxySQL's verdict, not drift
    variables: list = field(default_factory=list)  # VariableDrift
    layers: list = field(default_factory=list)  # LayerDifference: the three layers side by side
    findings: list = field(default_factory=list)  # LayerFinding: what a restart or a LOAD would do

    @property
    def in_sync(self):
        return not self.error and not self.differences and not self.variables and not self.layers


@dataclass
class VariableDrift:
    name: str
    intended: str
    runtime: str
    source: str  # where the intended value comes from


LAYERS = ("memory", "runtime", "disk")


# The layer model and the writer's words are shared with apps/configuration/drift.py (the three-layer engine over
# every table of the configuration version), which imports them from here: configuration sits above fleet.
@dataclass
class LayerDifference:
    """One value of one node on which its layers do not all agree with intent. A row: field "row", values
    "present" / "missing" (mysql_servers: key (hg, host, port)); a variable: key its name, field "value" (None:
    not in that layer). A layer not read is None. `differs`: the layers that differ from intent (when known);
    `row`: for a row difference, the row as intent (or else a layer) holds it."""
    table: str
    key: object
    field: str
    intended: object
    memory: object
    runtime: object
    disk: object
    differs: tuple = ()
    row: dict | None = None


@dataclass
class LayerFinding:
    """What a layer's difference means, in an operator's words."""
    layer: str  # "disk": what a restart would load; "runtime": what runs unsaved; "memory": what a LOAD would apply
    table: str
    words: str
    writer: bool = False  # a restart would change where writes go


def writer_finding(node_name, on_disk, intended, writer_hostgroup):
    """The finding when the writers a node's disk holds ("host:port", ONLINE in the writer hostgroup) are not the
    intended ones: where a restart would send writes. None when they are."""
    if on_disk == intended:
        return None
    words = (f"a restart of {node_name} would send writes to {' and '.join(on_disk)}" if on_disk else
             f"a restart of {node_name} would leave the writer hostgroup {writer_hostgroup} empty")
    if intended:
        words += f" instead of {' and '.join(intended)}"
    return LayerFinding("disk", "mysql_servers", words, writer=True)


@dataclass
class ClusterDrift:
    nodes: list
    between_nodes: list  # [{"key": (hg, host, port), "field": f, "values": {node_name: value}}]

    @property
    def in_sync(self):
        return all(n.in_sync for n in self.nodes) and not self.between_nodes


def intended_rows(cluster):
    """{(hg, host, port): {field: value}} from the inventory."""
    from .models import HostgroupMembership

    rows = {}
    for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server"):
        rows[m.key] = {f: getattr(m, f) for f in SERVER_FIELDS}
    return rows


def compare(intended, runtime_rows, hostgroups):
    """Per-row, per-field differences in configuration. `runtime_rows` are ServerRow-like dicts; only rows
    in `hostgroups` (the cluster's) are considered, so other clusters on the same ProxySQL are ignored.
    A runtime-only state (ProxySQL's own SHUNNED) is not drift: runtime_states() lists those."""
    runtime = {(r["hostgroup_id"], r["hostname"], r["port"]): configured(r) for r in runtime_rows
               if r["hostgroup_id"] in hostgroups}
    out = []
    for key in sorted(intended.keys() | runtime.keys()):
        want, have = intended.get(key), runtime.get(key)
        if have is None:
            out.append(FieldDrift(*key, "row", "present", "missing", "in the inventory, not in this node's runtime"))
            continue
        if want is None:
            out.append(FieldDrift(*key, "row", "absent", "present", "in this node's runtime, not in the inventory"))
            continue
        for f in SERVER_FIELDS:
            if want[f] != have[f]:
                out.append(FieldDrift(*key, f, want[f], have[f]))
    return out


def runtime_states(runtime_rows, hostgroups):
    """Rows whose runtime status is ProxySQL's own verdict (SHUNNED), not their configuration:
    [{"key": (hg, host, port), "status": ...}]. Shown beside drift, never as drift."""
    return [{"key": (r["hostgroup_id"], r["hostname"], r["port"]), "status": r["status"]}
            for r in runtime_rows if r["hostgroup_id"] in hostgroups and r["status"] in RUNTIME_ONLY_STATUSES]


def between_nodes(node_rows, hostgroups):
    """Rows where the runtimes of the cluster's nodes disagree. node_rows: {node_name: [row dicts]}."""
    if len(node_rows) < 2:
        return []
    per_node = {name: {(r["hostgroup_id"], r["hostname"], r["port"]): configured(r) for r in rows
                       if r["hostgroup_id"] in hostgroups}
                for name, rows in node_rows.items()}
    keys = set().union(*(rows.keys() for rows in per_node.values()))
    out = []
    for key in sorted(keys):
        present = {name: (key in rows) for name, rows in per_node.items()}
        if not all(present.values()):
            out.append({"key": key, "field": "row",
                        "values": {name: ("present" if p else "missing") for name, p in present.items()}})
            continue
        for f in SERVER_FIELDS:
            values = {name: rows[key][f] for name, rows in per_node.items()}
            if len(set(values.values())) > 1:
                out.append({"key": key, "field": f, "values": values})
    return out


def versioned_variables(cluster):
    """{name: (value, source)} for MANAGED_VARIABLES from the cluster's latest configuration version (read in the
    caller's thread: the database is not for node threads)."""
    from apps.configuration.services import latest

    version = latest(cluster)
    values = (version.content.get("global_variables") or {}) if version else {}
    return {name: (values[name], f"configuration version {version.number}") for name in MANAGED_VARIABLES
            if isinstance(values.get(name), str)}


def intended_variables(node, admin, versioned=None):
    """{name: (value, source)} for MANAGED_VARIABLES on this node: the cluster's configuration version when it
    holds one (`versioned`, from versioned_variables()); else the value recorded at adoption; for a node adopted
    before values were recorded, the node's own saved value (its disk layer: operations change these variables
    at runtime only and never SAVE them); else (None, "unknown")."""
    versioned = versioned or {}
    recorded = node.intended_variables or {}
    missing = [name for name in MANAGED_VARIABLES if recorded.get(name) is None and name not in versioned]
    disk = admin.global_variables(missing, layer="disk") if missing else {}
    out = {}
    for name in MANAGED_VARIABLES:
        if name in versioned:
            out[name] = versioned[name]
        elif recorded.get(name) is not None:
            out[name] = (str(recorded[name]), "recorded at adoption")
        elif disk.get(name) is not None:
            out[name] = (disk[name], "the node's disk layer (not recorded at adoption)")
        else:
            out[name] = (None, "unknown")
    return out


def compare_variables(intended, runtime):
    """VariableDrift for each managed variable whose runtime value is not the intended one (known only)."""
    return [VariableDrift(name, value, runtime.get(name), source) for name, (value, source) in intended.items()
            if value is not None and runtime.get(name) != value]


def _by_key(rows, hostgroups):
    return {(r["hostgroup_id"], r["hostname"], r["port"]): configured(r) for r in rows if r["hostgroup_id"] in hostgroups}


def _where(key):
    return f"hg {key[0]} {key[1]}:{key[2]}"


def _writers(rows, writer_hostgroup):
    return sorted(f"{k[1]}:{k[2]}" for k, v in rows.items() if k[0] == writer_hostgroup and v["status"] == "ONLINE")


def compare_layers(node_name, intended, layers, hostgroups, writer_hostgroup, intended_vars=None, variables=None):
    """(LayerDifference list, LayerFinding list) of one node. layers: {"memory"|"runtime"|"disk": mysql_servers row
    dicts}, a layer left out is not judged; intended_vars: {name: (value, source)} (intended_variables());
    variables: {layer: {name: value}}. Only the cluster's hostgroups count; ProxySQL's own SHUNNED is configured
    ONLINE (not drift). Findings: disk against intent (the writer first: where a restart would send writes), then
    memory against runtime (an edit not loaded yet)."""
    rows = {layer: _by_key(layers[layer], hostgroups) for layer in LAYERS if layers.get(layer) is not None}
    variables = variables or {}
    diffs = []
    for key in sorted(set(intended).union(*rows.values())):
        want = intended.get(key)
        have = {layer: r.get(key) for layer, r in rows.items()}
        if want is None or None in have.values():  # the row is somewhere and missing elsewhere
            mark = {layer: "missing" if v is None else "present" for layer, v in have.items()}
            diffs.append(LayerDifference("mysql_servers", key, "row", "missing" if want is None else "present",
                                         *(mark.get(layer) for layer in LAYERS)))
            continue
        for f in SERVER_FIELDS:
            values = {layer: v[f] for layer, v in have.items()}
            if any(v != want[f] for v in values.values()):
                diffs.append(LayerDifference("mysql_servers", key, f, want[f], *(values.get(layer) for layer in LAYERS)))
    for name, (want, _) in (intended_vars or {}).items():
        values = {layer: variables[layer].get(name) for layer in LAYERS if layer in variables}
        if want is not None and any(v != want for v in values.values()):
            diffs.append(LayerDifference("global_variables", name, "value", want, *(values.get(layer) for layer in LAYERS)))

    findings = []
    judged = {"mysql_servers": rows, "global_variables": variables}
    writer_moves = False
    if "disk" in rows:
        moved = writer_finding(node_name, _writers(rows["disk"], writer_hostgroup), _writers(intended, writer_hostgroup),
                               writer_hostgroup)
        writer_moves = moved is not None
        findings += [moved] if moved else []
    for d in diffs:
        if "disk" not in judged[d.table] or d.disk == d.intended:
            continue
        if d.table == "global_variables":
            what, instead = f"{d.key}={d.disk}", d.intended
        elif writer_moves and d.key[0] == writer_hostgroup and d.field in ("row", "status"):
            continue  # the writer finding says it
        elif d.field == "row":
            what, instead = ((f"no row for {_where(d.key)}", "the inventory's") if d.disk == "missing"
                             else (f"a row for {_where(d.key)}", "none"))
        else:
            what, instead = f"{_where(d.key)} {d.field} {d.disk}", d.intended
        findings.append(LayerFinding("disk", d.table, f"a restart of {node_name} would load {what} (disk) instead of "
                                                      f"{instead}"))
    for d in diffs:
        if not {"memory", "runtime"} <= judged[d.table].keys() or d.memory == d.runtime:
            continue
        if d.field == "row":
            what = (f"{_where(d.key)} deleted (runtime has it" if d.memory == "missing"
                    else f"{_where(d.key)} added (not at runtime")
        elif d.table == "mysql_servers":
            what = f"{_where(d.key)} {d.field} {d.memory} (runtime {d.runtime}"
        else:
            what = f"{d.key}={d.memory} (runtime {d.runtime}"
        findings.append(LayerFinding("memory", d.table, f"unloaded edit in memory: {what}; a LOAD would apply it)"))
    return diffs, findings


def polled_layer(doc, layer):
    """One layer's mysql_servers rows in a ProxySQL node's latest-state document (apps/monitoring/pollers.py), None
    when not polled yet. "runtime" in the document: the layer held the runtime's configuration when it was read."""
    if layer == "runtime":
        return doc.get("runtime_servers")
    rows = doc.get(f"{layer}_servers")
    return doc.get("runtime_servers") if rows == "runtime" else rows


def read_layers(node, admin, versioned=None):
    """What cluster_drift() compares of one node: mysql_servers and the managed variables in every layer
    (six reads), and their intended values."""
    servers = {layer: [r.__dict__ for r in admin.servers(layer)] for layer in LAYERS}
    variables = {layer: admin.global_variables(MANAGED_VARIABLES, layer=layer) for layer in LAYERS}
    return servers, variables, intended_variables(node, admin, versioned)


def read_runtime(node, admin, versioned=None):
    """(runtime mysql_servers rows as dicts, variable differences) of one node."""
    rows = [r.__dict__ for r in admin.servers("runtime")]
    variables = compare_variables(intended_variables(node, admin, versioned), admin.global_variables(MANAGED_VARIABLES))
    return rows, variables


def cluster_drift(cluster):
    nodes = list(cluster.proxysql_nodes.all())
    intended = intended_rows(cluster)
    hostgroups = cluster.hostgroup_ids()
    results = []
    versioned = versioned_variables(cluster)
    for node, read, error in on_each_node(nodes, lambda node, admin: read_layers(node, admin, versioned)):
        if error is not None:
            results.append(NodeDrift(node.pk, node.name, error=str(error), error_kind=error.kind))
            continue
        servers, variables, wanted = read
        rows = [r for r in servers["runtime"] if r["hostgroup_id"] in hostgroups]  # a shared ProxySQL's other clusters stay out
        layers, findings = compare_layers(node.name, intended, servers, hostgroups, cluster.writer_hostgroup, wanted,
                                          variables)
        results.append(NodeDrift(node.pk, node.name, differences=compare(intended, rows, hostgroups), runtime_rows=rows,
                                 runtime_states=runtime_states(rows, hostgroups),
                                 variables=compare_variables(wanted, variables["runtime"]), layers=layers,
                                 findings=findings))
    readable = {r.node_name: r.runtime_rows for r in results if not r.error}
    return ClusterDrift(nodes=results, between_nodes=between_nodes(readable, hostgroups))
