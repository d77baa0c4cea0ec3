"""Read-pool rules and automatic failover: run after every backend poll, per cluster, from the latest
state the pollers just wrote. Each change is an audited plan executed at once (or, in dry-run mode,
only audited). Decisions are audited when they change, not on every poll.

Reader status, per backend (Galera):
  Synced and Primary            ONLINE in the reader hostgroup (its configured weight is kept)
  Donor/Desynced                ONLINE while wsrep_local_recv_queue <= max_replication_lag; OFFLINE_SOFT above;
                                back ONLINE only after staying <= the return mark for reader_return_after_s
  non-Primary, not ready, unreachable, reject_queries set
                                OFFLINE_SOFT in every hostgroup, OFFLINE_HARD after offline_hard_grace_s
The writer's place in the reader hostgroup follows writer_is_also_reader (0: neither the writer nor the
backup writers read; 1: they all read; 2: backup writers read, the writer does not), from the product's
view of roles, not from read_only. Never fewer ONLINE readers than min_available_readers: the least bad
node is kept and an alert raised instead.

Automatic failover: once failover_after_polls consecutive backend polls saw the writer down (unreachable
or outside the Primary component), the writer is re-probed at once on a fresh connection. A refused or
lost connection, or a non-Primary answer, confirms it; any answer cancels (the count starts again);
silence (timeouts: a stall, an overload, a hung host) needs one poll more. The writer is judged by its
answers to status reads, never by writes: during a Galera write stall (another node killed, ~5-6 s
until the cluster evicts it) the writer keeps answering and is not failed over.
"""

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec
import redis
from django.db.models import Q

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.backend import BackendClient, NodeState
from apps.clients.proxysql import SERVER_FIELDS, ProxySQLAdmin, ServerKey, configured, on_each_node
from apps.clients.wire import ClientError, Timeout, Unreachable
from apps.fleet.choices import ClusterKind, WriterIsAlsoReader
from apps.fleet.layout import swapped_roles
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.monitoring import live, status
from apps.plans.vocabulary import INVENTORY, PROXYSQL, VERIFY, Guard, Plan, Sql, Step, no_other_operation

from . import executor, pending_rows, services, shared
from .choices import OperationKind
from .locks import current_holder
from .switchover import _row, current_writer, plan_switchover, role_statements

log = logging.getLogger(__name__)
RULE = "read-pool rules"
LATE_POLL_GRACE_S = 2  # past a backend document's staleness, before the rules call it "no recent poll"
FAILOVER_RULE = "automatic failover"

HEALTHY, DESYNCED, BROKEN, UNREACHABLE = 0, 1, 2, 3  # how bad, for "keep the least bad"


class BackendPoll(msgspec.Struct):
    """What the rules read of a backend's latest-state document (live_doc.BackendNodeDoc), live.read_typed: the poll's
    time and outcome, the wsrep state (NodeState's fields, a dict) and whether it is Synced and Primary."""

    ts: float
    ok: bool = True
    error: str | None = None
    state: dict[str, Any] | None = None  # NodeState's fields as JSON: values of each field's type
    synced_primary: bool | None = None


Polls = Mapping[int, BackendPoll | None]  # server pk -> its latest poll (None: none readable)
Changes = dict[tuple[int, int], tuple[str, str]]  # (server pk, hostgroup) -> (the status it should have, why)


class Figure(TypedDict):
    """What decide() saw of one backend (the plan's facts, the audit's details)."""

    state: str
    recv_queue: int | None
    badness: int


@dataclass
class NodeChange:
    """One ProxySQL node's statements for a rules' plan (read pool or failover): the forward statements, their way
    back and the rows the verify expects ([hostgroup, host, port, status])."""

    name: str
    sql: list[str]
    rollback: list[str]
    expect: list[list[Any]]


def read_polls(server_pks: Iterable[int]) -> dict[int, BackendPoll | None]:
    """{server_pk: BackendPoll or None}, one MGET (raises live.LiveUnavailable)."""
    return live.read_typed(live.BACKEND, list(server_pks), BackendPoll)


