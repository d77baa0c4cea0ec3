"""Moving a channel's ends: its source to another node of the source cluster, its replica to another node of
the replica cluster, or both. One planner for failovers (an end died) and planned moves.

Why it is safe with MariaDB GTID on Galera (wsrep_gtid_mode=ON): every node of a cluster writes the same
GTIDs in its cluster's domain, so any source node can serve a replica from its gtid_slave_pos; and the
replica cluster replicates what its replica node applied, with the source's GTIDs, to all its nodes. So:

- source move: on the replica, CHANGE MASTER to the new source with MASTER_USE_GTID=slave_pos: it resumes
  after the last transaction it applied (guard: the new source's binlog reaches that position).
- replica move: the old replica's threads are stopped (when it answers); then, at that step, the new
  replica reads what its cluster has committed in the source's domain (a causal read, after every write-set
  ordered before it) and starts from there: SET GLOBAL gtid_slave_pos to that, CHANGE MASTER, START SLAVE.
  Nothing is applied twice (the position is what dc2 has) nor skipped (the source serves from there on).
  When the old replica died, the new one starts only after its Galera cluster evicted it (step "evicted").

The plan is data like every other: guards read now, and per backend the statements with their rollback
(the password as a secret marker, placed by position and filled in only when sent). The replica move's
position is read when its step runs (it may move until the old replica stopped): the step records the exact
statement it sent.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import transaction

from apps.clients.backend import BackendClient, ChannelRead
from apps.clients.wire import ClientError
from apps.fleet.models import Server
from apps.plans.vocabulary import Guard, Plan, Secret, Spans, Step, place
from apps.plans.registry import CLUSTER, OperationSpec, StepFailed, StepHandler, register_kind, register_step

from . import native
from .gtid import gtid_seq
from .models import REPLICA, SOURCE, ReplicationChannel

if TYPE_CHECKING:  # the executor runs these handlers; importing it here at run time would be a circle
    from apps.operations.executor import Run
    from apps.operations.models import OperationStep

Render = Callable[..., str]  # (sql, params=()) -> the statement as the node's driver renders it
Candidates = list[tuple[Server, int]]  # [(server, weight)], best first
Done = list[dict[str, Any]]  # what a step ran or undid, one dict a statement

CHANNEL_MOVE = "channel_move"  # this app's operation kind (registered in register())
CHANNEL_SQL, CHANNEL_POSITION, CHANNEL_VERIFY, CHANNEL_RECORD, CHANNEL_EVICTED = (
    "channel_sql",
    "channel_position",
    "channel_verify",
    "channel_record",
    "channel_evicted",
)
VERIFY_TIMEOUT_S = 15
EVICTION_WAIT_S = 20  # Galera evicts a dead member after evs.suspect_timeout (PT5S), at the latest inactive_timeout
SOURCE_CATCH_UP_S = 2  # how long a new source may take to reach what the replica applied (its apply queue)


def secret_ref(channel: ReplicationChannel) -> str:
    return f"dr-channel-{channel.pk}"


@dataclass
class Probe:
    """What the planner needs of one node, read now (_probe): `ok` False and `error` said when it does not answer."""

    server: Server
    ok: bool = False
    error: str | None = None
    synced_primary: bool = False
    channel: ChannelRead | None = None
    domain: int | None = None
    binlog_pos: str = ""
    version: str = ""
    native: bool = False  # MySQL 8.0.22+: its own source list (dr/native.py)
    galera: bool = False
    # (failover on, sources): native only
    native_sources: tuple[bool, list[tuple[str, int, int]]] = field(default_factory=lambda: (False, []))


def _probe(server: Server) -> Probe:
    out = Probe(server)
    try:
        with BackendClient.for_server(server) as client:
            state = client.state()
            out.synced_primary, out.galera = state.synced_primary, state.wsrep_on
            out.version, out.native = state.version, native.has_native_failover(state.version)
            if out.native:  # MySQL: GTID sets, auto-positioning; its own source list
                out.channel = client.channel(mysql=True)
                out.binlog_pos = out.channel.gtid_binlog_pos
                out.native_sources = client.native_sources()
            else:
                out.domain, out.binlog_pos = client.gtid_origin()
                out.channel = client.channel()
            out.ok = True
    except ClientError as exc:
        out.error = str(exc)
    return out


def probe_synced(server: Server) -> bool:
    return _probe(server).synced_primary


def best_candidate(channel: ReplicationChannel, side: str, exclude: Server) -> Server | None:
    """The highest-weight candidate of that side, other than `exclude`, that answers Synced in a Primary
    component now (probed in weight order). None when there is none."""
    for server, _weight in channel.candidates_for(side):
        if server.pk == exclude.pk or server.maintenance:
            continue
        if probe_synced(server):
            return server
    return None


def _change_master(render: Render, source: Server, channel: ReplicationChannel) -> str:
    return render(
        "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
        "MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
        (source.hostname, int(source.port), channel.replication_user, Secret(secret_ref(channel))),
    )


def _sql_step(key: str, title: str, server: Server, sql: list[str], rollback: list[str]) -> Step:
    return Step(
        key=key,
        title=title,
        kind=CHANNEL_SQL,
        params={"server": server.pk, "name": str(server), "sql": sql, "rollback": rollback},
    )


def _can_reset(server: Server) -> bool | str:
    """True, False, or why it could not be read."""
    try:
        with BackendClient.for_server(server) as client:
            return client.can_reset_replica()
    except ClientError as exc:
        return f"could not read its grants: {exc.message}"


@dataclass
class MoveRead:
    """Everything a move plan reads, before it judges: each end probed once (probes: {server pk: _probe()}), the
    source read again until it reaches what the replica side applied (SOURCE_CATCH_UP_S), the candidates, whether
    a rollback could remove the channel from a new replica (can_undo: None when not asked), and the replica's
    statements rendered with its driver's escaping (point: (sql, rollback), None when it does not answer; the
    secrets' places in placed)."""

    channel: ReplicationChannel
    old_source: Server
    old_replica: Server
    source: Server
    replica: Server
    replica_cluster: str
    probes: dict[int, Probe]
    domain: int | None
    applied_pos: str
    applied: int | None
    source_has: int | None
    candidates: dict[str, Candidates]
    can_undo: bool | str | None = None
    point: tuple[list[str], list[str]] | None = None
    placed: dict[str, Spans] = field(default_factory=dict)

    @property
    def moving_replica(self) -> bool:
        return bool(self.replica.pk != self.old_replica.pk)

    @property
    def src(self) -> Probe:
        return self.probes[self.source.pk]

    @property
    def rep(self) -> Probe:
        return self.probes[self.replica.pk]

    @property
    def old_rep(self) -> Probe:
        return self.probes[self.old_replica.pk]


