"""Drift: what each ProxySQL node holds in memory (`main.*`), runtime (`runtime_*`) and disk (`disk.*`) against
the cluster's current configuration version, the one record of intent: every table the version holds (servers,
native hostgroups, users, query rules, scheduler) and its global variables, in an operator's words (what a
restart would load, what a LOAD would apply, what runs and is not saved).

Why this module lives in apps/configuration and not in apps/fleet: intent is the configuration version, and what
drift needs (the version, its secrets, the table specs, reading a node's layers) is this app's. This app already
imports fleet's models and fleet imports nothing of it at module level, so every reader (this app's page, the
API) imports downward and no new circle between the apps appears.

compare_node() is pure (tests feed it layers); cluster_drift() reads every node's three layers concurrently
(nodes.read_cluster: one connection per node, one timeout at most for a node that does not answer).

The one engine for "do the node's layers agree with intent": the configuration page, the cluster page's drift
panel and the API read it live; watch() (beat, every 30 s) runs it over every cluster, audits "drift found" /
"drift fixed" and stores each node's result in Redis (a latest-state document of kind "drift", stored()), which
the alert rules `drift` and `restart_drift` and the overview read without opening a connection.
"""

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field

import msgspec

from apps.clients import proxysql_versions as versions
from apps.clients.proxysql import configured_status
from apps.monitoring.live_doc import DriftNodeDoc
from apps.fleet import native
from apps.fleet.drift import (
    LayerDifference,
    LayerFinding,
    NodeDrift,
    VariableDrift,
    between_nodes,
    runtime_states,
    writer_finding,
)
from apps.audit.services import record
from apps.fleet.models import Cluster
from apps.monitoring import live

from . import content as C
from . import nodes as N
from .tables import BY_NAME, MYSQL_SERVERS, MYSQL_USERS, TABLES, VARIABLES
from .variables import RESTART_ONLY, SECRETS
from .services import known_secrets, latest

log = logging.getLogger(__name__)

LAYERS = ("memory", "runtime", "disk")
# How a row is named in a sentence, by table (mysql_servers: "hg 101 127.0.0.1:3312", as the fleet pages say).
ROW_NAMES = {
    "mysql_galera_hostgroups": "Galera hostgroups of writer",
    "mysql_replication_hostgroups": "replication hostgroups of writer",
    "mysql_users": "user",
    "mysql_query_rules": "query rule",
    "scheduler": "scheduler job",
}
ORDER = {name: n for n, name in enumerate([t.name for t in TABLES] + [VARIABLES])}


@dataclass
class ClusterDrift:
    version: int | None  # the version compared with (None: the cluster has none yet: nothing to compare with)
    nodes: list  # NodeDrift (fleet's): its error, or its layers and findings
    between_nodes: list = field(default_factory=list)  # runtime mysql_servers rows on which the nodes disagree

    @property
    def in_sync(self):
        return self.version is not None and all(n.in_sync for n in self.nodes) and not self.between_nodes

    @property
    def unreachable(self):
        """The nodes that could not be read: a repair of every node would be refused while one of them is here."""
        return [n for n in self.nodes if n.error]

    @property
    def differing(self):
        """The nodes that answered and differ from intent: what a repair of the nodes that answer would touch."""
        return [n for n in self.nodes if not n.in_sync and not n.error]


def cluster_drift(cluster, reads=None, version=None):
    """Every ProxySQL node of the cluster, its three layers against the current configuration version. `reads`:
    the nodes' layers already read ({node pk: NodeConfig}, the watcher's), else read now; `version`: the latest."""
    version = version or latest(cluster)
    if version is None:
        return ClusterDrift(None, [])
    same = C.same_secret(known_secrets(cluster).get)
    hostgroups = C.claimed_hostgroups(version.content)
    out, runtimes = [], {}
    for nc in (reads if reads is not None else N.read_cluster(cluster, layers=LAYERS)).values():
        if nc.error:
            out.append(NodeDrift(nc.node_id, nc.name, error=nc.error, error_kind=nc.error_kind))
            continue
        layers, findings = compare_node(
            nc.name, version.content, nc.layers, hostgroups, same, f"version {version.number}"
        )
        runtimes[nc.name] = [
            r
            for r in managers_view(version.content, nc.layers["runtime"][MYSQL_SERVERS.name])
            if r["hostgroup_id"] in hostgroups
        ]
        out.append(
            NodeDrift(
                nc.node_id,
                nc.name,
                layers=layers,
                findings=findings,
                runtime_rows=runtimes[nc.name],
                differences=[runtime_difference(d) for d in layers if "runtime" in d.differs and d.table != VARIABLES],
                variables=[
                    VariableDrift(d.key, d.intended, d.runtime, f"version {version.number}")
                    for d in layers
                    if "runtime" in d.differs and d.table == VARIABLES
                ],
                runtime_states=runtime_states(nc.shunned, hostgroups),
            )
        )
    return ClusterDrift(version.number, out, between_nodes(runtimes, hostgroups))