def classify(doc: BackendPoll | None, stale_after_s: float) -> tuple[int, str, int | None]:
    """(badness, reason, recv_queue) from a backend's latest-state document (a BackendPoll)."""
    if not doc or time.time() - doc.ts > stale_after_s:
        return UNREACHABLE, "no recent poll", None
    if not doc.ok:
        return UNREACHABLE, f"unreachable: {doc.error}", None
    st = doc.state
    if st is None:  # a poll that answered always carries its state; without one nothing is known
        return UNREACHABLE, "no state in the poll", None
    if not st.get("wsrep_on"):
        return HEALTHY, "not a Galera node", st.get("local_recv_queue")
    queue = st.get("local_recv_queue") or 0
    if st.get("cluster_status") != "Primary":
        return BROKEN, f"cluster status {st.get('cluster_status')}", queue
    if not st.get("ready"):
        return BROKEN, "wsrep_ready OFF", queue
    if (st.get("reject_queries") or "NONE").upper() != "NONE":
        return BROKEN, f"wsrep_reject_queries={st.get('reject_queries')}", queue
    if (st.get("pxc_maint_mode") or "DISABLED").upper() != "DISABLED":
        return BROKEN, f"pxc_maint_mode={st.get('pxc_maint_mode')}", queue
    if st.get("local_state") == 4:
        return HEALTHY, "Synced", queue
    if st.get("local_state") == 2:
        return DESYNCED, "Donor/Desynced", queue
    return BROKEN, f"state {st.get('local_state')} {st.get('local_state_comment')}", queue


def _since(r: redis.Redis, key: str, condition: bool, now: float) -> float:
    """How long `condition` has held (seconds), remembered in Redis across polls; 0 when it does not."""
    if not condition:
        r.delete(key)
        return 0.0
    r.set(key, now, nx=True, ex=86400)
    return now - float(r.get(key) or now)  # not set: a look that starts no timer (rule_settings.would_do_now)


