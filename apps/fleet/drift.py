"""Thin drift helpers under apps/configuration/drift.py (the one drift engine: every table and variable of the
version, three layers, in an operator's words): the layer model it fills (LayerDifference, LayerFinding,
writer_finding, NodeDrift), the runtime's own states (runtime_states: SHUNNED is ProxySQL's verdict, not drift),
nodes against each other (between_nodes), the runtime against the inventory on polled rows (compare: the overview,
no connection), and MANAGED_VARIABLES (their intent: the configuration version).
"""

from dataclasses import dataclass, field

from apps.clients.proxysql import RUNTIME_ONLY_STATUSES, SERVER_FIELDS, configured

from .models import HostgroupMembership

AUTOINC = "mysql-auto_increment_delay_multiplex"
# Global variables that operations change for a while (a switchover's drain lowers AUTOINC to 0): their
# intended values live in the cluster's configuration version like every other (adoption puts them there),
# drift compares them, a repair writes them back (configuration.services.versioned_variables).
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
    variables: list = field(default_factory=list)  # VariableDrift: a global variable whose runtime is not intent's
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
    source: str  # where the intended value comes from ("version 3")


# The layer model and the writer's words, filled by apps/configuration/drift.py (configuration sits above fleet).
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
    words = (
        f"a restart of {node_name} would send writes to {' and '.join(on_disk)}"
        if on_disk
        else f"a restart of {node_name} would leave the writer hostgroup {writer_hostgroup} empty"
    )
    if intended:
        words += f" instead of {' and '.join(intended)}"
    return LayerFinding("disk", "mysql_servers", words, writer=True)


def intended_rows(cluster):
    """{(hg, host, port): {field: value}} from the inventory: the read model of the latest version's rows."""
    rows = {}
    for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server"):
        rows[m.key] = {f: getattr(m, f) for f in SERVER_FIELDS}
    return rows


def compare(intended, runtime_rows, hostgroups):
    """Per-row, per-field differences in configuration. `runtime_rows` are ServerRow-like dicts; only rows
    in `hostgroups` (the cluster's) are considered, so other clusters on the same ProxySQL are ignored.
    A runtime-only state (ProxySQL's own SHUNNED) is not drift: runtime_states() lists those."""
    runtime = {
        (r["hostgroup_id"], r["hostname"], r["port"]): configured(r)
        for r in runtime_rows
        if r["hostgroup_id"] in hostgroups
    }
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
    return [
        {"key": (r["hostgroup_id"], r["hostname"], r["port"]), "status": r["status"]}
        for r in runtime_rows
        if r["hostgroup_id"] in hostgroups and r["status"] in RUNTIME_ONLY_STATUSES
    ]


def between_nodes(node_rows, hostgroups):
    """Rows where the runtimes of the cluster's nodes disagree. node_rows: {node_name: [row dicts]}."""
    if len(node_rows) < 2:
        return []
    per_node = {
        name: {
            (r["hostgroup_id"], r["hostname"], r["port"]): configured(r)
            for r in rows
            if r["hostgroup_id"] in hostgroups
        }
        for name, rows in node_rows.items()
    }
    keys = set().union(*(rows.keys() for rows in per_node.values()))
    out = []
    for key in sorted(keys):
        present = {name: (key in rows) for name, rows in per_node.items()}
        if not all(present.values()):
            out.append(
                {
                    "key": key,
                    "field": "row",
                    "values": {name: ("present" if p else "missing") for name, p in present.items()},
                }
            )
            continue
        for f in SERVER_FIELDS:
            values = {name: rows[key][f] for name, rows in per_node.items()}
            if len(set(values.values())) > 1:
                out.append({"key": key, "field": f, "values": values})
    return out