def read_move(
    channel: ReplicationChannel, *, new_source: Server | None = None, new_replica: Server | None = None
) -> MoveRead:
    """The read: the channel's ends and the new ones (network), the candidates (database), the replica's
    statements rendered by its driver. The only part of the plan that reads anything."""
    old_source, old_replica = channel.source_server, channel.replica_server
    source = new_source or old_source
    replica = new_replica or old_replica
    # The replica side first, the source after it: a source node may lag its cluster by a few write-sets.
    probes = {s.pk: _probe(s) for s in (old_replica, replica, old_source, source)}
    src, rep, old_rep = probes[source.pk], probes[replica.pk], probes[old_replica.pk]
    domain = src.domain if src.ok else probes[old_source.pk].domain
    # What the replica side has applied in the source's domain: the old replica's gtid_slave_pos, or for a
    # replica move what the new replica's cluster committed (read again, causally, when the step runs).
    if old_rep.ok and old_rep.channel:
        applied_pos = old_rep.channel.gtid_slave_pos
    else:
        applied_pos = rep.binlog_pos
    applied = gtid_seq(applied_pos, domain) if domain is not None else None
    source_has = gtid_seq(src.binlog_pos, domain) if src.ok and domain is not None else None
    deadline = time.monotonic() + SOURCE_CATCH_UP_S
    while src.ok and applied is not None and (source_has or 0) < applied and time.monotonic() < deadline:
        time.sleep(0.02)  # a Galera node applies what its cluster ordered within moments: read it again
        src = probes[source.pk] = _probe(source)
        source_has = gtid_seq(src.binlog_pos, domain) if src.ok and domain is not None else None
    read = MoveRead(
        channel=channel,
        old_source=old_source,
        old_replica=old_replica,
        source=source,
        replica=replica,
        replica_cluster=str(replica.cluster),
        probes=probes,
        domain=domain,
        applied_pos=applied_pos,
        applied=applied,
        source_has=source_has,
        candidates={side: channel.candidates_for(side) for side in (SOURCE, REPLICA)},
    )
    if read.moving_replica and rep.ok and not rep.native:
        read.can_undo = _can_reset(replica)
    if rep.ok:  # rendering needs the node's driver (its escaping): the node must answer
        with BackendClient.for_server(replica) as client:
            read.point = _point_statements(read, lambda sql, params=(): place(client.render, sql, params, read.placed))
    return read