def decide(
    cluster: Cluster, docs: Polls, now: float | None = None, r: redis.Redis | None = None
) -> tuple[Changes, dict[str, Figure], list[str]]:
    """Desired statuses: {(server_pk, hostgroup): (status, reason)} for the rows that should change, plus
    alerts. Pure apart from the hysteresis timers kept in Redis (`r`: the client they are kept in)."""
    now = now or time.time()
    r = r or live.client()
    # More patient than the pages: "no recent poll" counts as unreachable here, and a failover must not follow a
    # poll that is merely late.
    stale = status.stale_after(status.backend_interval(cluster)) + LATE_POLL_GRACE_S
    R, W, BW = cluster.reader_hostgroup, cluster.writer_hostgroup, cluster.backup_writer_hostgroup
    memberships = list(
        HostgroupMembership.objects.filter(server__cluster=cluster, server__maintenance=False).select_related("server")
    )
    by_server: dict[int, list[HostgroupMembership]] = {}
    for m in memberships:
        by_server.setdefault(m.server_id, []).append(m)
    writer = current_writer(cluster)
    writer_pk = writer.server_id if writer else None
    backup_writers = {m.server_id for m in memberships if BW is not None and m.hostgroup_id == BW}

    desired: Changes = {}
    figures: dict[str, Figure] = {}
    alerts: list[str] = []
    for server_pk, rows in by_server.items():
        badness, reason, queue = classify(docs.get(server_pk), stale)
        server = rows[0].server
        figures[str(server)] = {"state": reason, "recv_queue": queue, "badness": badness}
        reader = next((m for m in rows if m.hostgroup_id == R), None)
        # Broken or unreachable: out of every hostgroup, hard after the grace period.
        out_for = _since(r, f"rules:{server_pk}:broken_since", badness >= BROKEN, now)
        if badness >= BROKEN:
            target = "OFFLINE_HARD" if out_for >= cluster.offline_hard_grace_s else "OFFLINE_SOFT"
            for m in rows:
                if server_pk == writer_pk and m.hostgroup_id == W:
                    continue  # the writer's hostgroup is failover's business, not the read pool's
                desired[(server_pk, m.hostgroup_id)] = (target, reason)
            continue
        for m in rows:  # a node that recovered goes back into its other hostgroups
            if m.hostgroup_id != R and m.status != "ONLINE" and not (server_pk == writer_pk and m.hostgroup_id == W):
                desired[(server_pk, m.hostgroup_id)] = ("ONLINE", reason)
        if reader is None:
            continue
        is_writer, is_backup = server_pk == writer_pk, server_pk in backup_writers
        wiar = cluster.writer_is_also_reader
        if (is_writer and wiar in (WriterIsAlsoReader.NO, WriterIsAlsoReader.ONLY_BACKUP)) or (
            is_backup and not is_writer and wiar == WriterIsAlsoReader.NO
        ):
            desired[(server_pk, R)] = ("OFFLINE_SOFT", f"writer_is_also_reader={wiar}")
            continue
        if badness == HEALTHY:
            desired[(server_pk, R)] = ("ONLINE", reason)
            _since(r, f"rules:{server_pk}:under_since", False, now)
        else:  # desynced: the queue decides, with hysteresis on the way back
            over = (queue or 0) > cluster.max_replication_lag
            under_for = _since(r, f"rules:{server_pk}:under_since", (queue or 0) <= cluster.return_mark, now)
            if over:
                desired[(server_pk, R)] = (
                    "OFFLINE_SOFT",
                    f"{reason}, recv queue {queue} > {cluster.max_replication_lag}",
                )
            elif reader.status == "ONLINE":
                desired[(server_pk, R)] = ("ONLINE", f"{reason}, recv queue {queue} <= {cluster.max_replication_lag}")
            elif under_for >= cluster.reader_return_after_s:
                desired[(server_pk, R)] = (
                    "ONLINE",
                    f"{reason}, recv queue {queue} <= {cluster.return_mark} for {under_for:.0f} s",
                )
            else:
                desired[(server_pk, R)] = (
                    "OFFLINE_SOFT",
                    f"{reason}, recv queue {queue}: waiting {cluster.reader_return_after_s} s "
                    f"under {cluster.return_mark} before coming back",
                )

    # Never fewer ONLINE readers than the minimum: keep the least bad ones and say so.
    readers = {m.server_id: m for m in memberships if m.hostgroup_id == R}
    online_after = [pk for pk, m in readers.items() if desired.get((pk, R), (m.status,))[0] == "ONLINE"]
    missing = cluster.min_available_readers - len(online_after)
    if missing > 0:
        candidates = sorted(
            (pk for pk in readers if pk not in online_after),
            key=lambda pk: (
                figures[str(readers[pk].server)]["badness"],
                figures[str(readers[pk].server)]["recv_queue"] or 0,
            ),
        )
        for pk in candidates[:missing]:
            desired[(pk, R)] = ("ONLINE", "kept: the cluster would drop below its minimum of readers")
            alerts.append(
                f"{readers[pk].server} kept ONLINE as a reader although {figures[str(readers[pk].server)]['state']}: "
                f"fewer than {cluster.min_available_readers} healthy reader(s)"
            )
    current = {(m.server_id, m.hostgroup_id): m for m in memberships}
    changes = {k: v for k, v in desired.items() if k in current and current[k].status != v[0]}
    return changes, figures, alerts


