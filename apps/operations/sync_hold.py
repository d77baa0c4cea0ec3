"""ProxySQL Cluster (ProxySQL's own configuration sync) and the plans: held off for a plan's duration (the default,
below), or used to carry the plan's change from one node to its peers (propagate(), further down: the cluster's
choice, Cluster.cluster_sync_mode, for the plans whose change is one state).

When a plan's nodes pull a module it loads from each other (admin-cluster_<module>_diffs_before_sync > 0), a peer
that sees a node's checksum differ for that many checks pulls the node's runtime as it is: in the middle of an
operation, a half-applied state (../shared/proxysql-reference: a state held longer than about 3 s at the defaults).
So the plan writes every node itself, as one unit, with the sync of those modules held off: a first step sets
diffs_before_sync to 0 on every node (LOAD ADMIN VARIABLES TO RUNTIME), and a last step puts back the values read
here. The hold's undo is that same restore, so a rollback restores it (last, after every other undo), and a node
that does not answer keeps it with its other statements (a pending rollback or finish: rollbacks.py replays them).
Disk is never written by the hold: it keeps what it had (unless the plan itself saves ADMIN VARIABLES, then the
restore saves again). Plans on nodes that do not sync a module they touch are left exactly as they were.
"""

import re

from apps.clients.proxysql import on_each_node
from apps.fleet.choices import ClusterSyncMode
from apps.fleet.models import ProxySQLNode
from apps.plans.vocabulary import PROXYSQL, WAIT_SYNC, Sql, Step
from apps.plans.registry import PROPAGATE, kind_spec, step_handler


# LOAD <module> TO RUNTIME -> the module's name in admin-cluster_<name>_diffs_before_sync
SYNCED = {
    "MYSQL SERVERS": "mysql_servers",
    "MYSQL USERS": "mysql_users",
    "MYSQL QUERY RULES": "mysql_query_rules",
    "MYSQL VARIABLES": "mysql_variables",
    "ADMIN VARIABLES": "admin_variables",
    "PROXYSQL SERVERS": "proxysql_servers",
}
LOAD = re.compile(r"^LOAD (.+) TO RUNTIME$", re.IGNORECASE)
LOAD_ADMIN, SAVE_ADMIN = "LOAD ADMIN VARIABLES TO RUNTIME", "SAVE ADMIN VARIABLES TO DISK"
HOLD_KEY, RESTORE_KEY = "sync_hold", "sync_restore"


def variable(module):
    return f"admin-cluster_{module}_diffs_before_sync"


def touched_modules(plan):
    """The synced modules the plan loads on each node: {node_id: {module, ...}}."""
    out = {}
    for step in plan.steps:
        for node_id, spec in _sends(step).items():
            for sql in [*spec.get("sql", []), *spec.get("rollback", [])]:
                match = LOAD.match(sql.strip())
                if match and match.group(1).upper() in SYNCED:
                    out.setdefault(node_id, set()).add(SYNCED[match.group(1).upper()])
    return out


def _sends(step):
    """The statements a step sends to the ProxySQL nodes: its own (a PROXYSQL step), or those it sends on a timeout
    (a drain's OFFLINE_HARD), as its kind's handler says."""
    handler = step_handler(step.kind)
    return step.nodes if handler.sends_nodes else handler.on_timeout(step) if handler.on_timeout else {}


def loads(step):
    """Whether this step LOADs something to runtime on a node (where a peer could pull from)."""
    return step_handler(step.kind).sends_nodes and any(
        LOAD.match(q.strip()) for spec in step.nodes.values() for q in spec.get("sql", [])
    )


def saves_admin_variables(plan):
    return any(SAVE_ADMIN in spec.get("sql", []) for s in plan.steps for spec in s.nodes.values())


def synced(admin, modules):
    """({module: diffs_before_sync} for the modules this node pulls from its peers (cluster credentials set, peers
    listed, diffs_before_sync > 0), admin-cluster_check_interval_ms), in one read of the variables."""
    values = admin.global_variables(["admin-cluster_username", CHECK_INTERVAL, *(variable(m) for m in modules)])
    if not values.get("admin-cluster_username") or not admin.proxysql_servers():
        return {}, None
    out = {}
    for module in sorted(modules):
        try:
            if int(values.get(variable(module)) or 0) > 0:
                out[module] = values[variable(module)]
        except ValueError:
            continue
    return out, values.get(CHECK_INTERVAL)