def runtime_difference(d):
    """A LayerDifference whose runtime differs from intent, as the cluster page's table and the alert say it."""
    return {
        "table": d.table,
        "where": _where(d.table, d.key),
        "field": d.field,
        "intended": d.intended,
        "runtime": d.runtime,
    }


# -- the watcher and its stored results ----------------------------------------------------------------------
WATCH_BUDGET_S = 20.0  # the beat task's soft time limit is 25 s (workers/fleet.py), its period 30 s
WATCH_LAST_ROUND = "drift-watch:last-round"  # Redis: what the last round checked and left, for people and tests


def watch(budget_s=WATCH_BUDGET_S):
    """Run the engine over every cluster's nodes (live reads, each bounded by the admin client's timeouts), store
    each node's result (a latest-state document of kind live.DRIFT) and audit "drift found" / "drift fixed" when
    its findings change. A node that does not answer is stored as unreachable, its last verdict kept (unreachable
    is not drift, nor its end). A cluster with no configuration version yet has no intent to compare with: nothing
    is stored. Called by beat every 30 s (workers/fleet.py). Returns the number of audit events written.

    Every node of every cluster is read at once (nodes.read_nodes), within `budget_s`: a cluster whose nodes are
    not all read by then is not judged this round (its stored results keep their age, and the alert rules stop
    judging a result older than ENGINE_FRESH_S), and the clusters checked longest ago go first, so a round cut
    short is followed by one that starts where it stopped, never by the same head of the fleet again."""
    deadline = time.monotonic() + budget_s
    clusters = [
        (c, v, list(c.proxysql_nodes.all()))
        for c in Cluster.objects.prefetch_related("proxysql_nodes").order_by("pk")
        if (v := latest(c)) is not None
    ]
    last = stored([n.pk for _, _, nodes in clusters for n in nodes])
    clusters = oldest_first(clusters, last)
    reads = N.read_nodes([n for _, _, nodes in clusters for n in nodes], LAYERS, deadline=deadline)
    events, left = 0, []
    for cluster, version, cluster_nodes in clusters:
        if any(n.pk not in reads for n in cluster_nodes):
            left.append(cluster.name)
            continue
        result = cluster_drift(cluster, {n.pk: reads[n.pk] for n in sorted(cluster_nodes, key=lambda n: n.pk)}, version)
        nodes = {n.pk: n for n in cluster_nodes}
        docs = {}
        for node in result.nodes:
            before = last.get(node.node_id)
            if node.error:  # the last result kept, the error on top
                docs[node.node_id] = {
                    **(msgspec.to_builtins(before) if before else {}),
                    "ts": time.time(),
                    "error": node.error,
                    "error_kind": node.error_kind,
                }
                continue
            doc = as_stored(result.version, node)
            docs[node.node_id] = doc
            if doc["digest"] == (before.digest if before else ""):
                continue
            target = str(nodes[node.node_id])  # as the audit names a node elsewhere: "proxysql-2 (host:port)"
            if doc["findings"]:
                record(
                    "drift found",
                    rule="drift monitor",
                    cluster=cluster,
                    target=target,
                    outcome="failure",
                    details={"version": result.version, "differences": [f["words"] for f in doc["findings"]]},
                )
            else:
                record(
                    "drift fixed",
                    rule="drift monitor",
                    cluster=cluster,
                    target=target,
                    details={"version": result.version, "differences": []},
                )
            events += 1
        live.write_many(live.DRIFT, docs)
    if left:
        log.warning(
            "drift watcher: %d of %d clusters not read within %.0f s, first next round: %s",
            len(left),
            len(clusters),
            budget_s,
            ", ".join(left[:20]),
        )
    try:
        live.client().set(
            WATCH_LAST_ROUND, json.dumps({"ts": time.time(), "checked": len(clusters) - len(left), "left": left[:1000]})
        )
    except Exception:  # Redis down: the results were not stored either
        pass
    return events