def plan_changes(
    cluster: Cluster,
    changes: Changes,
    figures: dict[str, Figure],
    alerts: list[str],
    kind: str = OperationKind.READ_POOL,
    title: str | None = None,
) -> Plan:
    """An audited plan that sets the changed statuses on every ProxySQL node (read in parallel)."""
    memberships = {
        (m.server_id, m.hostgroup_id): m
        for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server")
    }
    targets = [(memberships[k].server, k[1], new_status) for k, (new_status, _) in sorted(changes.items())]

    def read(node: ProxySQLNode, admin: ProxySQLAdmin) -> NodeChange:
        sql = Sql(admin)
        runtime = {(r.hostgroup_id, r.hostname, r.port): r for r in admin.servers("runtime")}
        forward: list[str] = []
        undo: list[str] = []
        expect: list[list[Any]] = []
        for s, hg, new_status in targets:
            row = runtime.get((hg, s.hostname, s.port))
            if row is None:
                continue
            forward.append(sql.set_status(hg, s.hostname, s.port, new_status))
            undo.append(sql.replace_server(_row(row)))
            expect.append([hg, s.hostname, s.port, new_status])
        return NodeChange(
            node.name,
            forward + [sql.LOAD_SERVERS, sql.SAVE_SERVERS],
            undo + [sql.LOAD_SERVERS, sql.SAVE_SERVERS],
            expect,
        )

    per_node, unreachable = _read_nodes(cluster, read)
    holder, native, pending = current_holder(cluster), cluster.active_native_hostgroups(), pending_rows.guard(cluster)
    # Judged and built from what was read above, and nothing else.
    guards = [
        Guard(
            "proxysql_reachable",
            "Every ProxySQL node of the cluster answers",
            not unreachable,
            "; ".join(unreachable) or "yes",
            False,
        ),
        no_other_operation(holder),
        Guard(
            "no_native_hostgroups",
            "ProxySQL's native hostgroup manager is not active here",
            not native,
            "active" if native else "inactive",
            False,
        ),
        # The rules wait for a pending rollback: applying them would supersede it (see rollbacks.py).
        pending,
    ]
    description = "; ".join(f"{memberships[k].server} hg {k[1]} → {v[0]} ({v[1]})" for k, v in sorted(changes.items()))
    steps = [
        Step(
            "apply",
            "Set the statuses on every node, load and save",
            PROXYSQL,
            _statements(per_node),
        ),
        Step(
            "verify",
            "Verify every node's runtime",
            VERIFY,
            params={"expect": {k: v.expect for k, v in per_node.items()}},
        ),
        Step(
            "inventory",
            "Record the statuses in the inventory",
            INVENTORY,
            params={"action": "statuses", "changes": [[k[0], k[1], v[0]] for k, v in sorted(changes.items())]},
        ),
    ]
    return shared.annotate(
        Plan(
            kind,
            cluster.pk,
            title or f"Read pool of {cluster.name}: {description}"[:300],
            guards,
            steps,
            facts={"figures": figures, "alerts": alerts, "changes": description},
            options={"changes": [[k[0], k[1], v[0], v[1]] for k, v in sorted(changes.items())]},
        ),
        cluster,
    )


def _read_nodes(
    cluster: Cluster, read: Callable[[ProxySQLNode, ProxySQLAdmin], NodeChange]
) -> tuple[dict[str, NodeChange], list[str]]:
    """read(node, admin) on every ProxySQL node of the cluster at once: ({node_id (str): result}, [unreachable])."""
    per_node: dict[str, NodeChange] = {}
    unreachable: list[str] = []
    for node, result, error in on_each_node(cluster.proxysql_nodes.order_by("pk"), read):
        if error is not None:
            unreachable.append(f"{node.name}: {error.message}")
        elif result is not None:
            per_node[str(node.pk)] = result
    return per_node, unreachable


def _statements(per_node: dict[str, NodeChange]) -> dict[str, dict[str, Any]]:
    """A PROXYSQL step's per-node statements: {node_id: {name, sql, rollback}}."""
    return {k: {"name": v.name, "sql": v.sql, "rollback": v.rollback} for k, v in per_node.items()}


def _decision_changed(r: redis.Redis, cluster: Cluster, name: str, payload: object) -> bool:
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    key = f"rules:{cluster.pk}:{name}:last"
    if r.get(key) == digest.encode():
        return False
    r.set(key, digest, ex=3600)
    return True