def annotate(plan, cluster):
    """The cluster's way with ProxySQL Cluster sync (Cluster.cluster_sync_mode) added to `plan`, in place, for the
    nodes that sync a module the plan loads: propagate() where the cluster asks for it and the plan allows it,
    else the hold (first step) and its restore (last step). A node that cannot be read now is named in the facts
    (its steps will fail or be kept for it)."""
    touched = touched_modules(plan)
    if not touched:
        return plan
    nodes = ProxySQLNode.objects.filter(cluster=cluster, pk__in=[int(k) for k in touched]).order_by("pk")

    def read(node, admin):  # on the node's own thread (on_each_node): no database here
        modules = touched[str(node.pk)]
        # the hold is itself written in admin variables, a synced module: held too, or a peer that is restored
        # first would hand its settings (and its sync) to one still mid-operation
        values, interval = synced(admin, modules | {"admin_variables"})
        sql = Sql(admin)  # rendered here, with this node's driver escaping
        return (
            values,
            interval,
            [sql.set_variable(variable(m), 0) for m in values] + [LOAD_ADMIN],
            [sql.set_variable(variable(m), v) for m, v in values.items()] + [LOAD_ADMIN],
        )

    readings, unread = {}, []
    for node, result, error in on_each_node(nodes, read):
        if error is not None:
            unread.append(f"{node.name}: {error.message}")
        else:
            readings[node] = result
    if unread:
        plan.facts["cluster_sync_unread"] = unread
    if cluster.cluster_sync_mode == ClusterSyncMode.PROPAGATE:
        refused = propagate_refused(plan, touched, readings, unread)
        if not refused:
            return propagate(plan, touched, readings)
        plan.facts["cluster_sync_propagate_refused"] = refused
    return hold(plan, touched, readings, refused if cluster.cluster_sync_mode == ClusterSyncMode.PROPAGATE else "")


def hold(plan, touched, readings, refused=""):
    """Every node written by the plan, the sync of what it loads held off from the first step to the last."""
    save_again = saves_admin_variables(plan)
    held, hold, restore = {}, {}, {}
    for node, (values, _interval, sql, undo) in readings.items():
        modules = touched[str(node.pk)]
        if not values or (not set(values) - {"admin_variables"} and "admin_variables" not in modules):
            continue
        node_id = str(node.pk)
        held[node.name] = {m: int(v) for m, v in values.items()}
        hold[node_id] = {"name": node.name, "sql": sql, "rollback": undo}
        restore[node_id] = {"name": node.name, "sql": undo + ([SAVE_ADMIN] if save_again else []), "rollback": []}
    if not hold:
        return plan
    modules = sorted({m for values in held.values() for m in values})
    where = (
        ("both nodes" if len(held) == 2 else "every node")
        if len(held) == len(touched) and len(held) > 1
        else ", ".join(held)
    )
    said = f"ProxySQL Cluster sync of {', '.join(modules)} held off on {where} for the operation, restored after"
    if refused:
        said += f" (not propagated from one node, as the cluster asks: {refused})"
    plan.facts["cluster_sync_held"] = {"said": said, "nodes": held}
    plan.steps.insert(
        0,
        Step(
            HOLD_KEY,
            f"Hold ProxySQL Cluster sync of {', '.join(modules)} on {where} "
            "(admin-cluster_<module>_diffs_before_sync=0: no peer pulls a half-applied "
            "state; restored after, and on rollback)"
            + (f"; not propagated from one node: {refused}" if refused else ""),
            PROXYSQL,
            hold,
        ),
    )
    # forward_only: everything else is done; a node that does not answer keeps the restore for later (finish pending)
    plan.steps.append(
        Step(
            RESTORE_KEY,
            f"Restore ProxySQL Cluster sync of {', '.join(modules)} on {where} (the values read when planned)",
            PROXYSQL,
            restore,
            forward_only=True,
        )
    )
    return plan