def oldest_first(clusters, last):
    """(cluster, version, nodes) tuples ordered by the oldest stored result of their nodes (never checked: first)."""
    return sorted(clusters, key=lambda c: min(((r.ts if (r := last.get(n.pk)) else 0) for n in c[2]), default=0))


def as_stored(version, node):
    """One node's result as the watcher stores it: its findings in words and, per layer, the tables that differ."""
    findings = [{"layer": f.layer, "table": f.table, "words": f.words, "writer": f.writer} for f in node.findings]
    words = [f["words"] for f in findings]
    return {
        "ts": time.time(),
        "version": version,
        "error": "",
        "error_kind": "",
        "findings": findings,
        "runtime": node.differences
        + [
            {"table": VARIABLES, "where": v.name, "field": "value", "intended": v.intended, "runtime": v.runtime}
            for v in node.variables
        ],
        "tables": {layer: sorted({d.table for d in node.layers if layer in d.differs}) for layer in LAYERS},
        "digest": hashlib.sha256(json.dumps(words).encode()).hexdigest() if words else "",
    }


class StoredResult(DriftNodeDoc, forbid_unknown_fields=False):
    """A node's last result as stored() reads it: every field of the full schema (live_doc.DriftNodeDoc), since the
    watcher writes the last result back with an error on top, and the alert rules read findings, runtime, version,
    error and ts. A field some newer writer adds is skipped rather than refused (the full schema refuses it)."""


def stored(node_pks):
    """{node pk: the watcher's last result (a StoredResult) or None}, one MGET; {} when Redis does not answer. A
    document that does not decode is None, as if never checked."""
    try:
        return live.read_typed(live.DRIFT, list(node_pks), StoredResult)
    except live.LiveUnavailable:  # nothing known, nothing judged
        return {}


def compare_node(node_name, intended, layers, hostgroups, same, label="the version"):
    """(LayerDifference list, LayerFinding list) of one node. intended: a configuration (content.py); layers:
    {"memory"|"runtime"|"disk": a layer as nodes.read_layers reads it}, a layer left out is not judged;
    hostgroups: the cluster's (a shared ProxySQL's other rows stay out); same: content.same_secret(); label: how intent
    is named ("version 3"). Runtime is judged against what a LOAD of intent shows (inactive users absent)."""
    seen = {
        layer: {**N.scoped(layers[layer], hostgroups), "roles": intended.get("roles")}
        for layer in LAYERS
        if layers.get(layer) is not None
    }
    if "runtime" in seen:  # ProxySQL's own manager places the servers of its hostgroups at runtime: not drift
        seen["runtime"][MYSQL_SERVERS.name] = managers_view(intended, seen["runtime"][MYSQL_SERVERS.name])
    changes = {}  # (table, key) -> {layer: RowChange}; (VARIABLES, name) -> {layer: value in that layer}
    for layer, data in seen.items():
        d = C.diff(C.runtime_view(intended) if layer == "runtime" else intended, data, same_secret=same)
        for c in d.rows:
            changes.setdefault((c.table, c.key), {})[layer] = c
        node_version = (layers[layer].get(VARIABLES) or {}).get("admin-version")  # (scoped() keeps managed ones)
        for name, _, value in d.variables:
            if not versions.versions_differ(name, intended, value, node_version):
                changes.setdefault((VARIABLES, name), {})[layer] = value
    words = Words(node_name, label, seen)
    diffs = []
    for (table, key), per_layer in sorted(changes.items(), key=_order):
        if table == VARIABLES:
            want = (intended.get(VARIABLES) or {}).get(key)
            values = {layer: per_layer.get(layer, want) for layer in seen}
            diffs.append(_difference(table, key, "value", want, values, per_layer, secret=key in SECRETS))
            words.value(table, key, want, values, per_layer)
            continue
        want = C.index(intended, BY_NAME[table]).get(key)
        if any(c.change != "changed" for c in per_layer.values()):  # in some layer the row is missing or extra
            values = {
                layer: ("present" if c.after else "missing")
                if (c := per_layer.get(layer))
                else ("present" if want else "missing")
                for layer in seen
            }
            row = want or next(c.after for c in per_layer.values() if c.after)
            secret = {"password"} if table == MYSQL_USERS.name else set()
            diffs.append(
                _difference(
                    table,
                    key,
                    "row",
                    "present" if want else "missing",
                    values,
                    per_layer,
                    row={k: C.shown(v, k in secret) for k, v in row.items()},
                )
            )
            words.row(table, key, want, values, per_layer)
            continue
        columns = {f for c in per_layer.values() for f in c.fields}
        # A 3.0 build that exchanges the mirror columns at LOAD (proxysql_versions.mirror_swapped): runtime holds
        # memory's two values exchanged, whichever of them intent holds. Said once, as what it is.
        row_in = {layer: per_layer[layer].after if layer in per_layer else want for layer in seen}
        swapped = (
            table == "mysql_query_rules"
            and {"memory", "runtime"} <= seen.keys()
            and versions.mirror_swapped(row_in["memory"], row_in["runtime"])
        )
        for f in (c for c in BY_NAME[table].column_names if c in columns):
            values = {layer: per_layer[layer].after[f] if layer in per_layer else want[f] for layer in seen}
            differing = {layer: v for layer, v in per_layer.items() if f in v.fields}
            diffs.append(
                _difference(
                    table, key, f, want[f], values, differing, secret=table == MYSQL_USERS.name and f == "password"
                )
            )
            if not (swapped and f in versions.MIRROR_COLUMNS):
                words.value(table, key, want[f], values, differing, f)
        if swapped:
            words.mirror_swapped(table, key, row_in["memory"], row_in["runtime"])
    return diffs, words.findings(intended)