def apply_read_pool(cluster: Cluster, docs: Polls, now: float | None = None) -> int | None:
    """Evaluate the read-pool rules for one cluster and act (or, in dry-run, only audit)."""
    changes, figures, alerts = decide(cluster, docs, now)
    r = live.client()
    if alerts and _decision_changed(r, cluster, "alerts", alerts):
        record(
            "read-pool alert",
            rule=RULE,
            cluster=cluster,
            outcome="failure",
            details={"alerts": alerts, "figures": figures},
        )
    if not changes:
        return None
    payload = {f"{k[0]}:{k[1]}": v for k, v in changes.items()}
    if cluster.rules_dry_run:
        if _decision_changed(r, cluster, "dry_run", payload):
            record(
                "read-pool rules (dry run)",
                rule=RULE,
                cluster=cluster,
                outcome="dry_run",
                details={"would_change": payload, "figures": figures},
            )
        return None
    return _execute(cluster, plan_changes(cluster, changes, figures, alerts), RULE)


def _execute(cluster: Cluster, plan: Plan, rule: str) -> int | None:
    if not plan.guards_passed:
        r = live.client()
        if _decision_changed(r, cluster, f"refused:{rule}", [g.key for g in plan.failed_guards]):
            record(
                f"{plan.kind} refused",
                rule=rule,
                cluster=cluster,
                outcome="refused",
                details={"failed_guards": [g.__dict__ for g in plan.failed_guards], "facts": plan.facts},
            )
        return None
    op = services.save_plan(plan, actor=Actor.rule(rule))
    try:
        services.confirm(op, actor=Actor.rule(rule), enqueue=False)
    except services.NotAllowed:
        return None
    executor.run(op.pk)  # here and now: the rule's reaction time is the point
    return op.pk


# -- automatic failover ----------------------------------------------------------------------------
def writer_down(writer_doc: BackendPoll | None) -> bool:
    """The writer's latest poll saw it unreachable or outside the Primary component (or there is none)."""
    if not writer_doc or not writer_doc.ok:
        return True
    state = writer_doc.state or {}
    return bool(state.get("wsrep_on") and state.get("cluster_status") != "Primary")


def writer_down_polls(cluster: Cluster, writer_doc: BackendPoll | None) -> int:
    """Consecutive polls (distinct poll timestamps) in which the writer was unreachable or non-Primary."""
    r = live.client()
    key = f"failover:{cluster.pk}"
    ts = writer_doc.ts if writer_doc else None
    if not writer_down(writer_doc):
        r.delete(key, f"{key}:ts")
        return 0
    if ts is not None and r.get(f"{key}:ts") == str(ts).encode():
        return int(r.get(key) or 0)
    r.set(f"{key}:ts", str(ts), ex=3600)
    return int(r.incr(key))


def elect(cluster: Cluster, docs: Polls, exclude: int | None) -> int | None:
    """The next writer: the Synced Primary node with the highest weight (backup writer hostgroup first)."""
    weights: dict[int, tuple[int, int]] = {}  # server pk -> (a backup writer: 1, its weight)
    for hg in [cluster.backup_writer_hostgroup, cluster.reader_hostgroup]:
        if hg is None:
            continue
        for m in HostgroupMembership.objects.filter(
            server__cluster=cluster, hostgroup_id=hg, server__maintenance=False
        ):
            weights.setdefault(m.server_id, (1 if hg == cluster.backup_writer_hostgroup else 0, m.weight))
    ranked = sorted(
        (pk for pk in weights if pk != exclude and _synced_primary(docs.get(pk))),
        key=lambda pk: weights[pk],
        reverse=True,
    )
    return ranked[0] if ranked else None


def _synced_primary(doc: BackendPoll | None) -> bool:
    return bool(doc and doc.synced_primary)


