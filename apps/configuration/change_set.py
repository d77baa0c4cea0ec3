"""Applying a change set is an operation (kind config), planned here where its data lives and registered by this app
(change_set_kind.py): its plan, and plan_and_save() that stores it for the operator to confirm. The plan: the effect
check, the diff against the intended configuration and against each node's runtime, and per node the exact admin
statements with their undo. Reads the nodes, writes nothing. What only the apps above know (the cluster's lock,
pending rollbacks, shared nodes and ProxySQL Cluster sync, storing the Operation: operations'; the last hour's
traffic: digests') is asked through the registry (registry.planning(), served at start), never imported.

Steps: apply (edits + LOAD, every node in parallel) -> verify (read back every node's runtime) -> save
(SAVE ... TO DISK) -> record the next version (the inventory follows it).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from django.db import transaction

from apps.audit.actor import Actor
from apps.clients.proxysql import ProxySQLAdmin
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.fleet.native import MANAGER_TABLES
from apps.monitoring import live
from apps.plans.registry import planning
from apps.plans.vocabulary import PROXYSQL, Guard, Plan, Sql, Step, no_other_operation

from . import content as C
from . import nodes as N
from .findings import Finding, effect_findings
from .models import ChangeSet, ConfigVersion
from .native_load import Row, marks_kept, placement_load
from .secrets import Collector
from .services import Refused, check_base, create_change_set, known_secrets, latest, require_reason, set_reason
from .nodes import Layers, NodeConfig, ServerRows
from .statements import NodePlan, ServersLoad, node_plan
from .variables import SECRETS as SECRET_VARIABLES

CONFIG = "config"  # the operation kind (operations.choices.OperationKind.CONFIG names the same)
CONFIG_VERIFY, CONFIG_RECORD = "config_verify", "config_record"


class NodeFigures(msgspec.Struct):
    """What the effect check reads of a ProxySQL node's latest-state document (live_doc.ProxySQLNodeDoc): its
    rates and gauges (the share of prepared statements, the mirror's concurrency and limit)."""

    figures: dict[str, float | int | None] = {}


def diff_lines(d: C.Diff, limit: int | None = None) -> list[dict[str, Any]]:
    """A Diff as rows for the pages: table, key, what changed, before -> after per field."""
    out = []
    for c in d.rows:
        secret = {"password"} if c.table == "mysql_users" else set()
        fields = [
            {
                "name": f,
                "before": C.shown((c.before or {}).get(f), f in secret),
                "after": C.shown((c.after or {}).get(f), f in secret),
            }
            for f in c.fields
        ]
        out.append(
            {
                "table": c.table,
                "key": list(c.key),
                "change": c.change,
                "fields": fields,
                "row": {k: C.shown(v, k in secret) for k, v in (c.after or c.before or {}).items()},
            }
        )
    for name, before, after in d.variables:
        hidden = name in SECRET_VARIABLES
        out.append(
            {
                "table": "global_variables",
                "key": [name],
                "change": "changed" if before is not None else "added",
                "fields": [
                    {"name": "variable_value", "before": C.shown(before, hidden), "after": C.shown(after, hidden)}
                ],
                "row": {},
            }
        )
    for role, (before, after) in d.roles.items():
        out.append(
            {
                "table": "hostgroup roles",
                "key": [role],
                "change": "changed",
                "fields": [{"name": role, "before": before, "after": after}],
                "row": {},
            }
        )
    return out[:limit] if limit else out


# The rows a cluster owns on a ProxySQL it shares with other clusters (they sit in its hostgroups).
PER_CLUSTER_TABLES = {"mysql_servers", "mysql_galera_hostgroups", "mysql_replication_hostgroups"}


def plan_change_set(cs: ChangeSet, kind: str = CONFIG) -> tuple[Plan, Collector]:
    """The change set's plan, as an operation of `kind` (a kind that applies a change set its own way, e.g. a
    rollout's canary, plans it here first: its spec then says how the plan meets ProxySQL Cluster sync). In three
    parts, as switchover.py: read (read_change_set: the nodes, their documents, the traffic, the database), judge
    (change_set_guards: the guards and the effect check's findings) and build (change_set_steps, change_set_facts,
    change_set_title), the last two from the read alone."""
    read = read_change_set(cs)
    guards, findings = change_set_guards(cs, read)
    steps = change_set_steps(cs, read)
    facts = change_set_facts(cs, read, findings)
    title = change_set_title(cs, read)
    plan = Plan(
        kind, cs.cluster.pk, title[:300], guards, steps, facts, options={"change_set": cs.pk}, secrets=read.placed
    )
    return planning().annotate(plan, cs.cluster), read.collector


@dataclass
class ChangeSetRead:
    """Everything a change set's plan reads, before it judges: the change itself (base, target, the intended diff,
    the hostgroups it claims), the nodes ({pk: NodeConfig}, their statements rendered while each node's connection
    was open: its driver escapes every value), their polled figures, the traffic, and the database's answers (who
    holds the cluster, the current version, backends of other clusters, shared nodes, the pending rollback guard)."""

    base: C.Content
    target: C.Content
    intended: C.Diff
    hostgroups: set[int]
    write_back: bool
    managed: set[int]  # the hostgroups whose placement the LOAD keeps as Monitor made it (native_load.py)
    collector: Collector
    placed: dict[str, list[list[Any]]]  # where each node's statements hold a secret (Plan.secrets)
    nodes: dict[int, NodeConfig] = field(default_factory=dict)
    figures: dict[str, dict[str, float | int | None]] = field(default_factory=dict)  # {node name: its figures}
    traffic: Any = None  # planning().traffic's answer (digests' Traffic); None for a write-back
    holder: str | None = None
    current: ConfigVersion | None = None
    taken: list[str] = field(default_factory=list)  # "backend (its cluster)" of the target's backends elsewhere
    shared_nodes: list[str] = field(default_factory=list)  # names of the nodes another cluster shares
    pending: Guard | None = None  # None for a write-back (a repair runs while a rollback is pending)


def read_change_set(cs: ChangeSet) -> ChangeSetRead:
    """The read: every chosen node once (the statements rendered in it), the nodes' latest-state documents, the
    cluster's traffic, then the database. The only part of the plan that reads anything."""
    cluster = cs.cluster
    base = cs.base.content
    target = C.apply_edits(base, cs.edits)
    intended = C.diff(base, target)
    write_back = cs.source == "write_back"
    read = ChangeSetRead(
        base=base,
        target=target,
        intended=intended,
        hostgroups=C.claimed_hostgroups(base) | C.claimed_hostgroups(target),
        write_back=write_back,
        managed=native_placement(cluster, intended, write_back),
        collector=Collector(cluster, known_secrets(cluster)),
        placed={},
    )
    monitor_marks, entry = galera_writer_hostgroups(cluster), native_entry(cluster)

    def build(admin: ProxySQLAdmin, layers: Layers, node: ProxySQLNode, shunned: ServerRows) -> NodePlan:
        # a write-back writes every difference, a change set only its diff's rows
        sql = Sql(admin, read.placed)
        servers_load: ServersLoad | None = None
        if read.managed:  # Monitor's placement loaded with the edits, never the configured rows (native_load.py)
            runtime = marks_kept(layers["runtime"]["mysql_servers"], shunned, monitor_marks)

            def load(written: dict[C.Key, Row | None]) -> tuple[list[str], list[str]]:
                return placement_load(sql, read.managed, layers["memory"]["mysql_servers"], runtime, written, entry)

            servers_load = load

        return node_plan(
            sql,
            target,
            layers["memory"],
            hostgroups=read.hostgroups,
            secrets=read.collector,
            node_key=f"node{node.pk}",
            intended=None if write_back else intended,
            servers_load=servers_load,
        )

    chosen = cluster.proxysql_nodes.filter(pk__in=cs.nodes) if cs.nodes else None
    read.nodes = N.read_cluster(cluster, build=build, nodes=chosen)
    try:
        docs = live.read_typed(live.PROXYSQL, list(read.nodes), NodeFigures)
    except live.LiveUnavailable:
        docs = {}
    read.figures = {read.nodes[pk].name: doc.figures for pk, doc in docs.items() if doc}
    read.traffic = None if write_back else _traffic(cluster)
    read.holder = planning().holder(cluster)
    read.current = latest(cluster)  # planned again at start (the re-check): another change may have been recorded since
    endpoints = {(r["hostname"], r["port"]) for r in target["mysql_servers"]}
    read.taken = sorted(
        f"{s} ({s.cluster})"
        for s in Server.objects.exclude(cluster=cluster)
        .select_related("cluster")
        .filter(hostname__in={h for h, _ in endpoints}, port__in={p for _, p in endpoints})
        if (s.hostname, s.port) in endpoints
    )
    read.shared_nodes = sorted(
        n.name for n in (chosen if chosen is not None else cluster.proxysql_nodes.all()) if n.shares_with().exists()
    )
    if not write_back:  # a write-back is a repair: it runs while a rollback is pending, like repair
        read.pending = planning().pending_guard(cluster)
    return read


def change_set_guards(cs: ChangeSet, read: ChangeSetRead) -> tuple[list[Guard], list[Finding]]:
    """The judgement, from the read alone: (guards, the effect check's findings)."""
    findings = effect_findings(
        cs.cluster,
        read.base,
        read.target,
        read.nodes,
        read.figures,
        write_back=read.write_back,
        traffic=read.traffic,
        every_node=not cs.nodes,
    )
    statements = sum(_plan(nc).changes for nc in read.nodes.values() if not nc.error)
    changes = statements if read.write_back else read.intended.count()
    current, holder = read.current, read.holder
    guards = [
        Guard(
            "based_on_current",
            f"Based on the current version ({cs.base.number})",
            current is not None and current.pk == cs.base_id,
            f"version {current.number} is current" if current is not None else "the cluster has no version",
            False,
        ),
        Guard(
            "changes_something",
            "The change set changes something",
            changes > 0,
            f"{changes} change(s)" if changes else "nothing to change",
            False,
        ),
        no_other_operation(holder),
    ]
    if read.taken:
        guards.append(
            Guard(
                "backend_of_another_cluster",
                "Every backend belongs to this cluster",
                False,
                "already in another cluster: " + ", ".join(read.taken),
                False,
            )
        )
    node_wide = sorted(read.intended.tables() - PER_CLUSTER_TABLES)
    if read.shared_nodes and node_wide:
        # One ProxySQL serves other clusters too: its users, rules, variables and scheduler are theirs as well.
        guards.append(
            Guard(
                "shared_node_wide_tables",
                "No node-wide table changes on a ProxySQL that other clusters "
                "share (users, query rules, variables and scheduler serve them too)",
                False,
                f"{', '.join(node_wide)} on {', '.join(read.shared_nodes)}: change them on the node itself",
                False,
            )
        )
    if read.pending is not None:
        guards.append(read.pending)
    guards += [Guard(f.key, f.label, False, f.value, f.overridable) for f in findings if f.blocking]
    if not any(f.blocking for f in findings):
        warnings, infos = (sum(1 for f in findings if not f.blocking and f.info is info) for info in (False, True))
        guards.append(
            Guard(
                "effect_check",
                "Effect check: nothing blocking found",
                True,
                f"{warnings} warning(s)" + (f", {infos} for information" if infos else ""),
            )
        )
    return guards, findings


def _readable(read: ChangeSetRead) -> dict[int, NodeConfig]:
    return {pk: nc for pk, nc in read.nodes.items() if not nc.error}


def _plan(nc: NodeConfig) -> NodePlan:
    """A node's statements, made by read_change_set's build() on every node it could read."""
    assert nc.plan is not None, f"{nc.name}: read without its statements"
    return nc.plan


def _number(cs: ChangeSet, read: ChangeSetRead) -> int:
    """The version the change set records: the next one, or the base again for a write-back."""
    return cs.base.number if read.write_back else cs.base.number + 1


def change_set_steps(cs: ChangeSet, read: ChangeSetRead) -> list[Step]:
    """The steps and their statements per node, from the read alone."""
    readable = _readable(read)
    apply_nodes = {
        str(pk): {"name": nc.name, "sql": _plan(nc).sql, "rollback": _plan(nc).rollback} for pk, nc in readable.items()
    }
    save_nodes = {
        str(pk): {"name": nc.name, "sql": [Sql.save(m) for m in _plan(nc).modules], "rollback": []}
        for pk, nc in readable.items()
    }
    number = _number(cs, read)
    return [
        Step(
            "apply",
            "Write the changes to memory and LOAD them to runtime, on every node"
            if not read.managed
            else "Write the changes to memory and LOAD them to runtime with the servers where Monitor placed them (memory "
            "then back to the configured rows with the changes, no LOAD), on every node",
            PROXYSQL,
            apply_nodes,
        ),
        Step(
            "verify",
            "Read back every node's runtime: it must equal the new configuration"
            if read.write_back
            else "Read back every node's runtime: the rows and variables changed must equal the new configuration",
            CONFIG_VERIFY,
            params={
                "change_set": cs.pk,
                "tables": sorted(read.intended.tables() | ({"mysql_servers"} if read.intended.roles else set())),
            },
        ),
        Step("save", "SAVE the changed modules TO DISK on every node", PROXYSQL, save_nodes, point_of_no_return=True),
        Step(
            "record",
            f"Record version {number} (the inventory follows it)"
            if not read.write_back
            else f"Record that the nodes run version {number} again",
            CONFIG_RECORD,
            params={"change_set": cs.pk},
        ),
    ]


def change_set_facts(cs: ChangeSet, read: ChangeSetRead, findings: list[Finding]) -> dict[str, Any]:
    """What the plan page shows besides guards and steps, from the read and the judgement's findings."""
    readable = _readable(read)
    same_secret = C.same_secret(read.collector.value)
    return {
        "change_set": cs.pk,
        "reason": cs.reason,
        "base_version": cs.base.number,
        "version": _number(cs, read),
        "warnings": [f.__dict__ for f in findings if not f.blocking],
        "findings": [f.__dict__ for f in findings],
        "intended_diff": diff_lines(read.intended),
        "node_diffs": {
            nc.name: diff_lines(node_diff(nc, read.target, read.hostgroups, same_secret)) for nc in readable.values()
        },
        "unreachable": {nc.name: nc.error for nc in read.nodes.values() if nc.error},
        # per node, each user written: its password kept as the node has it or set (the form, never the value)
        "passwords": {nc.name: _plan(nc).passwords for nc in readable.values() if _plan(nc).passwords},
    }


def change_set_title(cs: ChangeSet, read: ChangeSetRead) -> str:
    """What the change set does, not its first edit's reason (that stays on the change set and in facts["reason"])."""
    number = _number(cs, read)
    if read.write_back:
        return f"Configuration of {cs.cluster.name}: write version {number} back"
    return (
        f"Change set #{cs.pk} on {cs.cluster.name}: {what_changes(read.intended)} (version {cs.base.number} → {number})"
    )


def native_placement(cluster: Cluster, intended: C.Diff, write_back: bool) -> set[int]:
    """The hostgroups whose placement a change set's LOAD keeps as Monitor made it (native_load.py): ProxySQL's
    replication or Galera manager's, unless the change set edits the manager's own rows (then its rows are loaded as
    they are, Monitor placing them from there) or is a write-back (every row as the version has it)."""
    if (
        write_back
        or cluster.native_manager not in ("replication", "galera")
        or intended.tables() & set(MANAGER_TABLES.values())
    ):
        return set()
    return cluster.managed_hostgroups()


def galera_writer_hostgroups(cluster: Cluster) -> set[int]:
    """The writer hostgroups of the cluster's active Galera manager rows: its SHUNNED rows there are Monitor's marks of
    the backup writers, loaded SHUNNED in the placement a change set loads (loaded ONLINE they would write)."""
    if cluster.native_manager != "galera":
        return set()
    return {int(n["writer_hostgroup"]) for n in cluster.active_native_hostgroups() if "backup_writer_hostgroup" in n}


def native_entry(cluster: Cluster) -> dict[int, int]:
    """{writer hostgroup: where a new backend configured there enters} for the cluster's active native managers: the
    Galera manager's backup writer hostgroup (Monitor makes it a writer from there if its weight says so), the
    replication manager's reader hostgroup (Monitor moves it to the writers if it is not read_only)."""
    out: dict[int, int] = {}
    for n in cluster.active_native_hostgroups():
        enters = n.get("backup_writer_hostgroup", n.get("reader_hostgroup"))
        if n.get("writer_hostgroup") is not None and enters is not None:
            out[int(n["writer_hostgroup"])] = int(enters)
    return out


CHANGED_NOUNS = {
    "mysql_servers": "server row",
    "mysql_query_rules": "query rule",
    "mysql_users": "user",
    "scheduler": "scheduler row",
    "mysql_galera_hostgroups": "Galera hostgroup row",
    "mysql_replication_hostgroups": "replication hostgroup row",
}


def what_changes(intended: C.Diff) -> str:
    """'3 query rules, 1 user, 2 variables': the rows a change set adds, changes or removes, per table."""
    counts = [(CHANGED_NOUNS.get(table, table), len(rows)) for table, rows in intended.by_table().items()]
    counts += [("variable", len(intended.variables)), ("hostgroup role", len(intended.roles))]
    return ", ".join(f"{n} {noun}{'s' if n != 1 else ''}" for noun, n in counts if n) or "no change"


def replan(cluster: Cluster, options: dict[str, Any]) -> Plan:
    """The change set's plan again (the re-check at start): from the change set its options name."""
    return plan_change_set(ChangeSet.objects.select_related("base", "cluster").get(pk=options["change_set"]))[0]


def node_diff(
    nc: NodeConfig, target: C.Content, hostgroups: set[int], same_secret: Callable[[Any, Any], bool]
) -> C.Diff:
    """What differs between a node's runtime and a configuration (hostgroup roles are the console's own)."""
    runtime = {**N.scoped(nc.layers["runtime"], hostgroups), "roles": target.get("roles")}
    return C.diff(runtime, C.runtime_view(target), same_secret=same_secret)


def _traffic(cluster: Cluster) -> Any:
    """The cluster's stored digests of the last hour, for what new or changed rules would capture."""

    return planning().traffic(cluster.pk)


def plan_and_save(
    cs: ChangeSet, *, actor: Actor, planner: Callable[[ChangeSet], tuple[Plan, Collector]] = plan_change_set
) -> Any:
    """Plan a draft change set and store the plan as an Operation (what `actor` confirms). `planner`: (cs) ->
    (Plan, Collector), plan_change_set or a kind's own way built on it."""
    check_base(cs)
    if cs.state != ChangeSet.State.DRAFT:
        raise Refused("This change set was already planned.")
    plan_, collector = planner(cs)
    with transaction.atomic():
        collector.save()
        op = planning().save_plan(plan_, actor=actor)
        if not ChangeSet.objects.filter(pk=cs.pk, state=ChangeSet.State.DRAFT).update(
            state=ChangeSet.State.PLANNED, operation=op
        ):
            raise Refused("This change set was planned by someone else meanwhile.")
    return op


class NotPlanned(Refused):
    """The change set was created (and audited) but could not be planned: the doors show it, as the draft it is."""

    def __init__(self, message: str, change_set: ChangeSet) -> None:
        super().__init__(message)
        self.change_set = change_set


def plan_from_file(cluster: Cluster, text: str, *, actor: Actor, reason: str, expect_version: int | None = None) -> Any:
    """A change set from a configuration file, planned: the one service of the page's upload and `manage.py config
    apply` (the API makes the same draft with services.create_change_set, and plans it with plan_draft). The reason
    rule and the "change set created" audit row are create_change_set's; NothingToDo when the file equals the current
    intent; NotPlanned (the draft kept) when the plan is refused."""
    cs = create_change_set(cluster, actor=actor, reason=reason, file=text, expect_version=expect_version)
    try:
        return plan_and_save(cs, actor=actor)
    except Refused as exc:
        raise NotPlanned(str(exc), cs) from None


def plan_draft(cs: ChangeSet, *, actor: Actor, reason: str = "") -> Any:
    """Plan a draft (the page's and the API's "plan"): a new reason first (its author's or an admin's), then the
    reason rule over what the draft holds."""
    if reason.strip():
        set_reason(cs, reason, actor=actor)
    require_reason(cs.reason)
    return plan_and_save(cs, actor=actor)
