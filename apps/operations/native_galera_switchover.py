"""Planned switchover on a cluster whose writer ProxySQL's Galera manager places (Cluster.native_manager "galera":
mysql_galera_hostgroups with Monitor; fleet/native.py, lab/reference/native-galera/). Monitor picks the writer among
the writable Synced backends by the weight of their configured row, at each healthcheck, on every ProxySQL node by
itself; it puts a status it finds back (an OFFLINE_SOFT writer row is ONLINE again at its next check:
lab/reference/native-galera/switch.jsonl). So the move is made by the weights: A's and B's weights in the writer
hostgroup are swapped, and what is loaded meanwhile is the placement Monitor makes of them.

Steps: drain A (Monitor's placement loaded with the weights swapped and A OFFLINE_SOFT in the writer hostgroup, alone:
writes are held; the mysql_galera_hostgroups row inactive until the move, since a healthcheck in between would put A
ONLINE again, finding it writable in the writer hostgroup, until it checked B: HostGroups_Manager's
update_galera_set_writer; [then auto_increment_delay_multiplex lowered, after that LOAD: a LOAD MYSQL VARIABLES makes an
active manager check at once, and as a step before the drain its check once landed after the drain's LOAD and placed
B while A still held sessions]) -> wait for ConnUsed 0 on every node -> wait until B has applied
what A committed -> move (the row active again, the placement Monitor makes of the swapped weights loaded: B writing,
A a backup writer) -> wait until Monitor on every node has checked and
agreed (it marks A SHUNNED in the writer hostgroup, a row no plan writes) -> memory as configured with the weights
swapped, saved to disk (no LOAD: loaded as configured, every backend would write until Monitor's next check) -> verify
memory -> [restore the variable] -> record the swapped weights as the next configuration version.

A rollback loads the placement as it was before the drain (A writing) with the weights as they were and the row
active, and puts memory back to the configured rows; disk is written only past the point of no return.
"""

from typing import Any

from apps.clients.proxysql import GaleraHostgroups, ProxySQLAdmin, ServerRow, configured
from apps.fleet.choices import ClusterKind
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.plans.vocabulary import MONITOR_WRITER, PROXYSQL, WAIT_CATCHUP, Guard, Plan, Sql, Step

from .choices import OnDrainTimeout
from .native_switchover import (
    Judgement,
    NativeRead,
    NativeNodeStatements,
    Rows,
    Variables,
    Weights,
    _changes,
    _every_row,
    closing_steps,
    drain_steps,
    monitor_on,
    native_facts,
    native_guards,
    per_node,
    plan_through_monitor,
    read_native_nodes,
    wait_monitor_step,
    writer_guards,
)
from .switchover import autoinc_parts

HEALTHCHECK = "mysql-monitor_galera_healthcheck_interval"
# The wait for Monitor's agreement: this many healthchecks (real 2.7.1 placed within one: 3.7-4.8 s at 5000 ms).
MONITOR_CHECKS, MIN_WAIT_MS = 3, 3000
# This planner's read: each node's own part is its active mysql_galera_hostgroups row of the writer hostgroup (None:
# the node has none)
GaleraRead = NativeRead[GaleraHostgroups | None]


def plan_galera_switchover(
    cluster: Cluster,
    new_writer: Server,
    *,
    drain_timeout_ms: int | None = None,
    on_timeout: str = OnDrainTimeout.ROLLBACK,
    lower_autoinc: bool | None = None,
    monitor_timeout_ms: int | None = None,
    catchup_timeout_ms: int = 2000,
) -> Plan:
    """The switchover through ProxySQL's Galera manager, from what the nodes and backends say now. Network reads
    only; writes nothing. The old writer is the one Monitor placed. In three parts, as plan_switchover: read
    (read_galera_switchover), judge (galera_guards) and build (galera_steps) from the read alone."""
    return plan_through_monitor(
        cluster,
        new_writer,
        (read_galera_switchover, galera_guards, galera_steps),
        "Galera",
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        lower_autoinc=lower_autoinc,
        monitor_timeout_ms=monitor_timeout_ms,
        catchup_timeout_ms=catchup_timeout_ms,
    )


