"""Runs a confirmed Operation's stored plan step by step, persisting each step, and rolls back on failure.

A step is marked running before it touches anything and done after; rollback statements are idempotent,
so a step interrupted half-way (or a worker killed mid-step) is undone by running its rollbacks on every
node. Past the point of no return a failure leaves the operation FAILED with its message (moving the
writer back is a new switchover, not an automatic undo); a worker that dies there is replaced by the reaper,
which finishes the operation from its stored plan (_resume): the version it records never falls behind the nodes.
"""

import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.db import DatabaseError, transaction
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.backend import BackendClient
from apps.clients.proxysql import ProxySQLAdmin, configured
from apps.clients.wire import ClientError
from apps.fleet.models import ProxySQLNode, Server
from apps.plans.vocabulary import PROXYSQL, Plan, Step
from apps.plans.registry import StepFailed, capture, kind_spec, step_handler
from apps.configuration.secrets import values_for

from . import locks, pending_rows, recheck, restarts, shared
from .choices import OnDrainTimeout, OperationState, StepState
from .models import Operation, OperationStep
from .sync_hold import HOLD_KEY, RESTORE_KEY, SAVE_ADMIN, saves_admin_variables

log = logging.getLogger(__name__)
LOCK_TTL_S = 120
HEARTBEAT_EVERY_S = 1.0
SAVE_TO_DISK = re.compile(r"SAVE (.+) TO DISK", re.IGNORECASE)  # a plan's SAVE <MODULE> TO DISK


class Cancelled(Exception):
    pass