def plan_manual_failover(cluster: Cluster, new: Server) -> Plan:
    """A failover an operator asks for (the API, `manage.py failover`): the current writer out and `new` in at
    once, without a drain, by the failover planner. For a writer that is gone; a live one is switched over."""
    writer = current_writer(cluster)
    if writer is None:
        return Plan(
            OperationKind.FAILOVER,
            cluster.pk,
            f"Manual failover {cluster.name}",
            [Guard("writer", "The cluster has a writer in its writer hostgroup", False, "none", False)],
            [],
        )
    valid = (
        new.cluster_id == cluster.pk
        and new.pk != writer.server_id
        and not new.maintenance
        and HostgroupMembership.objects.filter(server=new).exists()
    )
    if not valid:
        return Plan(
            OperationKind.FAILOVER,
            cluster.pk,
            f"Manual failover {cluster.name}",
            [_target_guard(cluster, writer.server, new, False)],
            [],
        )
    return plan_failover(cluster, writer.server, new.pk, {"requested": "manual failover"}, manual=True)


def _target_guard(cluster: Cluster, old: Server, new: Server | str, passed: bool) -> Guard:
    return Guard(
        "target",
        "The new writer is another backend of this cluster, in one of its hostgroups and not in maintenance",
        passed,
        f"{old} → {new}" + ("" if passed else " (it is not)"),
        False,
    )


@dataclass
class ManualRead:
    """What an operator's failover reads besides the automatic one's: the old writer probed again (reprobe()'s
    verdict and detail), the new one's state (or the ClientError it answered), the cluster's lock holder."""

    reprobe: tuple[str, str]
    state: NodeState | ClientError
    holder: str | None


def _manual_read(cluster: Cluster, dead: Server, new: Server) -> ManualRead:
    """What an operator's failover reads besides the automatic one's (ManualRead)."""
    state: NodeState | ClientError
    try:
        with BackendClient.for_server(new) as client:
            state = client.state()
    except ClientError as exc:
        state = exc
    return ManualRead(reprobe(dead), state, current_holder(cluster))


def _manual_guards(cluster: Cluster, dead: Server, new: Server, manual_read: ManualRead) -> list[Guard]:
    """What an operator's failover checks besides the automatic one's, from _manual_read: the new writer answers as a
    writer should now, the old one does not (a live writer is drained by a switchover instead), nothing else runs."""
    (verdict, detail), state, holder = manual_read.reprobe, manual_read.state, manual_read.holder
    galera = cluster.kind == ClusterKind.GALERA
    if isinstance(state, ClientError):
        healthy, seen = False, state.message
    else:
        healthy = state.synced_primary if galera else True
        seen = (
            f"{state.local_state_comment}, {state.cluster_status}, ready {state.ready}"
            if state.wsrep_on
            else f"answers (read_only {'ON' if state.read_only else 'OFF'})"
        )
    return [
        _target_guard(cluster, dead, new, True),
        Guard("new_writer_healthy", f"{new} answers now" + (", Synced and Primary" if galera else ""), healthy, seen),
        Guard(
            "writer_down",
            f"The current writer {dead} does not answer (a live writer is switched over, with a drain, instead)",
            verdict != "answers",
            f"{verdict}: {detail}",
        ),
        no_other_operation(holder),
    ]