def managers_view(intended, runtime_rows):
    """A runtime's mysql_servers as intent is compared with it: in the hostgroups of intent's active native managers
    (mysql_galera_hostgroups...), Monitor's placement folded back to the configured rows (fleet/native.py)."""
    managed = native.managed_hostgroups([r for t in native.MANAGER_TABLES.values() for r in intended.get(t) or ()])
    return native.fold(runtime_rows, intended.get(MYSQL_SERVERS.name) or (), managed)


def compare_polled(node_name, intended_rows, polled, hostgroups, writer_hostgroup, label="the inventory", managed=()):
    """compare_node() over the mysql_servers a poll read (apps/monitoring/pollers.py: runtime at every poll, memory
    and disk at the variables' cadence), for the alert rules between two runs of the watcher. intended_rows:
    {(hg, host, port): {field: value}} (the inventory, equal to the version's rows); polled: {layer: row dicts}.
    ProxySQL's own SHUNNED is its configured ONLINE: not drift. `managed`: the hostgroups ProxySQL's own manager places
    (a natively managed cluster): the runtime's placement there folded back (fleet/native.py)."""

    def only_servers(rows):
        return {**{t.name: [] for t in TABLES}, MYSQL_SERVERS.name: rows, VARIABLES: {}}

    intended = {
        **only_servers(
            [
                {"hostgroup_id": hg, "hostname": host, "port": port, **values}
                for (hg, host, port), values in intended_rows.items()
            ]
        ),
        "roles": {"writer": writer_hostgroup},
    }
    layers = {
        layer: only_servers([{**r, "status": configured_status(r["status"])} for r in rows])
        for layer, rows in polled.items()
    }
    if managed and "runtime" in layers:
        layers["runtime"][MYSQL_SERVERS.name] = native.fold(
            layers["runtime"][MYSQL_SERVERS.name], intended[MYSQL_SERVERS.name], set(managed)
        )
    return compare_node(node_name, intended, layers, hostgroups, lambda a, b: a == b, label)


def _order(item):
    """Tables in the version's order, then rows in key order (a variable's key is its name)."""
    (table, key), _ = item
    return ORDER[table], C.sort_key(key if isinstance(key, tuple) else (key,))


def _difference(table, key, name, want, values, differing, secret=False, row=None):
    return LayerDifference(
        table,
        key,
        name,
        C.shown(want, secret),
        *(C.shown(values[layer], secret) if layer in values else None for layer in LAYERS),
        differs=tuple(layer for layer in LAYERS if layer in differing),
        row=row,
    )