class Run:
    """One execution of one operation by one worker: its open connections and its clock."""

    def __init__(self, operation):
        self.op = operation
        self.plan = Plan.from_json(operation.plan)
        self.admins = {}
        self.backends = {}
        self.last_beat = 0.0
        self.others_before = {}  # the other clusters' rows on shared ProxySQL nodes, as the run started
        self.unfinished = {}  # {node_id: ...}: statements past the point of no return a node did not take
        self.refused = []  # the errors of nodes that refused a statement past the point of no return
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"operation-{operation.pk}")
        self.secrets = self._load_secrets()

    def _load_secrets(self):
        """Values for the secrets the planner placed in the ProxySQL statements (decrypted here, in this thread:
        node threads never touch the database)."""
        refs = {
            ref
            for step in self.plan.steps
            for spec in step.nodes.values()
            for sql in [*spec.get("sql", []), *spec.get("rollback", [])]
            for _, ref in self.plan.placed(sql)
        }
        if not refs:
            return {}

        return values_for(self.op.cluster_id, refs)

    def send(self, node_id, sql, action):
        """Run one planned statement on a node, the secrets the planner placed in it (if any) filled in just
        before sending; a marker anywhere else is sent as the text it is."""
        admin = self.admin(node_id)
        return admin.run(self.plan.to_send(sql, self.secrets, admin.render), action=action)

    # -- connections -----------------------------------------------------------------------------
    def admin(self, node_id):
        node_id = int(node_id)
        if node_id not in self.admins:
            self.admins[node_id] = ProxySQLAdmin.for_node(ProxySQLNode.objects.get(pk=node_id))
        return self.admins[node_id]

    def backend(self, server_id):
        server_id = int(server_id)
        if server_id not in self.backends:
            self.backends[server_id] = BackendClient.for_server(
                Server.objects.select_related("cluster").get(pk=server_id)
            )
        return self.backends[server_id]

    def close(self):
        self.pool.shutdown(wait=True)
        for client in list(self.admins.values()) + list(self.backends.values()):
            client.close()

    # -- bookkeeping -------------------------------------------------------------------------------
    def beat(self, force=False):
        now = time.monotonic()
        if force or now - self.last_beat >= HEARTBEAT_EVERY_S:
            Operation.objects.filter(pk=self.op.pk).update(heartbeat_at=timezone.now())
            locks.extend(self.op, LOCK_TTL_S)
            self.last_beat = now
            if (
                Operation.objects.filter(pk=self.op.pk, cancel_requested=True).exists()
                and not self.op.point_of_no_return
            ):
                raise Cancelled("cancelled by an operator")

    # -- the steps ---------------------------------------------------------------------------------
    def run_proxysql(self, step, executed, part=None):
        """Each node's statements in order; the nodes in parallel (they are independent ProxySQLs)."""
        nodes = part or step.nodes

        def on_node(item):
            node_id, spec = item
            done = []
            for sql in spec["sql"]:
                start = time.monotonic()
                self.send(node_id, sql, step.key)
                done.append(
                    {"node": spec.get("name", node_id), "sql": sql, "ms": round((time.monotonic() - start) * 1000, 2)}
                )
            return done

        results = list(self.pool.map(capture(on_node), nodes.items()))
        for done, error in results:
            executed.extend(done)
        for done, error in results:
            if error is not None:
                raise error

    def run_past_no_return(self, step, executed, detail):
        """A ProxySQL step after the point of no return: the nodes that answer take their statements; a node
        that does not keeps the rest of them, and those of every later step, for later (rollbacks.py retries
        them as it does a pending rollback) while the operation goes on: the inventory must record what the
        other nodes now do. A node that answers with a refusal is not retried (it would refuse again): the
        operation goes on and ends failed with its error (self.refused), for the operator to repair the node."""

        def on_node(item):
            node_id, spec = item
            done = []
            for sql in spec["sql"]:
                start = time.monotonic()
                try:
                    self.send(node_id, sql, step.key)
                except ClientError as exc:
                    return done, spec["sql"][len(done) :], exc
                done.append(
                    {"node": spec.get("name", node_id), "sql": sql, "ms": round((time.monotonic() - start) * 1000, 2)}
                )
            return done, [], None

        for node_id in step.nodes:
            self.admin(node_id)  # built here: node threads never touch the database
        answering = {n: spec for n, spec in step.nodes.items() if n not in self.unfinished}
        for node_id, spec in step.nodes.items():
            if node_id in self.unfinished:
                self.unfinished[node_id]["statements"] += [{"step": step.key, "sql": sql} for sql in spec["sql"]]
        for (node_id, spec), (done, left, error) in zip(answering.items(), self.pool.map(on_node, answering.items())):
            executed.extend(done)
            if left and not error.retryable:
                self.refused.append(str(error))
            elif left:
                self.unfinished[node_id] = {
                    "name": spec.get("name", node_id),
                    "error": str(error),
                    "statements": [{"step": step.key, "sql": sql} for sql in left],
                }
        if self.unfinished:
            detail["pending_on"] = [p["name"] for p in self.unfinished.values()]

    def connect_all(self, strict=True):
        """Open every node's admin connection, and the backends' the plan talks to, up front and in
        parallel: connecting is not a step's work, least of all while the writer is held. (Clients are
        built here, in this thread: node threads never touch the database.) Not strict: a client that
        does not answer is left for the caller to find."""
        clients = [self.admin(node_id) for node_id in self.plan_nodes()]
        clients += [self.backend(server_id) for server_id in self.plan_backends()]
        for _, error in self.pool.map(capture(lambda client: client.ping()), clients):
            if error is not None and strict:
                raise error

    def wait_drain(self, step, executed, detail):
        """Probe ConnUsed on every node at once, every poll_ms, on the connections already open, until it is
        0 everywhere: the writer is held from the drain's LOAD until the move's, so each round counts."""
        p = step.params
        deadline = time.monotonic() + p["timeout_ms"] / 1000
        nodes = self.plan_nodes()
        probes = 0

        def probe(node_id):
            return sum(self.admin(node_id).conn_used(hg, host, port) for hg, host, port in p["targets"])

        while True:
            results = list(self.pool.map(capture(probe), nodes))
            for _, error in results:
                if error is not None:
                    raise error
            used = {nid: value for nid, (value, _) in zip(nodes, results)}
            probes += 1
            detail.update(conn_used=used, probes=probes)
            if all(v == 0 for v in used.values()):
                return
            if time.monotonic() >= deadline:
                break
            self.beat()
            time.sleep(p["poll_ms"] / 1000)
        still = sum(used.values())
        if p["on_timeout"] != OnDrainTimeout.OFFLINE_HARD:
            where = ", ".join(f"{host}:{port} in hostgroup {hg}" for hg, host, port in p["targets"])
            raise StepFailed(
                f"drain timed out after {p['timeout_ms']} ms with {still} connection(s) still in use "
                f"on {where}; rolling back as chosen (no session was cut)"
            )
        detail["offline_hard"] = {"sessions_cut": still}
        self.run_proxysql(step, executed, part=p["offline_hard"])
        if p.get("then_sync"):  # written on one node only (sync_hold.propagate): its peers pull it
            self.wait_sync(p["then_sync"], detail.setdefault("sync", {}))

    def wait_sync(self, params, detail):
        """ProxySQL Cluster carries the change (sync_hold.propagate): until every peer's checksum of each module the
        plan loaded equals the origin's (runtime_checksums_values; 2.6+ also mysql_servers_v2, on which a peer
        decides to pull mysql_servers). Both read every 100 ms; a peer that does not answer is not there yet."""
        names = set(params["modules"]) | ({"mysql_servers_v2"} if "mysql_servers" in params["modules"] else set())
        origin, peers = params["origin"], params["peers"]
        for node_id in [origin, *peers]:
            self.admin(node_id)  # built here: node threads never touch the database
        start = time.monotonic()
        deadline = start + params["timeout_ms"] / 1000

        def read(node_id):
            return {c.name: (int(c.epoch or 0), c.checksum) for c in self.admin(node_id).checksums() if c.name in names}

        rounds = 0
        while True:
            want = read(origin)  # the origin not answering fails the step: nothing to wait for
            behind, never = {}, []
            for node_id, (got, error) in zip(peers, self.pool.map(capture(read), peers)):
                name = params["names"].get(node_id, node_id)
                if error is not None:
                    behind[name] = f"does not answer ({error.message if isinstance(error, ClientError) else error})"
                    continue
                differ = sorted(n for n in want.keys() & got.keys() if want[n][1] != got[n][1])
                if differ:
                    behind[name] = "not pulled yet: " + ", ".join(differ)
                # ProxySQL pulls only a newer epoch: a peer that loaded in the same second or later never pulls
                never += [
                    f"{name} {n} (epoch {got[n][0]}, {params['names'][origin]}'s {want[n][0]})"
                    for n in differ
                    if got[n][0] >= want[n][0]
                ]
            rounds += 1
            if never:
                detail.update(rounds=rounds, behind=behind, waited_ms=_ms(start))
                # The rollback's LOAD on the origin must come in a later second than the peer's: in the same one the two
                # would share an epoch with different checksums, which ProxySQL never resolves (measured on real 2.7.1).
                # A newer epoch makes the origin's undone state the one its peers pull.
                time.sleep(1.05 - time.time() % 1)
                raise StepFailed(
                    "ProxySQL Cluster will not carry the change: a peer loaded the same module in the "
                    "same second or later, and ProxySQL pulls only a newer epoch: " + "; ".join(never)
                )
            detail.update(rounds=rounds, behind=behind, waited_ms=_ms(start))
            if not behind:
                return
            if time.monotonic() >= deadline:
                raise StepFailed(
                    f"ProxySQL Cluster did not carry the change from {params['names'][origin]} within "
                    f"{params['timeout_ms']} ms: " + "; ".join(f"{n}: {w}" for n, w in behind.items())
                )
            self.beat()
            time.sleep(0.1)

    def plan_nodes(self):
        nodes = set()
        for step in self.plan.steps:
            nodes.update(step.nodes)
        return sorted(nodes, key=int)

    def plan_backends(self):
        """The backends the plan's catch-up and promotion talk to."""
        servers = set()
        for step in self.plan.steps:
            talks_to = step_handler(step.kind).backends
            servers.update(talks_to(step) if talks_to else ())
        return sorted(servers)

    def wait_catchup(self, step, detail):
        """The new writer has applied everything the old one committed (wsrep_last_committed): both read
        at once, then the new one again until it has."""
        p = step.params
        old, new = self.backend(p["old"]), self.backend(p["new"])
        (target, error), (applied, new_error) = self.pool.map(capture(_last_committed), (old, new))
        if error or new_error:
            raise error or new_error
        deadline = time.monotonic() + p["timeout_ms"] / 1000
        while True:
            detail.update(old_writer_last_committed=target, new_writer_last_committed=applied)
            if applied is not None and target is not None and applied >= target:
                return
            if time.monotonic() >= deadline:
                raise StepFailed(
                    f"the new writer applied up to {applied}, the old one committed {target}: "
                    f"not caught up within {p['timeout_ms']} ms"
                )
            time.sleep(0.002)
            applied = new.last_committed()

    def backend_actions(self, step, executed):
        for action in step.params["actions"]:
            client = self.backend(action["server"])
            if action["action"] == "read_only":
                before = client.read_only()
                if before != action["value"]:
                    client.set_read_only(action["value"])
                executed.append(
                    {"server": action["server"], "action": "read_only", "from": before, "to": action["value"]}
                )
            elif action["action"] == "promote_replica":
                self.promote_replica(action, executed)
            elif action["action"] == "group_replication_set_as_primary":
                uuid = client.server_uuid()
                client.group_replication_set_as_primary(uuid)
                executed.append(
                    {"server": action["server"], "action": "group_replication_set_as_primary", "uuid": uuid}
                )
            else:
                raise StepFailed(f"unknown backend action {action['action']!r}")

    def promote_replica(self, action, executed):
        """MariaDB GTID: the new primary catches up with the old one's binlog, stops replicating; the
        other replicas and the old primary replicate from it. (read_only is set by the actions around.)"""
        cluster = self.op.cluster
        new, old = Server.objects.get(pk=action["server"]), Server.objects.get(pk=action["old_primary"])
        position = self.backend(old.pk).gtid_binlog_pos()
        timeout = action.get("timeout_s", 10)
        if not self.backend(new.pk).wait_for_gtid(position, timeout):
            raise StepFailed(f"{new} did not reach the old primary's GTID position {position} within {timeout} s")
        self.backend(new.pk).stop_replication(reset=True)
        executed.append({"server": new.pk, "action": "promote_replica", "old_primary": old.pk, "gtid": position})
        for other in cluster.servers.exclude(pk=new.pk):
            if other.pk != old.pk:
                self.backend(other.pk).wait_for_gtid(position, timeout)
            else:
                self.backend(other.pk).take_own_binlog_as_replica_position()
            self.backend(other.pk).replicate_from(
                new.hostname, new.port, cluster.replication_user, cluster.replication_password
            )
            executed.append({"server": other.pk, "action": "replicate_from", "primary": new.pk})

    def demote_back(self, entry):
        """Undo promote_replica: everyone replicates from the old primary again."""
        cluster = self.op.cluster
        old = Server.objects.get(pk=entry["old_primary"])
        self.backend(old.pk).stop_replication(reset=True)
        for other in cluster.servers.exclude(pk=old.pk):
            self.backend(other.pk).replicate_from(
                old.hostname, old.port, cluster.replication_user, cluster.replication_password
            )

    def verify(self, step, detail):
        """Each expected row against the node's runtime: [hg, host, port, want], want being a status, the
        row's fields (every one compared), or None for no row."""
        problems = []
        for node_id, expected in step.params.get("expect", {}).items():
            if node_id in self.unfinished:
                continue  # it missed statements past the point of no return: they are retried when it answers
            # Configured status: a row ProxySQL shunned again right after our LOAD (its backend still
            # failing) holds what we wrote; SHUNNED is its verdict, shown on the monitoring pages.
            rows = self.read_or_defer(node_id, lambda admin: admin.servers("runtime"))
            if rows is None:
                continue
            runtime = {r.key: configured(r) for r in rows}
            for hg, host, port, want in expected:
                got = runtime.get((hg, host, port))
                status = (got or {}).get("status")
                if isinstance(want, dict):
                    if got != want:
                        problems.append(
                            f"node {node_id}: hg {hg} {host}:{port} is {_fields_text(got)}, "
                            f"expected {_fields_text(want)}"
                        )
                    continue
                if status == "OFFLINE_HARD" and want == "OFFLINE_SOFT" and step.params.get("allow_offline_hard"):
                    continue
                if status != want:
                    problems.append(
                        f"node {node_id}: hg {hg} {host}:{port} is {status or 'absent'}, expected {want or 'absent'}"
                    )
        if "rows" in step.params:
            problems += self.verify_rows(step.params)
        if "others" in step.params:
            problems += shared.differences(self.others_before, self.admin, step.params["others"])
        detail["problems"] = problems
        if problems:
            raise StepFailed(f"{step.params.get('layer', 'runtime')} differs from the plan: " + "; ".join(problems))

    def read_or_defer(self, node_id, read):
        """A verify's read of one node. Past the point of no return a node that does not answer fails nothing:
        it joins the nodes whose statements are kept for later (as in run_past_no_return), its check left out,
        and returns None; before it, the error rolls the operation back."""
        try:
            return read(self.admin(node_id))
        except ClientError as exc:
            self.defer(node_id, exc)
            return None

    def defer(self, node_id, exc):
        """A check's node that does not answer past the point of no return joins the nodes whose statements are kept
        for later (finish pending); any other error, or before that point, is raised."""
        if not (self.op.point_of_no_return and isinstance(exc, ClientError) and exc.retryable):
            raise exc
        name = next((s.nodes[node_id].get("name", node_id) for s in self.plan.steps if node_id in s.nodes), node_id)
        self.unfinished.setdefault(node_id, {"name": name, "error": str(exc), "statements": []})

    def verify_rows(self, params):
        """Whole rows and variables (a repair): each node's runtime (or the layer given: disk) in the given
        hostgroups holds exactly these rows, as configuration, and these variable values."""
        problems = []
        hostgroups = set(params["hostgroups"])
        layer = params.get("layer", "runtime")
        for node_id, rows in params["rows"].items():
            if node_id in self.unfinished:
                continue  # as in verify()
            variables = params["variables"].get(node_id, {})
            read = self.read_or_defer(
                node_id,
                lambda admin: (
                    admin.servers(layer),
                    admin.global_variables(list(variables), layer=layer) if variables else {},
                ),
            )
            if read is None:
                continue
            want = {(hg, host, port): fields for hg, host, port, fields in rows}
            have = {r.key: configured(r) for r in read[0] if r.hostgroup_id in hostgroups}
            for key in sorted(want.keys() | have.keys()):
                if want.get(key) != have.get(key):
                    problems.append(
                        f"node {node_id}: {layer} hg {key[0]} {key[1]}:{key[2]} is {have.get(key) or 'absent'}, "
                        f"expected {want.get(key) or 'absent'}"
                    )
            values = read[1]
            problems += [
                f"node {node_id}: {layer} {name} is {values.get(name)}, expected {value}"
                for name, value in variables.items()
                if values.get(name) != value
            ]
        return problems

    def inventory(self, step, detail):
        """The operation's change becomes the cluster's next configuration version, and the inventory follows it:
        what that is, the operation kind's spec says (OperationSpec.records: inventory.py)."""
        kind_spec(self.op.kind).records(self, step.params, detail)

    def execute_step(self, step, row):
        executed, detail = [], {}
        try:  # its kind's handler, registered by the app that owns it (steps.py: this app's)
            step_handler(step.kind).execute(self, step, row, executed, detail)
        finally:
            row.executed, row.detail = executed, detail

    def restore_sync_hold(self, rows):
        """A failure past the point of no return skips the plan's last steps, the ProxySQL Cluster sync restore among
        them (sync_hold.py): left so, the nodes would never pull from each other again. The restore runs now when the
        hold was taken; a node that does not answer keeps it for the retry (self.unfinished), as a finish does."""
        by_key = {r.key: r for r in rows}
        step = next((s for s in self.plan.steps if s.key == RESTORE_KEY), None)
        hold, row = by_key.get(HOLD_KEY), by_key.get(RESTORE_KEY)
        if step is None or row is None or row.state == StepState.DONE or hold.state != StepState.DONE:
            return
        start = time.monotonic()
        executed, detail = [], {"after_failure": True}
        try:
            self.run_past_no_return(step, executed, detail)
            state = StepState.DONE
        except Exception as exc:  # the operation's own error stands; this one is said on the step
            log.exception("operation %s: the ProxySQL Cluster sync restore failed", self.op.pk)
            detail["error"], state = str(exc), StepState.FAILED
        OperationStep.objects.filter(pk=row.pk).update(
            state=state, executed=executed, detail=detail, finished_at=timezone.now(), duration_ms=_ms(start)
        )

    # -- rollback ----------------------------------------------------------------------------------
    def rollback(self, rows):
        """Undo every step that started, newest first; on each node its statements in order, the nodes in
        parallel. A node that stops answering keeps the rest of its statements, in order, for later:
        returns (backend problems, {node_id: {"name", "statements": [{"step", "sql"}], "error"}})."""
        problems, pending, still_held = [], {}, {}
        steps = {s.key: s for s in self.plan.steps}
        for row in sorted(rows, key=lambda r: -r.index):
            if row.state not in (StepState.DONE, StepState.RUNNING, StepState.FAILED):
                continue
            step = steps[row.key]
            handler = step_handler(step.kind)
            part = handler.ran_on(step, row) if handler.ran_on else step.nodes
            if step.key == HOLD_KEY and pending:
                still_held = {n: spec for n, spec in part.items() if n not in pending}
                part = {n: spec for n, spec in part.items() if n in pending}
            undone = self.undo_on_nodes(step, part, pending)
            try:
                if handler.undo:  # what it changed besides its ProxySQL statements (backends, a DR channel)
                    undone += handler.undo(self, step, row)
            except ClientError as exc:
                problems.append(f"step {step.key} (backends): {exc}")
                continue
            left = [pending[n]["name"] for n in part if n in pending]
            left += [spec.get("name", n) for n, spec in still_held.items() if step.key == HOLD_KEY]
            OperationStep.objects.filter(pk=row.pk).update(
                state=StepState.ROLLED_BACK if not left else row.state,
                detail={**row.detail, "rollback": undone, **({"rollback_pending_on": left} if left else {})},
            )
        self.save_again(rows, pending)
        self.keep_held(still_held, pending)
        problems += self.sync_again(rows, pending)
        return problems, pending

    def keep_held(self, still_held, pending):
        """While a node has not taken its undo (paused, say), the nodes that did keep their ProxySQL Cluster sync hold:
        a paused ProxySQL runs its in-flight LOAD when it resumes, the newest change of the pair, and a peer whose sync
        was restored would pull it (and save it to its disk) before that node's undo runs. Their restore is kept as a
        pending row of its own, run by the retry only once every other node's undo ran (pending_rows.waits_for)."""
        if not still_held:
            return
        waiting_for = ", ".join(p["name"] for p in pending.values())
        save_admin = [SAVE_ADMIN] if saves_admin_variables(self.plan) else []  # as the restore step would
        for node_id, spec in still_held.items():
            pending[node_id] = {
                "name": spec.get("name", node_id),
                "statements": [{"step": HOLD_KEY, "sql": sql} for sql in spec["rollback"] + save_admin],
                "error": f"its ProxySQL Cluster sync stays held until {waiting_for} took the undo "
                "(restored by the retry then)",
            }

    def sync_again(self, rows, pending):
        """A plan carried by ProxySQL Cluster (sync_hold.propagate) is undone on its origin only: its peers pull the
        undone state the same way, waited for here (after every undo); a peer that has not is said, never hidden.
        While the origin's own undo is pending, the peers pull it once the retry has run it."""
        waits = [
            (r, s) for r, s in ((r, next(s for s in self.plan.steps if s.key == r.key)) for r in rows) if _sync_wait(s)
        ]
        started = [r.index for r in rows if r.state in (StepState.DONE, StepState.RUNNING, StepState.FAILED)]
        if not waits or not started:
            return []
        row, step = waits[0]
        params = _sync_wait(step)
        if params["origin"] in pending:
            return []
        detail = {}
        try:
            self.wait_sync(params, detail)
            problems = []
        except (StepFailed, ClientError) as exc:
            problems = [f"ProxySQL Cluster: {exc}"]
        current = OperationStep.objects.get(pk=row.pk).detail
        OperationStep.objects.filter(pk=row.pk).update(detail={**current, "rollback_sync": detail})
        return problems

    def save_again(self, rows, pending):
        """A rollback past a SAVE saves again: the disk a started step saved (done, or in flight: a paused node
        runs it when it resumes) would keep the undone change, and a restart loads disk. Each such module is
        saved once more on its node at the very end, after every undo restored memory; on a pending node the
        SAVE goes after its other statements, so that its retry ends with it."""
        steps = {s.key: s for s in self.plan.steps}
        started = [r for r in rows if r.state in (StepState.DONE, StepState.RUNNING, StepState.FAILED)]
        part = {}
        for row in sorted(started, key=lambda r: r.index):
            for node_id, spec in steps[row.key].nodes.items():
                entry = part.setdefault(node_id, {"name": spec.get("name", node_id), "rollback": []})
                for sql in [*spec["sql"], *spec["rollback"]]:
                    if SAVE_TO_DISK.match(sql) and sql not in entry["rollback"]:
                        entry["rollback"].append(sql)
        part = {node_id: spec for node_id, spec in part.items() if spec["rollback"]}
        if not part:
            return
        saved = self.undo_on_nodes(Step("save again", "Save again what was saved", PROXYSQL, part), part, pending)
        newest = max(started, key=lambda r: r.index)
        detail = OperationStep.objects.get(pk=newest.pk).detail
        OperationStep.objects.filter(pk=newest.pk).update(detail={**detail, "saved_again": saved})

    def undo_on_nodes(self, step, part, pending):
        """One step's rollback statements on each node; a node already in `pending`, or that fails now, has
        them added to its pending statements instead."""
        for node_id in part:
            self.admin(node_id)  # built here: node threads never touch the database

        def on_node(item):
            node_id, spec = item
            if node_id in pending:
                return [], spec["rollback"], None
            done = []
            for i, sql in enumerate(spec["rollback"]):
                try:
                    self.send(node_id, sql, f"rollback {step.key}")
                except ClientError as exc:
                    return done, spec["rollback"][i:], exc
                done.append({"node": spec.get("name", node_id), "sql": sql})
            return done, [], None

        undone = []
        for (node_id, spec), (done, left, error) in zip(part.items(), self.pool.map(on_node, part.items())):
            undone.extend(done)
            if left:
                entry = pending.setdefault(
                    node_id, {"name": spec.get("name", node_id), "statements": [], "error": str(error)}
                )
                entry["statements"] += [{"step": step.key, "sql": sql} for sql in left]
        return undone


