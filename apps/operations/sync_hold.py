"""ProxySQL Cluster (ProxySQL's own configuration sync) held off for the duration of a plan.

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
from apps.fleet.models import ProxySQLNode

from .plans import PROXYSQL, WAIT_DRAIN, Sql, Step

# LOAD <module> TO RUNTIME -> the module's name in admin-cluster_<name>_diffs_before_sync
SYNCED = {"MYSQL SERVERS": "mysql_servers", "MYSQL USERS": "mysql_users", "MYSQL QUERY RULES": "mysql_query_rules",
          "MYSQL VARIABLES": "mysql_variables", "ADMIN VARIABLES": "admin_variables",
          "PROXYSQL SERVERS": "proxysql_servers"}
LOAD = re.compile(r"^LOAD (.+) TO RUNTIME$", re.IGNORECASE)
LOAD_ADMIN, SAVE_ADMIN = "LOAD ADMIN VARIABLES TO RUNTIME", "SAVE ADMIN VARIABLES TO DISK"
HOLD_KEY, RESTORE_KEY = "sync_hold", "sync_restore"


def variable(module):
    return f"admin-cluster_{module}_diffs_before_sync"


def touched_modules(plan):
    """The synced modules the plan loads on each node: {node_id: {module, ...}}."""
    out = {}
    for step in plan.steps:
        part = {PROXYSQL: step.nodes, WAIT_DRAIN: step.params.get("offline_hard") or {}}.get(step.kind, {})
        for node_id, spec in part.items():
            for sql in [*spec.get("sql", []), *spec.get("rollback", [])]:
                match = LOAD.match(sql.strip())
                if match and match.group(1).upper() in SYNCED:
                    out.setdefault(node_id, set()).add(SYNCED[match.group(1).upper()])
    return out


def saves_admin_variables(plan):
    return any(SAVE_ADMIN in spec.get("sql", []) for s in plan.steps for spec in s.nodes.values())


def synced(admin, modules):
    """{module: diffs_before_sync} for the modules this node pulls from its peers (cluster credentials set,
    peers listed, diffs_before_sync > 0)."""
    values = admin.global_variables(["admin-cluster_username", *(variable(m) for m in modules)])
    if not values.get("admin-cluster_username") or not admin.proxysql_servers():
        return {}
    out = {}
    for module in sorted(modules):
        try:
            if int(values.get(variable(module)) or 0) > 0:
                out[module] = values[variable(module)]
        except ValueError:
            continue
    return out


def annotate(plan, cluster):
    """Add the hold (first step) and its restore (last step) to `plan`, in place, for the nodes that sync a module
    the plan loads. A node that cannot be read now is named in the facts (its steps will fail or be kept for it)."""
    touched = touched_modules(plan)
    if not touched:
        return plan
    nodes = ProxySQLNode.objects.filter(cluster=cluster, pk__in=[int(k) for k in touched]).order_by("pk")
    save_again = saves_admin_variables(plan)

    def read(node, admin):  # on the node's own thread (on_each_node): no database here
        modules = touched[str(node.pk)]
        # the hold is itself written in admin variables, a synced module: held too, or a peer that is restored
        # first would hand its settings (and its sync) to one still mid-operation
        values = synced(admin, modules | {"admin_variables"})
        if not set(values) - {"admin_variables"} and "admin_variables" not in modules:
            return {}, [], []
        sql = Sql(admin)
        return (values, [sql.set_variable(variable(m), 0) for m in values] + [LOAD_ADMIN],
                [sql.set_variable(variable(m), v) for m, v in values.items()] + [LOAD_ADMIN])

    held, hold, restore, unread = {}, {}, {}, []
    for node, result, error in on_each_node(nodes, read):
        if error is not None:
            unread.append(f"{node.name}: {error.message}")
            continue
        values, sql, undo = result
        if not values:
            continue
        node_id = str(node.pk)
        held[node.name] = {m: int(v) for m, v in values.items()}
        hold[node_id] = {"name": node.name, "sql": sql, "rollback": undo}
        restore[node_id] = {"name": node.name, "sql": undo + ([SAVE_ADMIN] if save_again else []), "rollback": []}
    if unread:
        plan.facts["cluster_sync_unread"] = unread
    if not hold:
        return plan
    modules = sorted({m for values in held.values() for m in values})
    where = (("both nodes" if len(held) == 2 else "every node") if len(held) == len(touched) and len(held) > 1
             else ", ".join(held))
    said = f"ProxySQL Cluster sync of {', '.join(modules)} held off on {where} for the operation, restored after"
    plan.facts["cluster_sync_held"] = {"said": said, "nodes": held}
    plan.steps.insert(0, Step(HOLD_KEY, f"Hold ProxySQL Cluster sync of {', '.join(modules)} on {where} "
                                        "(admin-cluster_<module>_diffs_before_sync=0: no peer pulls a half-applied "
                                        "state; restored after, and on rollback)", PROXYSQL, hold))
    # forward_only: everything else is done; a node that does not answer keeps the restore for later (finish pending)
    plan.steps.append(Step(RESTORE_KEY, f"Restore ProxySQL Cluster sync of {', '.join(modules)} on {where} "
                                        "(the values read when planned)", PROXYSQL, restore, forward_only=True))
    return plan
