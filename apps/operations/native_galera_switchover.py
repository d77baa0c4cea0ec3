"""Planned switchover on a cluster whose writer ProxySQL's Galera manager places (Cluster.native_manager "galera":
mysql_galera_hostgroups with Monitor; fleet/native.py, lab/reference/native-galera/). Monitor picks the writer among
the writable Synced backends by the weight of their configured row, at each healthcheck, on every ProxySQL node by
itself; it puts a status it finds back (an OFFLINE_SOFT writer row is ONLINE again at its next check:
lab/reference/native-galera/switch.jsonl). So the move is made by the weights: A's and B's weights in the writer
hostgroup are swapped, and what is loaded meanwhile is the placement Monitor makes of them.

Steps: [lower auto_increment_delay_multiplex] -> drain A (Monitor's placement loaded with the weights swapped and A
OFFLINE_SOFT in the writer hostgroup, alone: writes are held; Monitor's next check would place B, as the move does)
-> wait for ConnUsed 0 on every node -> wait until B has applied what A committed -> move (the placement Monitor makes
of the swapped weights loaded: B writing, A a backup writer) -> wait until Monitor on every node has checked and
agreed (it marks A SHUNNED in the writer hostgroup, a row no plan writes) -> memory as configured with the weights
swapped, saved to disk (no LOAD: loaded as configured, every backend would write until Monitor's next check) -> verify
memory -> [restore the variable] -> record the swapped weights as the next configuration version.

A rollback loads the placement as it was before the drain (A writing) with the weights as they were, and puts memory
back to the configured rows; disk is written only past the point of no return.
"""

from apps.clients.proxysql import configured
from apps.fleet.choices import ClusterKind
from apps.plans.vocabulary import MONITOR_WRITER, PROXYSQL, VERIFY, WAIT_CATCHUP, WAIT_MONITOR, Guard, Plan, Sql, Step

from . import shared
from .choices import OnDrainTimeout, OperationKind
from .native_switchover import (
    MONITOR_ENABLED,
    PLACEMENT_POLL_MS,
    _changes,
    _every_row,
    _pending,
    drain_steps,
    read_native_nodes,
    writer_guards,
)
from .switchover import AUTOINC, autoinc_parts, shared_guards

HEALTHCHECK = "mysql-monitor_galera_healthcheck_interval"
# The wait for Monitor's agreement: this many healthchecks (real 2.7.1 placed within one: 3.7-4.8 s at 5000 ms).
MONITOR_CHECKS, MIN_WAIT_MS = 3, 3000