class Words:
    """The findings of one node, difference by difference: disk (what a restart would load), runtime (loaded, not
    saved), memory (an edit not loaded). When the disk's writers are not intent's, one finding says where a
    restart would send writes, in place of the writer hostgroup's own rows."""

    def __init__(self, node_name, label, seen):
        self.node, self.label, self.seen = node_name, label, seen
        self.said = []  # (LayerFinding, a writer hostgroup row or status on disk)
        roles = next(iter(seen.values()), {}).get("roles") or {}
        self.writer_hg = roles.get("writer")

    def findings(self, intended):
        """Disk first (what a restart would do), then runtime, then memory; the writer finding first of all."""
        said = sorted(self.said, key=lambda s: ("disk", "runtime", "memory").index(s[0].layer))
        moved = "disk" in self.seen and writer_finding(
            self.node, _endpoints(C.writers(self.seen["disk"])), _endpoints(C.writers(intended)), self.writer_hg
        )
        if not moved:
            return [f for f, _ in said]
        return [moved] + [f for f, writer_row in said if not writer_row]

    def row(self, table, key, want, values, per_layer):
        where = _where(table, key)
        writer_row = table == MYSQL_SERVERS.name and key[0] == self.writer_hg
        for layer in ("disk", "runtime"):
            if layer in per_layer:
                what = f"no row for {where}" if values[layer] == "missing" else f"a row for {where}"
                self._say(layer, table, what, f"{self.label}'s" if want else "none", per_layer, writer_row)
        if self._unloaded(per_layer, values):
            self._memory(
                table,
                f"{where} deleted (runtime has it"
                if values["memory"] == "missing"
                else f"{where} added (not at runtime",
            )

    def value(self, table, key, want, values, per_layer, name=None):
        secret = key in SECRETS if table == VARIABLES else table == MYSQL_USERS.name and name == "password"

        def what(layer):
            v = C.shown(values[layer], secret)
            if table == VARIABLES:
                return f"no value for {key} (its default)" if v is None else f"{key}={v}"
            return f"{_where(table, key)} {name} {v}"

        writer_row = table == MYSQL_SERVERS.name and key[0] == self.writer_hg and name == "status"
        restart_only = table == VARIABLES and key in RESTART_ONLY
        for layer in ("disk", "runtime"):
            if layer in per_layer:
                self._say(layer, table, what(layer), C.shown(want, secret), per_layer, writer_row, restart_only)
        if (
            self._unloaded(per_layer, values)
            and not (restart_only and "memory" not in per_layer)
            and not (table in BY_NAME and BY_NAME[table].same_value(name, values["memory"], values["runtime"]))
        ):
            later = "read only at a restart" if restart_only else "a LOAD would apply it"
            self._memory(table, f"{what('memory')} (runtime {C.shown(values['runtime'], secret)}; {later}")

    def mirror_swapped(self, table, key, memory, runtime):
        a, b = versions.MIRROR_COLUMNS
        self.said.append(
            (
                LayerFinding(
                    "runtime",
                    table,
                    (
                        f"{self.node} runs {_where(table, key)} with {a} and {b} exchanged against its memory (memory {a} "
                        f"{memory.get(a)} and {b} {memory.get(b)}, runtime {runtime.get(a)} and {runtime.get(b)}): "
                        f"{versions.MIRROR_SWAP_WORDS}"
                    ),
                ),
                False,
            )
        )

    def _say(self, layer, table, what, instead, per_layer, writer_row, restart_only=False):
        if layer == "disk":
            words = f"a restart of {self.node} would load {what} (disk) instead of {instead}"
        elif "memory" not in per_layer:  # memory is as intended: the memory finding says what a LOAD would do
            words = f"{self.node} runs {what} instead of {instead}" + (
                " until it restarts (read only at a start)" if restart_only else ""
            )
        else:
            words = f"loaded, not saved: {self.node} runs {what} instead of {instead}"
            if "disk" in self.seen and "disk" not in per_layer:
                words += f"; a restart of {self.node} would load {self.label}'s from disk"
        self.said.append((LayerFinding(layer, table, words), writer_row and layer == "disk"))

    def _unloaded(self, per_layer, values):
        """Memory holds another value than runtime (both read, one of them differing from intent)."""
        return (
            {"memory", "runtime"} <= self.seen.keys()
            and ("memory" in per_layer or "runtime" in per_layer)
            and values["memory"] != values["runtime"]
        )

    def _memory(self, table, what):
        self.said.append((LayerFinding("memory", table, f"unloaded edit in memory: {what})"), False))


def _endpoints(pairs):
    return [f"{h}:{p}" for h, p in pairs]


def _where(table, key):
    if table == MYSQL_SERVERS.name:
        return f"hg {key[0]} {key[1]}:{key[2]}"
    if table == VARIABLES:
        return key
    return f"{ROW_NAMES.get(table, table)} {' '.join(map(str, key))}"