def plan_failover(cluster: Cluster, dead: Server, new_pk: int, evidence: dict[str, Any], manual: bool = False) -> Plan:
    """Move the elected node into the writer hostgroup at once (no drain: the old writer is gone); the two
    swap their other role rows as in a switchover (fleet/layout.py swapped_roles), so the layout keeps saying
    who is who and a later switchover back restores it. `manual`: an operator asked for it (more guards)."""
    W = cluster.writer_hostgroup
    old_w = HostgroupMembership.objects.select_related("server").get(server=dead, hostgroup_id=W)
    membership = HostgroupMembership.objects.filter(server_id=new_pk).select_related("server").first()
    if membership is None:  # elected from its memberships, gone since (a failover is planned again at start)
        return Plan(
            OperationKind.FAILOVER,
            cluster.pk,
            f"{'Manual failover' if manual else 'Failover'} {cluster.name}",
            [_target_guard(cluster, dead, f"server #{new_pk}, in no hostgroup", False)],
            [],
            options={"dead": dead.pk, "new": new_pk, "evidence": evidence, **({"manual": True} if manual else {})},
        )
    new = membership.server

    def read(node: ProxySQLNode, admin: ProxySQLAdmin) -> NodeChange:
        sql = Sql(admin)
        rows = {r.key: configured(r) for r in admin.servers("runtime")}
        # A node without the dead writer's row still gets the new writer, with the inventory's settings.
        known: dict[ServerKey, dict[str, int | str | None]] = {
            (W, dead.hostname, dead.port): {f: getattr(old_w, f) for f in SERVER_FIELDS},
            **rows,
        }
        changes = swapped_roles(cluster, known, (dead.hostname, dead.port), (new.hostname, new.port))
        forward, undo, expect = role_statements(sql, rows, changes)
        return NodeChange(
            node.name,
            forward + [sql.LOAD_SERVERS, sql.SAVE_SERVERS],
            undo + [sql.LOAD_SERVERS, sql.SAVE_SERVERS],
            expect,
        )

    per_node, unreachable = _read_nodes(cluster, read)
    manual_read = _manual_read(cluster, dead, new) if manual else None
    # Judged and built from what was read above, and nothing else.
    guards = [
        Guard(
            "some_proxysql_reachable",
            "At least one ProxySQL node answers",
            bool(per_node),
            "; ".join(unreachable) or "all",
            False,
        ),
        Guard(
            "no_native_hostgroups",
            "ProxySQL's native hostgroup manager is not active here",
            not cluster.active_native_hostgroups(),
            "",
            False,
        ),
    ]
    steps = [
        Step(
            "move",
            f"{new} into writer hostgroup {W}, {dead} out; the two swap their other role rows",
            PROXYSQL,
            _statements(per_node),
        ),
        Step(
            "verify",
            "Verify every reachable node's runtime",
            VERIFY,
            params={"expect": {k: v.expect for k, v in per_node.items()}},
            point_of_no_return=True,
        ),
        Step(
            "inventory",
            "Record the new writer in the inventory",
            INVENTORY,
            params={"old": dead.pk, "new": new.pk, "old_writer_to": "reader"},
        ),
    ]
    if manual_read is not None:
        guards = _manual_guards(cluster, dead, new, manual_read) + guards
    return shared.annotate(
        Plan(
            OperationKind.FAILOVER,
            cluster.pk,
            f"{'Manual failover' if manual else 'Failover'} {cluster.name}: writer {dead} → {new}",
            guards,
            steps,
            facts={**evidence, "unreachable_proxysql": unreachable},
            options={"dead": dead.pk, "new": new.pk, "evidence": evidence, **({"manual": True} if manual else {})},
        ),
        cluster,
    )


def reprobe(server: Server) -> tuple[str, str]:
    """A direct look at the writer on a fresh connection, right after a poll saw it down. Returns
    (verdict, detail): "answers" (it is alive: the poll's failure was passing), "down" (connection refused or
    lost: nothing serves that port; or it answers outside the Primary component), or "silent" (no answer
    within the backend timeouts: stalled or gone, not known yet)."""
    try:
        with BackendClient.for_server(server) as client:
            state = client.state()
    except Timeout as exc:
        return "silent", exc.message
    except Unreachable as exc:
        return "down", exc.message
    except ClientError as exc:  # it answered, with an error (a changed monitor password...): alive
        return "answers", exc.message
    if state.wsrep_on and state.cluster_status != "Primary":
        return "down", f"cluster status {state.cluster_status}"
    return "answers", "Synced and Primary" if state.synced_primary else "answering"