def plan_galera_switchover(
    cluster,
    new_writer,
    *,
    drain_timeout_ms=None,
    on_timeout=OnDrainTimeout.ROLLBACK,
    lower_autoinc=None,
    monitor_timeout_ms=None,
    catchup_timeout_ms=2000,
):
    """The switchover through ProxySQL's Galera manager, from what the nodes and backends say now. Network reads
    only; writes nothing. The old writer is the one Monitor placed."""
    longer_timeout = drain_timeout_ms is not None and drain_timeout_ms > cluster.drain_timeout_ms
    drain_timeout_ms = drain_timeout_ms if drain_timeout_ms is not None else cluster.drain_timeout_ms
    W, B = cluster.writer_hostgroup, new_writer
    statements, backups, intervals, unmanaged, pending_edits, weights, managed = {}, {}, [], [], [], [], set()

    def more(node, admin, runtime, memory, variables, A):
        row = next((g for g in admin.galera_hostgroups() if g.active and g.writer_hostgroup == W), None)
        backups[node.name] = row is not None and any(
            (r.hostgroup_id, r.hostname, r.port, r.status)
            == (row.backup_writer_hostgroup, B.hostname, B.port, "ONLINE")
            for r in runtime
        )
        if row is not None:
            managed.update(_hostgroups(row))
        if A is not None and row is not None:
            statements[node.pk] = _node_statements(Sql(admin), row, A, B, runtime, memory, variables)
            weights.append(statements[node.pk]["weights"])
        return row

    # ONLINE only: Monitor marks the backup writers SHUNNED in the writer hostgroup
    read = read_native_nodes(cluster, B, [HEALTHCHECK], lambda status: status, more)
    A, nodes, facts, tally, autoinc_values = read.A, read.nodes, read.facts, read.tally, read.autoinc_values
    for node, runtime, memory, variables, row in read.answered:
        if row is None or row.max_writers != 1 or str(variables.get(MONITOR_ENABLED)).lower() not in ("true", "1"):
            unmanaged.append(node.name)
        intervals.append(int(variables.get(HEALTHCHECK) or 5000))
        pending_edits += _pending(node, runtime, memory, cluster.managed_hostgroups() | managed)
    guards = writer_guards(cluster, read, B)
    if A is None:
        return Plan(OperationKind.SWITCHOVER, cluster.pk, f"Switchover {cluster.name}", guards, [], facts)
    title = f"Switchover {cluster.name}: writer {A} → {B} (through ProxySQL's Galera manager)"
    not_backup = [name for name, yes in backups.items() if not yes]
    guards.append(
        Guard(
            "monitor_candidate",
            f"Monitor has placed {B} as a backup writer (Synced and writable: it may write) on every node",
            not not_backup,
            ", ".join(not_backup) or "yes",
            False,
        )
    )
    guards.append(
        Guard("galera_topology", "The cluster is Galera", cluster.kind == ClusterKind.GALERA, cluster.kind, False)
    )
    swaps = {tuple(map(tuple, w["swap"])) if w["swap"] else None for w in weights}
    swap = weights[0]["swap"] if weights else None
    guards.append(
        Guard(
            "weights",
            f"{A} and {B} are configured in writer hostgroup {W} with different weights, the "
            f"same on every node, and {B} would be the heaviest with {A}'s (Monitor picks the writer by "
            f"weight)",
            len(swaps) == 1 and swap is not None and all(w["heaviest"] for w in weights),
            "; ".join(w["said"] for w in weights) or "not read",
            False,
        )
    )
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
        f"Every node runs mysql_galera_hostgroups writer {W} with max_writers 1 and "
        f"Monitor enabled (it moves the servers)",
        not unmanaged,
        f"not on {', '.join(unmanaged)}" if unmanaged else "yes",
        False,
    )
    more, lower_autoinc = shared_guards(
        cluster,
        A,
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
    guards += more
    interval = max(intervals or [5000])
    if monitor_timeout_ms is None:
        monitor_timeout_ms = max(MIN_WAIT_MS, MONITOR_CHECKS * interval)
    facts["monitor_moves"] = (
        f"ProxySQL's Galera manager picks the writer by weight on each node: this plan swaps the weights of {A} and "
        f"{B} in writer hostgroup {W} and loads the placement Monitor makes of them. It drains {A} (writes are held "
        f"until the move), waits for {B} to apply what {A} committed, moves, and waits up to {monitor_timeout_ms} ms "
        f"for Monitor (a healthcheck every {interval} ms) to agree on every node; otherwise it rolls back, the weights "
        f"and the placement as they were. Memory ends as configured with the weights swapped, saved to disk."
    )

    def per_node(part):
        return {str(n.pk): {"name": n.name, **statements[n.pk][part]} for n in nodes if n.pk in statements}

    steps = drain_steps(
        per_node,
        lower_autoinc,
        A,
        W,
        drain_timeout_ms,
        on_timeout,
        f"{A} to OFFLINE_SOFT alone in writer hostgroup {W}, the weights of {A} and {B} swapped, "
        f"loaded with Monitor's placement as it is: writes are held",
    )
    steps.append(
        Step(
            "catch_up",
            f"Wait until {B} has applied everything {A} committed (wsrep_last_committed)",
            WAIT_CATCHUP,
            params={"old": A.pk, "new": B.pk, "timeout_ms": catchup_timeout_ms},
        )
    )
    steps.append(
        Step(
            "move",
            f"Load the placement Monitor makes of the swapped weights: {B} writing in {W}, {A} a backup writer",
            PROXYSQL,
            per_node("move"),
        )
    )
    steps.append(
        Step(
            "wait_monitor",
            f"Wait until Monitor has checked and kept {B} the writer on every node ({A} "
            f"marked SHUNNED in {W}; up to {monitor_timeout_ms} ms)",
            WAIT_MONITOR,
            params={
                "writer_hostgroup": W,
                "new": [B.hostname, B.port],
                "old": [A.hostname, A.port],
                "old_marked": "SHUNNED",
                "names": {str(n.pk): n.name for n in nodes},
                "timeout_ms": monitor_timeout_ms,
                "poll_ms": PLACEMENT_POLL_MS,
            },
        )
    )
    steps.append(
        Step(
            "memory_back",
            "Memory back to the configured rows, the weights swapped, saved to disk on every "
            "node (no LOAD: the runtime is Monitor's)",
            PROXYSQL,
            per_node("memory_back"),
            point_of_no_return=True,
        )
    )
    steps.append(
        Step(
            "verify_memory",
            "Verify every node's memory holds the configured rows, the weights swapped",
            VERIFY,
            params={
                "rows": {str(pk): sql["configured"] for pk, sql in statements.items()},
                "hostgroups": sorted(managed),
                "variables": {},
                "layer": "memory",
            },
        )
    )
    if lower_autoinc:
        steps.append(Step("autoinc_restore", f"Restore {AUTOINC}", PROXYSQL, per_node("autoinc_restore")))
    steps.append(
        Step(
            "record_writer",
            f"Record {B} as the writer Monitor placed, and the swapped weights",
            MONITOR_WRITER,
            params={
                "old": A.pk,
                "new": B.pk,
                "old_name": str(A),
                "new_name": str(B),
                "manager": "Galera",
                "weights": swap or [],
            },
        )
    )
    options = {
        "drain_timeout_ms": drain_timeout_ms,
        "on_timeout": on_timeout,
        "lower_autoinc": lower_autoinc,
        "old_writer_to": "reader",
        "new_writer": B.pk,
        "old_writer": A.pk,
        "monitor_timeout_ms": monitor_timeout_ms,
        "autoinc_values": {str(k): v for k, v in autoinc_values.items()},
    }
    return shared.annotate(Plan(OperationKind.SWITCHOVER, cluster.pk, title, guards, steps, facts, options), cluster)


def _hostgroups(row):
    return (row.writer_hostgroup, row.backup_writer_hostgroup, row.reader_hostgroup, row.offline_hostgroup)


def _node_statements(sql, row, A, B, runtime, memory, variables):
    """One node's statements. `placed`: Monitor's placement (its SHUNNED marks in the writer hostgroup left out: a
    backend loaded ONLINE there would write until the next check); every row of A and B in it carries the other's
    weight, as Monitor copies each backend's configured writer row."""
    W, backup, R = row.writer_hostgroup, row.backup_writer_hostgroup, row.reader_hostgroup
    managed = set(_hostgroups(row))
    a, b = (A.hostname, A.port), (B.hostname, B.port)
    configured_rows = {r.key: configured(r) for r in memory if r.hostgroup_id in managed}
    placed = {
        r.key: configured(r)
        for r in runtime
        if r.hostgroup_id in managed and (r.hostgroup_id != W or r.status == "ONLINE")
    }
    wa, wb = (configured_rows.get((W, *k), {}).get("weight") for k in (a, b))
    rivals = {k[1:]: v["weight"] for k, v in configured_rows.items() if k[0] == W and k[1:] not in (a, b)}
    heaviest = wa is not None and all((w, k) < (wa, b) for k, w in rivals.items())
    swap = [[W, *a, wb], [W, *b, wa]] if None not in (wa, wb) and wa != wb else None
    said = f"{A}: {wa if wa is not None else 'not configured'}, {B}: {wb if wb is not None else 'not configured'}" + (
        "" if heaviest else f", a rival as heavy as {wa}"
    )
    new_weight = {a: wb, b: wa} if swap else {}

    def weighed(rows):
        return {k: {**v, "weight": new_weight.get(k[1:], v["weight"])} for k, v in rows.items()}

    drained = weighed(placed)
    if (W, *a) in drained:
        drained[(W, *a)] = {**drained[(W, *a)], "status": "OFFLINE_SOFT"}
    moved = {k: v for k, v in drained.items() if k != (W, *a)}
    b_row = next((v for k, v in drained.items() if k[1:] == b), None)
    a_row = next((v for k, v in drained.items() if k[1:] == a), None)
    if b_row and a_row:
        moved[(W, *b)] = {**b_row, "status": "ONLINE"}
        moved.pop((backup, *b), None)
        moved[(backup, *a)] = {**a_row, "status": "ONLINE"}
        if row.writer_is_also_reader == 2:  # the readers are the backup writers
            moved.pop((R, *b), None)
            moved[(R, *a)] = {**a_row, "status": "ONLINE"}
    target = {
        k: ({**v, "weight": new_weight[k[1:]]} if k[0] == W and k[1:] in new_weight else v)
        for k, v in configured_rows.items()
    }
    every = sorted(placed.keys() | configured_rows.keys() | drained.keys() | moved.keys())
    back = _every_row(sql, every, placed) + [sql.LOAD_SERVERS] + _every_row(sql, every, configured_rows)
    hard = {**drained, (W, *a): {**drained[(W, *a)], "status": "OFFLINE_HARD"}} if (W, *a) in drained else drained
    return {
        **autoinc_parts(sql, variables),
        "drain": {"sql": _changes(sql, configured_rows, drained) + [sql.LOAD_SERVERS], "rollback": back},
        "offline_hard": {"sql": _changes(sql, drained, hard) + [sql.LOAD_SERVERS], "rollback": back},
        "move": {"sql": _changes(sql, drained, moved) + [sql.LOAD_SERVERS], "rollback": back},
        "memory_back": {"sql": _changes(sql, moved, target) + [sql.SAVE_SERVERS], "rollback": []},
        "configured": [[*k, target[k]] for k in sorted(target)],
        "weights": {"swap": swap, "heaviest": heaviest, "said": said},
    }