def _point_statements(read: MoveRead, render: Render) -> tuple[list[str], list[str]]:
    """(sql, rollback) pointing the replica at the source, rendered by `render` (the replica's driver)."""
    channel, source, rep = read.channel, read.source, read.rep
    if rep.native:
        # MySQL 8.0.22+: the replica gets the channel's source list and fails its source over by itself.
        was_on, previous = rep.native_sources
        return native.configure(
            render,
            rep.version,
            source=(source.hostname, source.port),
            candidates=[(s.hostname, s.port, w) for s, w in read.candidates[SOURCE]],
            user=channel.replication_user,
            password=Secret(secret_ref(channel)),
            previous=previous,
            was_on=was_on,
        )
    change = [_change_master(render, source, channel)]
    if read.moving_replica:
        undo = ["STOP SLAVE", "RESET SLAVE ALL"]
    else:
        undo = ["STOP SLAVE", _change_master(render, read.old_source, channel), "START SLAVE"]
    return ["STOP SLAVE", *change, "START SLAVE"], undo


def move_guards(read: MoveRead, *, reason: str, evidence: dict[str, Any] | None) -> tuple[list[Guard], dict[str, Any]]:
    """The judgement, from the read alone: (guards, facts)."""
    source, replica, old_replica = read.source, read.replica, read.old_replica
    src, rep, old_rep = read.src, read.rep, read.old_rep
    applied, source_has, domain = read.applied, read.source_has, read.domain
    candidates = {side: {s.pk for s, _ in read.candidates[side]} for side in (SOURCE, REPLICA)}
    guards = [
        Guard(
            "source_synced",
            f"the source {source} answers, Synced in a Primary component",
            src.synced_primary,
            "yes" if src.synced_primary else (src.error or "not Synced/Primary"),
        ),
        Guard(
            "source_has_position",
            f"the source's binlog reaches what the replica side applied (domain {domain})",
            applied is None or (source_has is not None and source_has >= applied),
            f"source at {source_has}, applied {applied}",
            overridable=False,
        ),
        Guard(
            "replica_synced",
            f"the replica {replica} answers, Synced in a Primary component",
            rep.synced_primary,
            "yes" if rep.synced_primary else (rep.error or "not Synced/Primary"),
        ),
    ]
    if source.pk != read.old_source.pk:
        guards.append(
            Guard(
                "source_candidate",
                f"{source} is a source candidate of the channel",
                source.pk in candidates[SOURCE],
                "yes" if source.pk in candidates[SOURCE] else "no",
            )
        )
    if read.moving_replica:
        channel_now = rep.channel if rep.ok else None
        busy = channel_now is not None and (channel_now.io_running == "Yes" or channel_now.sql_running == "Yes")
        guards += [
            Guard(
                "replica_candidate",
                f"{replica} is a replica candidate of the channel",
                replica.pk in candidates[REPLICA],
                "yes" if replica.pk in candidates[REPLICA] else "no",
            ),
            Guard(
                "replica_free",
                f"{replica} does not replicate from anywhere now",
                not busy,
                "free"
                if channel_now is None or not busy
                else f"replicating from {channel_now.source_host}:{channel_now.source_port}",
                overridable=False,
            ),
        ]

    facts = {
        "reason": reason,
        "evidence": evidence or {},
        "domain": domain,
        "applied_at_plan": read.applied_pos,
        "source_binlog_pos": src.binlog_pos,
    }
    if read.can_undo is not None and read.can_undo is not True:
        # Said, not a guard: the move itself needs no RELOAD, and a failover must not wait for a grant.
        facts["replica_undo"] = (
            f"a rollback could not remove the channel from {replica} again: RESET SLAVE ALL "
            f"needs RELOAD, and the console's user there "
            f"{'lacks it (GRANT RELOAD ON *.*)' if read.can_undo is False else read.can_undo}"
        )
    if read.moving_replica and not old_rep.ok:
        facts["old_replica"] = (
            f"{old_replica} does not answer ({old_rep.error}): its channel configuration "
            "stays; with skip_slave_start it will not start by itself when it returns"
        )
    if rep.ok and rep.native:
        facts["native_failover"] = f"{replica} runs MySQL {rep.version}: its own source failover is configured"
    return guards, facts