def run(operation_id):
    """Execute a confirmed operation (called by the Celery task). Idempotent: a second call finds it
    already claimed and does nothing."""
    claimed = Operation.objects.filter(pk=operation_id, state=OperationState.PENDING).update(
        state=OperationState.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now()
    )
    if not claimed:
        return None
    op = Operation.objects.select_related("cluster").get(pk=operation_id)
    started = time.monotonic()
    refusal = recheck.expired(op)
    runner = None
    if refusal is None:  # planned again now: the guards and statements must still be what was confirmed
        runner = Run(op)
        runner.connect_all(strict=False)  # the re-check reads through the connections the steps will use
        recheck_start = time.monotonic()
        refusal = recheck.changed(op, connections=runner.admins)
        runner.recheck_ms = _ms(recheck_start)
    if refusal is not None:
        recheck.refuse(op, refusal, _ms(started))
        if runner:
            runner.close()
        return op.pk
    rows = list(op.steps.order_by("index"))
    error, for_the_reaper = None, False
    try:
        runner.connect_all()
        runner.others_before = shared.snapshot(runner.admin, runner.plan)
        _run_steps(op, runner, list(zip(runner.plan.steps, rows)))
    except (StepFailed, Cancelled, ClientError) as exc:
        error = str(exc)
    except DatabaseError as exc:
        log.exception("operation %s: the console's database failed", op.pk)
        # Past the point of no return the nodes hold the change: it is not ended failed with its record missing.
        # Left running (no heartbeat), the reaper finishes it once the database answers (_resume).
        for_the_reaper = op.point_of_no_return
        error = f"internal error: {exc!r}"
    except Exception as exc:  # a bug must still end in a consistent state
        log.exception("operation %s failed", op.pk)
        error = f"internal error: {exc!r}"
    finally:
        if not for_the_reaper:
            _finish(op, runner, rows, error, started)
        runner.close()
    return op.pk