def read_galera_switchover(cluster: Cluster, B: Server) -> GaleraRead:
    """The read: every node once (its active mysql_galera_hostgroups row of the writer hostgroup, and its statements
    rendered with its driver's escaping once Monitor's writer is known), then the cluster."""
    W = cluster.writer_hostgroup

    def more(
        node: ProxySQLNode,
        admin: ProxySQLAdmin,
        runtime: list[ServerRow],
        memory: list[ServerRow],
        variables: Variables,
        A: Server | None,
    ) -> tuple[GaleraHostgroups | None, NativeNodeStatements | None]:
        row = next((g for g in admin.galera_hostgroups() if g.active and g.writer_hostgroup == W), None)
        statements = None
        if A is not None and row is not None:
            statements = _node_statements(Sql(admin), row, A, B, runtime, memory, variables)
        return row, statements

    # ONLINE only: Monitor marks the backup writers SHUNNED in the writer hostgroup
    return read_native_nodes(cluster, B, [HEALTHCHECK], lambda status: status, more)


def galera_guards(
    cluster: Cluster,
    B: Server,
    read: GaleraRead,
    *,
    drain_timeout_ms: int,
    on_timeout: str,
    longer_timeout: bool,
    lower_autoinc: bool | None,
    monitor_timeout_ms: int | None,
) -> Judgement:
    """The judgement, from the read alone: (guards, facts, lower_autoinc resolved, monitor_timeout_ms resolved)."""
    W, A = cluster.writer_hostgroup, read.A
    if A is None:
        return writer_guards(cluster, read, B), native_facts(read)[0], lower_autoinc, monitor_timeout_ms
    unmanaged = [
        n.node.name for n in read.answered if n.own is None or n.own.max_writers != 1 or not monitor_on(n.variables)
    ]
    not_backup = [
        n.node.name
        for n in read.answered
        if n.own is None
        or not any(
            (r.hostgroup_id, r.hostname, r.port, r.status)
            == (n.own.backup_writer_hostgroup, B.hostname, B.port, "ONLINE")
            for r in n.runtime
        )
    ]
    weights = [n.statements.weights for n in read.answered if n.statements and n.statements.weights]
    swaps = {tuple(map(tuple, w.swap)) if w.swap else None for w in weights}
    swap = weights[0].swap if weights else None
    own = [
        Guard(
            "monitor_candidate",
            f"Monitor has placed {B} as a backup writer (Synced and writable: it may write) on every node",
            not not_backup,
            ", ".join(not_backup) or "yes",
            False,
        ),
        Guard("galera_topology", "The cluster is Galera", cluster.kind == ClusterKind.GALERA, cluster.kind, False),
        Guard(
            "weights",
            f"{A} and {B} are configured in writer hostgroup {W} with different weights, the "
            f"same on every node, and {B} would be the heaviest with {A}'s (Monitor picks the writer by "
            f"weight)",
            len(swaps) == 1 and swap is not None and all(w.heaviest for w in weights),
            "; ".join(w.said for w in weights) or "not read",
            False,
        ),
    ]
    guards, facts, lower_autoinc = native_guards(
        cluster,
        B,
        read,
        own,
        cluster.managed_hostgroups() | _managed(read),
        f"Every node runs mysql_galera_hostgroups writer {W} with max_writers 1 and Monitor enabled (it moves the "
        f"servers)",
        unmanaged,
        drain_timeout_ms=drain_timeout_ms,
        on_timeout=on_timeout,
        longer_timeout=longer_timeout,
        lower_autoinc=lower_autoinc,
    )
    interval = max([int(n.variables.get(HEALTHCHECK) or 5000) for n in read.answered] or [5000])
    if monitor_timeout_ms is None:
        monitor_timeout_ms = max(MIN_WAIT_MS, MONITOR_CHECKS * interval)
    facts["monitor_moves"] = (
        f"ProxySQL's Galera manager picks the writer by weight on each node: this plan swaps the weights of {A} and "
        f"{B} in writer hostgroup {W} and loads the placement Monitor makes of them. It drains {A} (writes are held "
        f"until the move; the manager is off meanwhile, so that no healthcheck puts {A} back), waits for {B} to apply what {A} committed, moves, and waits up to {monitor_timeout_ms} ms "
        f"for Monitor (a healthcheck every {interval} ms) to agree on every node; otherwise it rolls back, the weights "
        f"and the placement as they were. Memory ends as configured with the weights swapped, saved to disk."
    )
    return guards, facts, lower_autoinc, monitor_timeout_ms