def move_steps(read: MoveRead, *, verify_timeout_s: float) -> list[Step]:
    """The steps, from the read alone (the replica's statements rendered in it)."""
    channel, source, replica = read.channel, read.source, read.replica
    old_source, old_replica = read.old_source, read.old_replica
    rep, old_rep, domain = read.rep, read.old_rep, read.domain
    steps: list[Step] = []
    if read.moving_replica:
        if old_rep.ok:
            steps.append(
                _sql_step(
                    "stop_old_replica",
                    f"stop the channel on the old replica {old_replica}",
                    old_replica,
                    ["STOP SLAVE"],
                    ["START SLAVE"],
                )
            )
        elif rep.galera and old_replica.cluster_id == replica.cluster_id:
            steps.append(
                Step(
                    key="evicted",
                    title=f"{replica}'s Galera view no longer counts {old_replica}, which does not "
                    f"answer (waited for, up to {EVICTION_WAIT_S} s): its cluster commits again",
                    kind=CHANNEL_EVICTED,
                    params={
                        "server": replica.pk,
                        "name": str(replica),
                        "dead": f"{old_replica.hostname}:{old_replica.port}",
                        "timeout_s": EVICTION_WAIT_S,
                    },
                )
            )
        if rep.ok and not rep.native:  # (MySQL auto-positions from its GTID set)
            steps.append(
                Step(
                    key="position",
                    title=f"{replica} starts from what {read.replica_cluster} has applied in domain {domain}",
                    kind=CHANNEL_POSITION,
                    params={
                        "server": replica.pk,
                        "name": str(replica),
                        "domain": domain,
                        "after": old_replica.pk if old_rep.ok else None,
                        "sql": ["STOP SLAVE", "SET GLOBAL gtid_slave_pos = <read at this step>"],
                        "rollback": ["STOP SLAVE", "SET GLOBAL gtid_slave_pos = <as before>"],
                    },
                )
            )
    if read.point is not None:
        sql, undo = read.point
        if rep.native:
            title = (
                f"{replica} replicates from {source} by GTID auto-positioning, with "
                "its own source list (SOURCE_CONNECTION_AUTO_FAILOVER)"
            )
        else:
            title = f"{replica} replicates from {source} by GTID (slave_pos)"
        steps.append(_sql_step("point", title, replica, sql, undo))
    steps.append(
        Step(
            key="verify",
            title=f"both replication threads run on the new ends and, when {source} has "
            f"transactions {replica} has not applied, {replica} commits one of them, within "
            f"{verify_timeout_s} s",
            kind=CHANNEL_VERIFY,
            params={
                "server": replica.pk,
                "source": [source.hostname, source.port],
                "source_server": source.pk,
                "domain": domain,
                "timeout_s": verify_timeout_s,
            },
        )
    )
    steps.append(
        Step(
            key="record",
            title="the inventory records the channel's new ends",
            kind=CHANNEL_RECORD,
            params={
                "channel": channel.pk,
                "source": source.pk,
                "replica": replica.pk,
                "old_source": old_source.pk,
                "old_replica": old_replica.pk,
            },
        )
    )
    return steps