def _run_steps(op, runner, pairs):
    """Run these (step, row) pairs in order, each row marked running before and done or failed after."""
    for step, row in pairs:
        runner.beat()
        if step.forward_only and not op.point_of_no_return:
            op.point_of_no_return = True
            Operation.objects.filter(pk=op.pk).update(point_of_no_return=True)
        step_start = time.monotonic()
        OperationStep.objects.filter(pk=row.pk).update(state=StepState.RUNNING, started_at=timezone.now())
        row.state = StepState.RUNNING
        try:
            runner.execute_step(step, row)
        except Exception:
            row.state = StepState.FAILED
            OperationStep.objects.filter(pk=row.pk).update(
                state=StepState.FAILED,
                executed=row.executed,
                detail=row.detail,
                finished_at=timezone.now(),
                duration_ms=_ms(step_start),
            )
            raise
        row.state = StepState.DONE
        OperationStep.objects.filter(pk=row.pk).update(
            state=StepState.DONE,
            executed=row.executed,
            detail=row.detail,
            finished_at=timezone.now(),
            duration_ms=_ms(step_start),
        )
        if step.point_of_no_return:
            op.point_of_no_return = True
            Operation.objects.filter(pk=op.pk).update(point_of_no_return=True)


def _is_check(step):
    """A step that only reads the nodes (a verify): run again before a dead operation is finished."""
    return step_handler(step.kind).check


