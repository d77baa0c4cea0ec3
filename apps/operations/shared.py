"""A ProxySQL that fronts several clusters (one ProxySQLNode row per cluster, the same admin endpoint).

A plan for cluster A on such a node changes only A's rows, but its LOAD MYSQL SERVERS TO RUNTIME loads the
whole table: so the plan says, per shared node, which other clusters' rows it leaves alone (a hard guard:
no row it writes or expects is in their hostgroups), and its verify checks that those rows are the same, field
by field, as when the run started (the executor reads them once it holds the node's lock: locks.py).
Plans on nodes that serve one cluster are left exactly as they were.
"""

from apps.clients.proxysql import configured, node_admin
from apps.clients.wire import ClientError
from apps.fleet.models import ProxySQLNode
from apps.plans.vocabulary import VERIFY, Guard, Step
from apps.plans.registry import step_handler

from . import sync_hold

GUARD_KEY = "other_clusters_untouched"


def other_hostgroups(node):
    """{hostgroup_id: cluster name} of the other clusters the node's ProxySQL serves ({} if none)."""
    out = {}
    for other in node.shares_with():
        for hg in other.cluster.hostgroup_ids():
            out[hg] = other.cluster.name
    return out


def rows_in(runtime, hostgroups):
    """{"hg host port": configured fields} of the runtime rows (ServerRow) in these hostgroups."""
    return {f"{r.hostgroup_id} {r.hostname} {r.port}": configured(r) for r in runtime if r.hostgroup_id in hostgroups}


def planned_keys(plan, node_id):
    """The (hostgroup, host, port) rows the plan writes or expects on one node, from its verify steps."""
    keys = set()
    for step in plan.steps:
        if not step_handler(step.kind).row_verify:
            continue
        for hg, host, port, *_ in step.params.get("expect", {}).get(node_id, []):
            keys.add((hg, host, port))
        for hg, host, port, *_ in step.params.get("rows", {}).get(node_id, []):
            keys.add((hg, host, port))
    return keys


def annotate(plan, cluster):
    """What every planner ends with: the shared-node guard, facts and verify (below), then the hold of ProxySQL
    Cluster sync for the operation's duration where the nodes sync a module the plan loads (sync_hold.py)."""
    return sync_hold.annotate(annotate_shared(plan, cluster), cluster)


def annotate_shared(plan, cluster):
    """Add the shared-node guard, facts and verify to `plan` (in place) for the cluster's nodes that are shared."""
    in_plan = {int(node_id) for step in plan.steps for node_id in step.nodes}
    nodes = [
        n
        for n in ProxySQLNode.objects.filter(cluster=cluster, pk__in=in_plan).order_by("pk")
        if n.shares_with().exists()
    ]
    if not nodes:
        return plan
    others, facts, trespass, unread = {}, {}, [], []
    for node in nodes:
        hostgroups = other_hostgroups(node)
        clusters = sorted(set(hostgroups.values()))
        try:
            with node_admin(node) as admin:
                count = len(rows_in(admin.servers("runtime"), hostgroups))
        except ClientError as exc:
            unread.append(f"{node.name}: {exc.message}")
            count = None
        others[str(node.pk)] = {"name": node.name, "hostgroups": sorted(hostgroups), "clusters": clusters}
        facts[node.name] = {"clusters": clusters, "rows": count, "hostgroups": sorted(hostgroups)}
        trespass += [
            f"{node.name}: hg {k[0]} {k[1]}:{k[2]} is {hostgroups[k[0]]}'s"
            for k in sorted(planned_keys(plan, str(node.pk)))
            if k[0] in hostgroups
        ]
    summary = "; ".join(
        f"{name}: {', '.join(f['clusters'])}'s {f['rows'] if f['rows'] is not None else '?'} row(s) untouched"
        for name, f in facts.items()
    )
    plan.guards.append(
        Guard(
            GUARD_KEY,
            "The plan leaves the other clusters' rows on shared ProxySQL nodes alone (checked again at verify)",
            not trespass,
            "; ".join(trespass) or summary,
            False,
        )
    )
    plan.facts["shared_nodes"] = facts
    verify = [s for s in plan.steps if step_handler(s.kind).row_verify]
    if not verify:  # a plan without a verify of its own gets one, before it saves
        step = Step("verify_others", "Verify the other clusters' rows on shared ProxySQL nodes are untouched", VERIFY)
        at = next((i for i, s in enumerate(plan.steps) if s.point_of_no_return), len(plan.steps))
        plan.steps.insert(at, step)
        verify = [step]
    for step in verify:
        step.params["others"] = others
    return plan


def snapshot(admins, plan):
    """{node_id: rows} of the other clusters' rows on each shared node, read as the run starts."""
    out = {}
    for step in plan.steps:
        for node_id, spec in (step.params.get("others") or {}).items() if step_handler(step.kind).row_verify else ():
            if node_id not in out:
                out[node_id] = rows_in(admins(node_id).servers("runtime"), set(spec["hostgroups"]))
    return out


def differences(before, admins, others):
    """Problems (text) where the other clusters' rows differ from `before`."""
    problems = []
    for node_id, spec in others.items():
        now = rows_in(admins(node_id).servers("runtime"), set(spec["hostgroups"]))
        was = before.get(node_id, {})
        for key in sorted(was.keys() | now.keys()):
            if was.get(key) != now.get(key):
                problems.append(
                    f"{spec['name']}: {', '.join(spec['clusters'])}'s row hg {key} changed "
                    f"({was.get(key) or 'absent'} -> {now.get(key) or 'absent'})"
                )
    return problems