def plan_move(
    channel: ReplicationChannel,
    *,
    new_source: Server | None = None,
    new_replica: Server | None = None,
    reason: str = "planned",
    evidence: dict[str, Any] | None = None,
    verify_timeout_s: float = VERIFY_TIMEOUT_S,
) -> Plan:
    """Plan moving the channel's source to `new_source` and/or its replica to `new_replica` (Servers): read
    (read_move), judge (move_guards) and build (move_steps), the last two from the read alone."""
    read = read_move(channel, new_source=new_source, new_replica=new_replica)
    guards, facts = move_guards(read, reason=reason, evidence=evidence)
    steps = move_steps(read, verify_timeout_s=verify_timeout_s)
    source, replica = read.source, read.replica
    what = []
    if source.pk != read.old_source.pk:
        what.append(f"source {read.old_source} -> {source}")
    if read.moving_replica:
        what.append(f"replica {read.old_replica} -> {replica}")
    title = f"channel {channel.name}: {', '.join(what) or 'restart in place'} ({reason})"
    return Plan(
        kind=CHANNEL_MOVE,
        cluster_id=channel.replica_cluster_id,
        title=title,
        guards=guards,
        steps=steps,
        facts=facts,
        secrets=read.placed,
        options={
            "channel": channel.pk,
            "new_source": source.pk,
            "new_replica": replica.pk,
            "reason": reason,
            "evidence": evidence or {},
            "verify_timeout_s": verify_timeout_s,
        },
    )


def replan_move(options: dict[str, Any]) -> Plan:
    channel = ReplicationChannel.objects.select_related("source_server__cluster", "replica_server__cluster").get(
        pk=options["channel"]
    )
    return plan_move(
        channel,
        new_source=Server.objects.select_related("cluster").get(pk=options["new_source"]),
        new_replica=Server.objects.select_related("cluster").get(pk=options["new_replica"]),
        reason=options["reason"],
        evidence=options.get("evidence"),
        verify_timeout_s=options.get("verify_timeout_s", VERIFY_TIMEOUT_S),
    )


# -- the executor's handlers for these steps --------------------------------------------------------
def _send(run: "Run", step: Step, sql: str) -> None:
    client = run.backend(step.params["server"])
    values: dict[str, str] = {}
    if run.plan.placed(sql):  # the replication password, placed by the planner
        channel = ReplicationChannel.objects.get(pk=run.plan.options["channel"])
        values = {secret_ref(channel): channel.replication_password}
    client.run(run.plan.to_send(sql, values, client.render), action=step.key)


def run_sql(run: "Run", step: Step, row: "OperationStep", executed: Done, detail: dict[str, Any]) -> None:
    for sql in step.params["sql"]:
        start = time.monotonic()
        _send(run, step, sql)
        executed.append(
            {
                "server": step.params["server"],
                "node": step.params["name"],
                "sql": sql,
                "ms": round((time.monotonic() - start) * 1000, 2),
            }
        )


def undo_sql(run: "Run", step: Step, row: "OperationStep") -> Done:
    if not row.executed:
        return []
    undone = []
    for sql in step.params["rollback"]:
        _send(run, step, sql)
        undone.append({"node": step.params["name"], "sql": sql})
    return undone