def _sync_wait(step):
    """The ProxySQL Cluster wait a step does (a wait_sync step, a drain's OFFLINE_HARD written on one node), or None."""
    waits = step_handler(step.kind).sync_wait
    return waits(step) if waits else None


def _resume(op, runner, rows, why):
    """A dead worker's operation past its point of no return is finished, not left failed: its plan is the record
    of what it will record. First the checks it passed are read again (the nodes still hold what it did: a node
    that does not answer keeps its part for later, as in a run), then the steps it had not finished run in order
    (statements past the point of no return, its record step: each idempotent). Returns the error, None when done.
    No outcome leaves the configuration version behind what the nodes run."""
    pairs = list(zip(runner.plan.steps, sorted(rows, key=lambda r: r.index)))
    at = next((i for i, (_, row) in enumerate(pairs) if row.state != StepState.DONE), len(pairs))
    try:
        runner.connect_all(strict=False)
        runner.others_before = shared.snapshot(runner.admin, runner.plan)
        for step, row in pairs[:at]:
            if _is_check(step):
                runner.execute_step(step, row)  # read-only; its row keeps what the worker recorded
        _run_steps(op, runner, pairs[at:])
    except (StepFailed, ClientError) as exc:
        return f"{why}; finishing it failed: {exc}"
    except Exception as exc:  # a bug must still end in a consistent state
        log.exception("operation %s: finishing it failed", op.pk)
        return f"{why}; finishing it failed: internal error: {exc!r}"
    return None