def galera_steps(
    cluster: Cluster,
    B: Server,
    read: GaleraRead,
    *,
    lower_autoinc: bool | None,
    drain_timeout_ms: int,
    on_timeout: str,
    monitor_timeout_ms: int,
    catchup_timeout_ms: int,
) -> list[Step]:
    """The build, from the read alone (a writer placed: read.A): the steps, each node's statements in them."""
    W, A = cluster.writer_hostgroup, read.writer
    weights = [n.statements.weights for n in read.answered if n.statements and n.statements.weights]
    swap = weights[0].swap if weights else None
    steps = drain_steps(
        read,
        lower_autoinc,
        W,
        drain_timeout_ms,
        on_timeout,
        f"{A} to OFFLINE_SOFT alone in writer hostgroup {W}, the weights of {A} and {B} swapped, "
        f"loaded with Monitor's placement as it is and the Galera manager off until the move (its check would "
        f"put {A} ONLINE again): writes are held",
        # A LOAD MYSQL VARIABLES makes an active manager check at once: as a step before the drain, that check could
        # land after the drain's LOAD and place B with the swapped weights while A still held sessions (real 2.7.1
        # and 2.5.5, lab/capture_galera_inactive_race.py). Lowered after the drain's LOAD, with the manager off.
        autoinc_in_drain=True,
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
            f"Load the placement Monitor makes of the swapped weights with the Galera manager on again: {B} writing "
            f"in {W}, {A} a backup writer",
            PROXYSQL,
            per_node(read, "move"),
        )
    )
    steps.append(
        wait_monitor_step(
            read,
            B,
            W,
            f"Wait until Monitor has checked and kept {B} the writer on every node ({A} "
            f"marked SHUNNED in {W}; up to {monitor_timeout_ms} ms)",
            monitor_timeout_ms,
            old_marked="SHUNNED",
        )
    )
    return steps + closing_steps(
        read,
        _managed(read),
        lower_autoinc,
        "Memory back to the configured rows, the weights swapped, saved to disk on every node (no LOAD: the runtime "
        "is Monitor's)",
        "Verify every node's memory holds the configured rows, the weights swapped",
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
        ),
    )


def _managed(read: GaleraRead) -> set[int]:
    """The hostgroups the nodes' mysql_galera_hostgroups rows place."""
    return {hg for n in read.answered if n.own is not None for hg in _hostgroups(n.own)}


def _hostgroups(row: GaleraHostgroups) -> tuple[int, int, int, int]:
    return (row.writer_hostgroup, row.backup_writer_hostgroup, row.reader_hostgroup, row.offline_hostgroup)


def _node_statements(
    sql: Sql,
    row: GaleraHostgroups,
    A: Server,
    B: Server,
    runtime: list[ServerRow],
    memory: list[ServerRow],
    variables: Variables,
) -> NativeNodeStatements:
    """One node's statements. `placed`: Monitor's placement (its SHUNNED marks in the writer hostgroup left out: a
    backend loaded ONLINE there would write until the next check); every row of A and B in it carries the other's
    weight, as Monitor copies each backend's configured writer row."""
    W, backup, R = row.writer_hostgroup, row.backup_writer_hostgroup, row.reader_hostgroup
    managed = set(_hostgroups(row))
    a, b = (A.hostname, A.port), (B.hostname, B.port)
    configured_rows: Rows = {r.key: configured(r) for r in memory if r.hostgroup_id in managed}
    placed: Rows = {
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
    new_weight: dict[tuple[str, int], Any] = {a: wb, b: wa} if swap else {}  # (host, port) -> its weight now

    def weighed(rows: Rows) -> Rows:
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
    # From the drain to the move the manager is off (the row inactive): a healthcheck in between would put A ONLINE
    # in the writer hostgroup again, as it finds it writable there, until it checks B (real 2.7.1 under sysbench: a
    # session began on A and the move's LOAD cut it, 2013; lab/reference/native-galera/switch-under-sysbench.md §2).
    off, on = sql.set_galera_active(W, False), sql.set_galera_active(W, True)
    back = [on] + _every_row(sql, every, placed) + [sql.LOAD_SERVERS] + _every_row(sql, every, configured_rows)
    hard = {**drained, (W, *a): {**drained[(W, *a)], "status": "OFFLINE_HARD"}} if (W, *a) in drained else drained
    return NativeNodeStatements(
        {
            **autoinc_parts(sql, variables),
            "drain": {"sql": [off] + _changes(sql, configured_rows, drained) + [sql.LOAD_SERVERS], "rollback": back},
            "offline_hard": {"sql": _changes(sql, drained, hard) + [sql.LOAD_SERVERS], "rollback": back},
            "move": {"sql": [on] + _changes(sql, drained, moved) + [sql.LOAD_SERVERS], "rollback": back},
            "memory_back": {"sql": _changes(sql, moved, target) + [sql.SAVE_SERVERS], "rollback": []},
        },
        [[*k, target[k]] for k in sorted(target)],
        Weights(swap, heaviest, said),
    )