def set_position(run: "Run", step: Step, row: "OperationStep", executed: Done, detail: dict[str, Any]) -> None:
    """The replica cluster's committed position in the source's domain, read causally on the new replica
    (after the old replica's last transaction when it was stopped just before), becomes its gtid_slave_pos."""
    p = step.params
    client = run.backend(p["server"])
    if p.get("after"):
        target = gtid_seq(run.backend(p["after"]).channel().gtid_binlog_pos, p["domain"])
        deadline = time.monotonic() + 10
        while (gtid_seq(client.applied_position(), p["domain"]) or 0) < (target or 0):
            if time.monotonic() > deadline:
                raise StepFailed(f"{p['name']} did not reach the old replica's position {target} within 10 s")
            time.sleep(0.01)
    before = client.channel().gtid_slave_pos
    seq_pos = [part for part in client.applied_position().split(",") if part.split("-")[0] == str(p["domain"])]
    if not seq_pos:
        raise StepFailed(f"{p['name']} has no transaction of domain {p['domain']}: no position to start from")
    for sql in ("STOP SLAVE", client.render("SET GLOBAL gtid_slave_pos = %s", (seq_pos[0],))):
        client.run(sql, action=step.key)
        executed.append({"server": p["server"], "node": p["name"], "sql": sql})
    detail.update(position=seq_pos[0], gtid_slave_pos_before=before)


def wait_evicted(run: "Run", step: Step, row: "OperationStep", executed: Done, detail: dict[str, Any]) -> None:
    """Until the new replica's Galera view no longer lists the dead old replica (wsrep_incoming_addresses). Until
    Galera evicts a member that died (evs.suspect_timeout) its cluster commits nothing, and the view change that
    evicts it may stop a replica's SQL thread that is committing just then, without an error (seen on the DR lab:
    the new replica started 5 s before the eviction, its SQL thread gone at the view change). So the channel starts
    after that view change. A view that does not list the address at all (members known by other addresses than
    the inventory's) is taken as it is; the verify step still waits for the new replica's first commit."""
    p = step.params
    client = run.backend(p["server"])
    start = time.monotonic()
    while True:
        members = client.view_addresses()
        detail.update(view=members, waited_s=round(time.monotonic() - start, 2))
        if p["dead"] not in members:
            return
        if time.monotonic() - start > p["timeout_s"]:
            raise StepFailed(
                f"{p['name']}'s Galera view still counts {p['dead']}, which does not answer, after "
                f"{p['timeout_s']} s: the channel is not started on a cluster that commits nothing"
            )
        run.beat()
        time.sleep(0.1)


def undo_position(run: "Run", step: Step, row: "OperationStep") -> Done:
    before = (row.detail or {}).get("gtid_slave_pos_before")
    if before is None:
        return []
    client = run.backend(step.params["server"])
    undone = []
    for sql in ("STOP SLAVE", client.render("SET GLOBAL gtid_slave_pos = %s", (before,))):
        client.run(sql, action=f"rollback {step.key}")
        undone.append({"node": step.params["name"], "sql": sql})
    return undone


def _source_seq(run: "Run", p: dict[str, Any]) -> int | None:
    """The new source's last transaction in the channel's domain, read now; None when it does not answer."""
    try:
        return gtid_seq(run.backend(p["source_server"]).gtid_binlog_pos(), p["domain"])
    except ClientError:
        return None