# -- the other way: write one node, let its peers pull it (Cluster.cluster_sync_mode "propagate") -----------
# Only plans whose change is one state, loaded once (one module, one step): a peer that pulls it pulls the whole
# change or nothing, and never a state in between (a node paused after its LOAD runs it when it resumes: whole).
# A switchover drains its writer on each node before it moves it (a peer pulling in between would have no
# writer); a failover and the read-pool rules must reach every node at once, not a pull 2-3 s later; a repair
# writes each node what that node lacks. Those hold the sync whatever the cluster's mode: each kind's spec says
# which it does and why (registry.OperationSpec.cluster_sync, why_held).
WAIT_SYNC_KEY = "sync_wait"
CHECK_INTERVAL = "admin-cluster_check_interval_ms"


def propagate_refused(plan, touched, readings, unread):
    """Why this plan cannot be propagated from one node ("" when it can)."""
    spec = kind_spec(plan.kind)
    if spec.cluster_sync != PROPAGATE:
        return spec.why_held or f"a {plan.kind} is written on every node"
    if unread:
        return "a node could not be read: " + "; ".join(unread)
    if len(readings) < 2:
        return "a single node has no peer to pull it"
    modules = set().union(*touched.values())
    for node, (values, *_sql) in readings.items():
        missing = sorted(modules - set(values))
        if missing:
            return f"{node.name} does not pull {', '.join(missing)} from its peers (diffs_before_sync 0 or no peers)"
    loading = [s.key for s in plan.steps if loads(s)]
    if len(loading) != 1:
        return f"it loads in {len(loading)} steps ({', '.join(loading)}), and a peer could pull a state in between"
    if len(modules) > 1:  # one LOAD is whole; two are not, and a peer pulls each module on its own
        return (
            f"it loads {len(modules)} modules ({', '.join(sorted(modules))}), and a peer could pull one "
            "without the other"
        )
    return ""


def pull_bound_ms(readings, modules):
    """How long the plan waits for every peer to pull: ProxySQL's own sync needs diffs_before_sync checks of
    admin-cluster_check_interval_ms that see the difference (2-3 s at the defaults, measured on real 2.7.1 nodes:
    docs/benchmarks.md); two more checks and a second of margin for where each peer is in its cycle."""
    worst = 0
    for values, interval, *_sql in readings.values():
        try:
            every = int(interval or 1000)
        except ValueError:
            every = 1000
        worst = max(worst, max(int(values[m]) for m in modules) * every + 2 * every)
    return worst + 1000


def propagate(plan, touched, readings):
    """The plan's change written on one node (the first), a wait until every peer's checksum of each module equals
    that node's, then every node verified and saved as before. Its rollback is the same: undone on that node, then
    the same wait (executor.rollback)."""
    origin = min(readings, key=lambda n: n.pk)
    peers = sorted((n for n in readings if n != origin), key=lambda n: n.pk)
    origin_id = str(origin.pk)
    modules = sorted(set().union(*touched.values()))
    wait = {
        "origin": origin_id,
        "peers": [str(n.pk) for n in peers],
        "names": {str(n.pk): n.name for n in readings},
        "modules": modules,
        "timeout_ms": pull_bound_ms(readings, modules),
    }
    for index, step in enumerate(list(plan.steps)):
        if loads(step):
            step.nodes = {origin_id: step.nodes[origin_id]}
            step.title += f" (on {origin.name} only: its peers pull it)"
            plan.steps.insert(
                index + 1,
                Step(
                    WAIT_SYNC_KEY,
                    f"Wait until {', '.join(n.name for n in peers)} pulled it from {origin.name} "
                    f"(ProxySQL Cluster: every peer's checksum of {', '.join(modules)} equals "
                    f"{origin.name}'s, at most {wait['timeout_ms']} ms)",
                    WAIT_SYNC,
                    params=wait,
                ),
            )
        elif step_handler(step.kind).on_timeout and step.params.get("offline_hard"):
            step.params["offline_hard"] = {origin_id: step.params["offline_hard"][origin_id]}
            step.params["then_sync"] = wait
    plan.facts["cluster_sync_propagated"] = {
        "said": f"ProxySQL Cluster: written on {origin.name} only; {', '.join(n.name for n in peers)} "
        f"{'pulls' if len(peers) == 1 else 'pull'} it "
        f"(sync of {', '.join(modules)} on); a rollback is undone on {origin.name} and pulled the same way",
        "origin": origin.name,
        "peers": [n.name for n in peers],
        "timeout_ms": wait["timeout_ms"],
    }
    return plan