def _fields_text(fields):
    if fields is None:
        return "absent"
    return ", ".join(f"{k}={v}" for k, v in fields.items())


def _last_committed(client):
    """wsrep_last_committed; once more on a new connection when the one opened before the step was lost (a
    backend restarted while the operation waited for its drain answers a fresh connection)."""
    try:
        return client.last_committed()
    except ClientError as exc:
        if not exc.retryable:
            raise
        return client.last_committed()


def _ms(start):
    return round((time.monotonic() - start) * 1000, 2)


def _finish(op, runner, rows, error, started, finished_by=None):
    rows = list(op.steps.order_by("index"))
    timings = {r.key: r.duration_ms for r in rows if r.duration_ms is not None}
    waited = sum(timings.get(k, 0) for k in ("wait_drain", "catch_up", "sync_wait", "wait_monitor"))
    timings.update(
        total_ms=_ms(started),
        waiting_ms=round(waited, 2),
        overhead_ms=round(_ms(started) - waited, 2),
        recheck_ms=getattr(runner, "recheck_ms", None),
    )
    pending = dict(getattr(runner, "unfinished", None) or {})  # nodes that missed steps past the point of no return
    if error is None and getattr(runner, "refused", None):
        error = "; ".join(runner.refused)
    if error is None and pending:  # done everywhere else; retried as a pending rollback is, then done (rollbacks.py)
        state = OperationState.FINISH_PENDING
        error = "done on the other nodes; FINISH PENDING on " + "; ".join(
            f"{p['name']} ({len(p['statements'])} statement(s) past the point of no return not taken: {p['error']})"
            for p in pending.values()
        )
    elif error is None:
        state = OperationState.DONE
    elif op.point_of_no_return:
        state = OperationState.FAILED
        error += " (after the point of no return: not rolled back; check the cluster page)"
        runner.restore_sync_hold(rows)
        pending = dict(runner.unfinished)  # a node that missed the restore keeps it (retried: rollbacks.py)
    else:
        Operation.objects.filter(pk=op.pk).update(state=OperationState.ROLLING_BACK, error=error)
        rollback_start = time.monotonic()
        problems, pending = runner.rollback(rows)
        pending.update(restarts.restarted_nodes(op, runner, rows, pending))  # their undo is checked before it counts
        timings["rollback_ms"] = _ms(rollback_start)  # after total_ms (the run to its failure): the lock was held on
        state = OperationState.CANCELLED if error.startswith("cancelled") else OperationState.ROLLED_BACK
        if pending:  # retried until the node answers (rollbacks.py); the operation ends rolled_back then
            state = OperationState.ROLLBACK_PENDING
            error += "; ROLLBACK PENDING on " + "; ".join(
                f"{p['name']} ({len(p['statements'])} statement(s) not taken: {p['error']})" for p in pending.values()
            )
        if problems:
            state = state if pending else OperationState.FAILED
            error += "; ROLLBACK INCOMPLETE: " + "; ".join(problems)
    # The end state, what is left to retry and the audit row commit together: never an ending the log lacks.
    with transaction.atomic():
        Operation.objects.filter(pk=op.pk).update(
            state=state, error=error or "", finished_at=timezone.now(), timings=timings
        )
        pending_rows.keep(op, pending)
        record(
            f"{op.kind} {state}",
            actor=Actor.of_operation(op),
            cluster=op.cluster,
            target=op.title,
            outcome="success" if state == OperationState.DONE else "failure",
            duration_ms=timings["total_ms"],
            details={
                "operation": op.pk,
                "state": state,
                "error": error,
                "timings": timings,
                **({"finished_by": f"{finished_by}, after its worker stopped"} if finished_by else {}),
                "finish_pending" if state == OperationState.FINISH_PENDING else "rollback_pending": pending,
                "steps": [
                    {"key": r.key, "state": r.state, "ms": r.duration_ms, "executed": r.executed, "detail": r.detail}
                    for r in op.steps.order_by("index")
                ],
            },
        )
    locks.release(op)
    op.refresh_from_db()


def reap_stale(stale_after_s=15):
    """Operations whose worker stopped beating (killed, lost): roll back what they started, or past the point of
    no return finish them (_resume). Called by beat every few seconds."""
    cutoff = timezone.now() - timedelta(seconds=stale_after_s)
    reaped = []
    for op in Operation.objects.filter(state=OperationState.RUNNING, heartbeat_at__lt=cutoff).select_related("cluster"):
        taken = Operation.objects.filter(pk=op.pk, state=OperationState.RUNNING, heartbeat_at__lt=cutoff).update(
            heartbeat_at=timezone.now()
        )
        if not taken:
            continue
        runner = Run(op)
        why = f"the worker running it stopped (no heartbeat for {stale_after_s} s)"
        started = time.monotonic()
        try:
            rows = list(op.steps.order_by("index"))
            # Before the point of no return: rolled back. Past it: finished (the record written with the nodes).
            error = _resume(op, runner, rows, why) if op.point_of_no_return else why
            _finish(op, runner, rows, error, started, finished_by="the reaper" if error is None else None)
        finally:
            runner.close()
        reaped.append(op.pk)
    return reaped