def verify(run: "Run", step: Step, row: "OperationStep", executed: Done, detail: dict[str, Any]) -> None:
    """Both threads running on the replica, reading from the new source, without an error, within the timeout;
    and when the source has transactions the replica has not applied (read as the step starts), the replica
    commits one of them with its threads still running. Threads that run just after START SLAVE may still stop
    before their first commit: a Galera replica cluster evicting a dead member (a replica failover starts the
    new replica within a poll or two of the death, well inside evs.suspect_timeout) commits nothing until its
    view changes, and MariaDB may stop a replica's SQL thread on a Galera error then with no Last_SQL_Error
    (codership/mysql-wsrep #181; seen on the DR lab when the channel started before the eviction, which the
    "evicted" step now waits for). Such a move fails here and is rolled back, rather than recorded done with a
    stopped channel. (Plans saved before this check carry no domain: threads running is enough for them.)"""
    p = step.params
    client = run.backend(p["server"])
    deadline = time.monotonic() + p["timeout_s"]
    domain = p.get("domain")
    start = None
    to_commit = False  # the source has transactions the replica had not applied when the step started
    sql_ran = False
    while True:
        read = client.channel()
        applied = gtid_seq(read.gtid_slave_pos, domain) if domain is not None else None
        if domain is not None and p.get("source_server") and start is None:
            start = applied or 0
            source_has = _source_seq(run, p)
            to_commit = source_has is None or source_has > start
            detail.update(applied_at_start=start, source_at_start=source_has)
        committed = not to_commit or (applied or 0) > (start or 0)  # (to_commit only once start is read)
        sql_ran = sql_ran or read.sql_running == "Yes"
        detail.update(
            io=read.io_running,
            sql=read.sql_running,
            gtid_slave_pos=read.gtid_slave_pos,
            gtid_io_pos=read.gtid_io_pos,
            io_error=read.last_io_error,
            sql_error=read.last_sql_error,
            committed_since_start=committed if to_commit else None,
        )
        if (
            read.running
            and [read.source_host, read.source_port] == p["source"]
            and not read.last_sql_error
            and committed
        ):
            return
        stopped = sql_ran and read.sql_running == "No"  # it ran, and a stopped SQL thread does not restart itself
        if read.last_sql_error or stopped or time.monotonic() > deadline:
            why = read.last_io_error or read.last_sql_error
            if not why and stopped:
                why = (
                    f"(its SQL thread stopped, without an error, after START SLAVE, at "
                    f"{read.gtid_slave_pos or 'no position'})"
                )
            elif not why and read.running and not committed:
                why = (
                    f"(no transaction from the new source committed within {p['timeout_s']} s: still at "
                    f"{read.gtid_slave_pos or 'no position'})"
                )
            raise StepFailed(
                f"the channel does not run on {p['source'][0]}:{p['source'][1]}: IO {read.io_running}, "
                f"SQL {read.sql_running} {why}"
            )
        run.beat()  # a wait through a replica cluster's eviction lasts seconds: the reaper must not take it as lost
        time.sleep(0.02)


def record_ends(run: "Run", step: Step, row: "OperationStep", executed: Done, detail: dict[str, Any]) -> None:
    p = step.params
    with transaction.atomic():
        ReplicationChannel.objects.filter(pk=p["channel"]).update(
            source_server_id=p["source"], replica_server_id=p["replica"]
        )
    executed.append({"channel": p["channel"], "source": p["source"], "replica": p["replica"]})


def undo_record(run: "Run", step: Step, row: "OperationStep") -> Done:
    p = step.params
    ReplicationChannel.objects.filter(pk=p["channel"]).update(
        source_server_id=p["old_source"], replica_server_id=p["old_replica"]
    )
    return [{"channel": p["channel"], "source": p["old_source"], "replica": p["old_replica"]}]


def statements(step: Step) -> dict[str, dict[str, list[str]]]:
    """For the re-check at start: what each SQL step sends (the position step's value is read when it runs)."""
    return {f"{step.key} on {step.params['name']}": {"sql": step.params["sql"], "rollback": step.params["rollback"]}}


def register() -> None:
    for handler in (
        StepHandler(CHANNEL_SQL, run_sql, undo=undo_sql, statements=statements),
        StepHandler(CHANNEL_POSITION, set_position, undo=undo_position, statements=statements),
        StepHandler(CHANNEL_VERIFY, verify, check=True),
        StepHandler(CHANNEL_RECORD, record_ends, undo=undo_record),
        StepHandler(CHANNEL_EVICTED, wait_evicted),
    ):
        register_step(handler)
    register_kind(
        OperationSpec(
            CHANNEL_MOVE,
            "DR channel move",
            plan_move,
            lambda cluster, options: replan_move(options),
            holds={"channel_stopped": CLUSTER, "channel_lag": CLUSTER},
        )
    )