def apply_failover(cluster: Cluster, docs: Polls) -> int | None:
    """Fail over when failover_after_polls consecutive polls saw the writer down and a re-probe, at once,
    confirms it. A writer that only stops answering (timeouts: a stall, an overload, a hung host) needs
    one poll more: silence alone is weaker evidence than a refused connection. Never on a natively managed cluster:
    there ProxySQL's manager moves the writer, and two actors would fight (alerts/native_failover.py measures it)."""
    if cluster.native_manager:
        return None
    writer = current_writer(cluster)
    if writer is None:
        return None
    writer_doc = docs.get(writer.server_id)
    down = writer_down_polls(cluster, writer_doc)
    if down == 0 or down < cluster.failover_after_polls:
        return None
    verdict, detail = reprobe(writer.server)
    if verdict == "answers":
        log.info(
            "cluster %s: writer %s missed %s poll(s) but answered the re-probe (%s)",
            cluster.pk,
            writer.server,
            down,
            detail,
        )
        live.client().delete(f"failover:{cluster.pk}", f"failover:{cluster.pk}:ts")
        return None
    if verdict == "silent" and down < cluster.failover_after_polls + 1:
        return None
    new_pk = elect(cluster, docs, exclude=writer.server_id)
    if new_pk is None:
        if _decision_changed(live.client(), cluster, "no_candidate", down):
            record(
                "failover refused",
                rule=FAILOVER_RULE,
                cluster=cluster,
                outcome="refused",
                details={"reason": "no Synced Primary node to elect", "down_polls": down},
            )
        return None
    evidence = {
        "down_polls": down,
        "poll_error": (writer_doc.error if writer_doc else None) or "not Primary",
        "reprobe": f"{verdict}: {detail}",
    }
    plan = plan_failover(cluster, writer.server, new_pk, evidence)
    op = _execute(cluster, plan, FAILOVER_RULE)
    if op:
        live.client().delete(f"failover:{cluster.pk}", f"failover:{cluster.pk}:ts")
        if cluster.preferred_writer_id is None:  # where failback (if enabled) will bring the writer back
            Cluster.objects.filter(pk=cluster.pk).update(preferred_writer=writer.server)
    return op


FAILBACK_RULE = "automatic failback"


def apply_failback(cluster: Cluster, docs: Polls, now: float | None = None) -> int | None:
    """Back to the preferred writer, gracefully (a planned switchover with the auto-increment way through),
    once it has been Synced and Primary for failback_after_s. Off unless the cluster enables it; never on a natively
    managed cluster (the manager picks the writer)."""
    if cluster.native_manager or not (cluster.failback_enabled and cluster.preferred_writer_id):
        return None
    writer = current_writer(cluster)
    preferred = cluster.preferred_writer
    if writer is None or preferred is None or writer.server_id == preferred.pk or preferred.maintenance:
        return None
    healthy = _synced_primary(docs.get(preferred.pk))
    synced_for = _since(live.client(), f"failback:{cluster.pk}:since", healthy, now or time.time())
    if not healthy or synced_for < cluster.failback_after_s:
        return None

    plan = plan_switchover(cluster, preferred, lower_autoinc=True)
    plan.facts["failback"] = {"synced_for_s": round(synced_for, 1), "required_s": cluster.failback_after_s}
    return _execute(cluster, plan, FAILBACK_RULE)


def after_backend_poll(cluster_ids: Iterable[int]) -> None:
    """Called by the backend polling task: failover first (the writer matters most), then the read pool."""
    for cluster in Cluster.objects.filter(pk__in=cluster_ids):
        if not (cluster.auto_failover_enabled or cluster.read_pool_rules_enabled):
            continue
        try:
            docs = read_polls(cluster.servers.values_list("pk", flat=True))
        except live.LiveUnavailable:
            continue
        try:
            if cluster.auto_failover_enabled and not apply_failover(cluster, docs):
                apply_failback(cluster, docs)
            if cluster.read_pool_rules_enabled:
                apply_read_pool(cluster, docs)
        except Exception:  # one cluster's trouble must not stop the others' rules
            log.exception("rules for cluster %s failed", cluster.pk)


def clusters_of_shard(shard: int, shards: int) -> list[int]:
    """Clusters with rules or failover on that have a backend in this polling shard."""
    rows = Server.objects.filter(
        Q(cluster__read_pool_rules_enabled=True) | Q(cluster__auto_failover_enabled=True)
    ).values_list("pk", "cluster_id")
    return sorted({cluster_id for pk, cluster_id in rows if pk % shards == shard})
