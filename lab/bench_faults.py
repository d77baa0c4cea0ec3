"""The fault matrix (issue 21): a ProxySQL node paused at every step of a switchover, a drain, a restore, a
configuration change set and a repair, then both nodes restarted; is everything where the inventory says?

    bin/bench-faults [--operations switchover,drain,restore,config,repair] [--steps move,save,none]
                     [--pause-seconds 3] [--latency-ms 50] [--retry-seconds 40]

One row per (operation, fault point). Each row starts from a known state: two fresh ProxySQL admin doubles with a
datadir each (so that a restart loads their disk layer, as a real ProxySQL does), seeded like the lab pair
(lab/demo.py) in front of a Galera lab (the command's own named lab by default), adopted as one cluster through the product's adopt service; the
previous row's doubles are stopped and its cluster is forgotten (rebuilt, not repaired: every row independent).
Then:

1. the operation is planned and confirmed through the product, and run in-process by the executor in a thread;
2. the second double answers every statement `--latency-ms` late (a slow link: it makes each step that talks to
   it last long enough for the pause to land inside it), and is put in hang mode (accepts TCP, never answers;
   its in-flight statement runs when it resumes, as a SIGSTOPped ProxySQL does) as soon as the step's
   OperationStep row has started; where the pause really landed is printed (the step then running);
3. it stays hung `--pause-seconds` (longer than the client's read timeout, PROXYSQL_READ_TIMEOUT), then resumes;
4. the product's own retry (rollbacks.retry_due(), what beat calls every 2 s) runs every 2 s until nothing is
   pending on the cluster (at most `--retry-seconds`);
5. each double is restarted in turn (runtime and memory come back from its disk);
6. read (reads only, through the product's admin client): on both nodes, the cluster's mysql_servers rows in
   memory, runtime and disk, and mysql-auto_increment_delay_multiplex in the three layers, against the
   inventory's rows and the variable's intended value; which backend each node routes writes to.
7. hand SQL: the benchmark types no SQL at a node but reads. When a row is not equal and agreed after the
   restart, the product's repair (every node, from the inventory) runs, the nodes are restarted again and read
   again: "none" = nothing beyond the operation and the product's automatic retries; "none (repair)" = an
   operator's repair through the product brought every layer back; "needed" = still not equal after it: only
   SQL typed at the node would.

A row with no fault ("none") per operation is the control. Prints the machine and the table.

    bin/bench-faults --console [--operations switchover,drain,config,repair] [--faults worker,redis,database,beat]
                     [--steps KEY,...|none] [--stale-seconds 3] [--bound-seconds 60]     (DB=mariadb: on MariaDB)
                     [--real-proxysql 2.7.1]     (real ProxySQL nodes instead of the doubles: RealConsoleFaultMatrix)

The console's own faults instead (issue 39, ConsoleFaultMatrix): the operation queued through Redis to a real Celery
worker, beat running the reaper and the retries, and at the step (a) the worker SIGKILLed with every child and started
again, (b) Redis SIGKILLed and started again empty, (c) the console's database unavailable 10 s, (d) beat stopped 30 s.
A supervisor restarts any process that exits, as systemd's Restart= does. Read after: the layers equal, intent (the
latest version) equal to the nodes, the writer agreed, and the time from the console back to the operation resolved.
"""

import contextlib
import os
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.db import close_old_connections

from apps.audit.actor import Actor
from apps.clients.proxysql import ProxySQLAdmin, configured, configured_status
from apps.configuration import adoption as adopt
from apps.configuration.services import versioned_variables
from apps.fleet.drift import MANAGED_VARIABLES, intended_rows
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.operations import drain, executor, pending_rows, repair, rollbacks, services, switchover
from apps.operations.choices import OperationState
from apps.operations.models import Operation, OperationStep
from lab import demo
from lab.bench_config import free_ports
from lab.proxysql_double import DoubleServer, ProxySQLDouble
from lab.statement_hooks import at_statement

KINDS = ("switchover", "drain", "restore", "config", "repair")
NO_FAULT = "none"
RETRY_EVERY_S = 2  # as beat schedules rollbacks.retry_due()
RULE = "fault matrix benchmark"
NEW_WEIGHT = 12345  # the weight the change set and the repair give one reader row (hostgroup 101, second backend)


@dataclass
class Row:
    kind: str
    step: str
    landed: str = ""  # the step running when the node was paused, as read right after
    state: str = ""  # the operation's end state (as the executor left it)
    after_retries: str = ""  # its state once the product's retries are over
    pending_left: int = 0  # PendingRollback rows still open after the retries
    before: str = ""  # "equal" or what differs, after the retries, before the restarts
    layers: str = ""  # "equal" or what differs, after the restarts
    writer: str = ""  # "agreed (PORT)" or who routes where, after the restarts
    hand_sql: str = ""
    notes: list = field(default_factory=list)
    equal: bool = False
    agreed: bool = False

    def cells(self):
        after = self.after_retries + (f" ({self.pending_left} still pending)" if self.pending_left else "")
        return [
            self.kind,
            self.step,
            self.landed or "-",
            self.state,
            after,
            self.before,
            self.layers,
            self.writer,
            self.hand_sql,
        ]


HEADER = [
    "operation",
    "paused at",
    "pause landed in",
    "operation state",
    "after the retries",
    "layers equal before restart",
    "layers equal after restart",
    "writer after restart",
    "hand SQL",
]


def table(rows, header=HEADER):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row.cells()) + " |" for row in rows]
    return "\n".join(lines)


class FaultMatrix:
    """Runs rows of the matrix. Needs the Galera lab up, a database, and settings.REDIS_URL reachable (the retry
    reads the latest-state documents)."""

    enqueue = False  # run in-process by the executor in a thread (the console matrix: queued to a real worker)

    def __init__(self, pause_s=3.0, latency_ms=50, retry_s=40, out=print, lab=None):
        """`lab`: the GaleraLab the doubles front (the default lab when None); each row waits until it is healthy."""
        self.pause_s, self.latency_ms, self.retry_s, self.out = pause_s, latency_ms, retry_s, out
        self.lab = lab
        self.ports = [n.port for n in lab.nodes] if lab is not None else list(demo.GALERA_PORTS)
        self.drained_port = self.ports[2]  # the reader the drain and restore rows take out and back
        self.weight_row = (101, "127.0.0.1", self.ports[1])  # the row whose weight the change set and the repair move
        self.server = None  # the doubles' server, started with the first row
        self.doubles, self.dirs, self.cluster = [], [], None
        self.serial = 0
        self._change_set = None  # (pk, ChangeSet) of the change set whose plan is being confirmed

    def close(self):
        self.teardown()
        if self.server is not None:
            self.server.stop()

    # -- a known state: fresh doubles, adopted ------------------------------------------------------------
    def setup(self):
        self.teardown()
        self.serial += 1
        self.doubles = self.start_nodes()
        for d in self.doubles:
            demo.admin_sql(
                d.port, *demo.seed_statements(backend_ports=self.ports)
            )  # LOADed and SAVEd: the three layers agree
        name = f"faults-{os.getpid()}-{self.serial}"
        for i, d in enumerate(self.doubles, 1):
            with ProxySQLAdmin("127.0.0.1", d.port, "admin", "admin") as admin:
                snapshot, monitor = adopt.read_snapshot(admin), adopt.read_monitor_credentials(admin)
            plan = adopt.plan_adoption(
                snapshot, cluster_name=name, node_name=f"p{i}", admin_host="127.0.0.1", admin_port=d.port
            )
            if not plan.ok:
                raise RuntimeError(f"adoption refused: {plan.errors}")
            adopt.apply_adoption(
                plan, admin_user="admin", admin_password="admin", monitor=monitor, actor=Actor.rule(RULE)
            )
        self.cluster = Cluster.objects.get(name=name)
        return self.cluster

    def start_nodes(self):
        """The row's two fresh ProxySQL nodes: doubles with a datadir each, the second answering latency_ms late."""
        if self.server is None:
            self.server = DoubleServer().start_background()
        self.dirs = [tempfile.mkdtemp(prefix=f"bench-faults-{i}-") for i in (1, 2)]
        doubles = [ProxySQLDouble(port=0, server=self.server, datadir=d).start() for d in self.dirs]
        doubles[1].set_mode("normal", latency_ms=self.latency_ms)
        return doubles

    @property
    def second(self):
        return self.doubles[1]

    def teardown(self):
        for d in self.doubles:
            d.stop()
        for path in self.dirs:
            shutil.rmtree(path, ignore_errors=True)
        self.doubles, self.dirs = [], []
        if self.cluster is not None:
            forget(self.cluster)
            self.cluster = None

    # -- the operations ---------------------------------------------------------------------------------
    def plan(self, kind):
        """The operation's plan from the cluster as it is now (with the setup a kind needs run first)."""
        cluster = self.cluster
        if kind == "switchover":
            writer = switchover.current_writer(cluster).server
            target = Server.objects.filter(cluster=cluster).exclude(pk=writer.pk).order_by("port").first()
            return switchover.plan_switchover(cluster, target, lower_autoinc=True, drain_timeout_ms=3000)
        if kind == "drain":
            return drain.plan_drain(Server.objects.get(cluster=cluster, port=self.drained_port), drain_timeout_ms=3000)
        if kind == "restore":
            setup = self.confirm(
                drain.plan_drain(Server.objects.get(cluster=cluster, port=self.drained_port), drain_timeout_ms=3000)
            )
            executor.run(setup.pk)
            setup.refresh_from_db()
            if setup.state != OperationState.DONE:
                raise RuntimeError(f"the restore row's drain ended {setup.state}: {setup.error}")
            return drain.plan_restore(Server.objects.get(cluster=cluster, port=self.drained_port))
        if kind == "config":
            return self.change_set_plan()
        if kind == "repair":
            # Intent moves a weight (an admin's edit of the intended rows: the next version, the inventory follows):
            # both nodes now differ from it, and the repair of every node writes it.
            from apps.configuration import services as config

            config.record_version(
                cluster,
                lambda parent: config.with_servers(
                    parent.content,
                    {self.weight_row: {**config.servers_of(parent.content)[self.weight_row], "weight": NEW_WEIGHT}},
                ),
                actor=Actor.rule(RULE),
                reason="a weight moved for the repair row",
                source="admin",
            )
            return repair.plan_repair(cluster)
        raise ValueError(kind)

    def change_set_plan(self):
        from django.contrib.auth import get_user_model

        from apps.configuration import services as config
        from apps.configuration.models import ChangeSet
        from apps.configuration.change_set import plan_change_set

        user, _ = get_user_model().objects.get_or_create(username="bench-faults")
        cs = config.start_change_set(self.cluster, actor=Actor.command(user), reason="fault matrix: one weight")
        row = next(
            r
            for r in cs.base.content["mysql_servers"]
            if (r["hostgroup_id"], r["hostname"], r["port"]) == self.weight_row
        )
        config.add_edit(
            cs,
            {
                "op": "upsert",
                "table": "mysql_servers",
                "key": list(self.weight_row),
                "row": {**row, "weight": NEW_WEIGHT},
            },
            actor=Actor.command(user),
        )
        plan, collector = plan_change_set(cs)
        collector.save()
        self._change_set = (cs.pk, ChangeSet)
        return plan

    def confirm(self, plan):
        if not plan.guards_passed:
            raise Refused("; ".join(f"{g.label} ({g.value})" for g in plan.failed_guards))
        op = services.save_plan(plan, actor=Actor.rule(RULE))
        if getattr(self, "_change_set", None):
            pk, ChangeSet = self._change_set
            ChangeSet.objects.filter(pk=pk).update(state=ChangeSet.State.PLANNED, operation=op)
            self._change_set = None
        return services.confirm(op, actor=Actor.rule(RULE), enqueue=self.enqueue)

    def step_keys(self, kind):
        """The plan's step keys for this kind (planned on a fresh cluster, not run)."""
        self.setup()
        try:
            return [s.key for s in self.plan(kind).steps]
        finally:
            self._change_set = None
            self.teardown()

    # -- one row ----------------------------------------------------------------------------------------
    def row(self, kind, step):
        row = Row(kind, step)
        self.wait_for_lab(row)
        self.setup()
        try:
            self._change_set = None
            try:
                op = self.confirm(self.plan(kind))
            except Refused as exc:
                row.state = f"refused: {exc}"
                return row
            worker = threading.Thread(target=_execute, args=(op.pk,), daemon=True)
            with self.armed(op, step):
                worker.start()
                if step != NO_FAULT:
                    row.landed = self.pause_at(op, step, worker)
                    row.notes += self.__dict__.pop("seen_at_resume", [])
                worker.join(120)
            if worker.is_alive():
                row.notes.append("the executor was still running 120 s after the resume")
            op.refresh_from_db()
            row.state = op.state
            self.retry(row, op)
            op.refresh_from_db()
            row.after_retries = op.state
            row.pending_left = pending_rows.open_rows(self.cluster).count()
            before = Row(kind, step)
            self.judge(before)
            row.before = before.layers
            row.notes += [f"before the restart: {n}" for n in before.notes]
            for d in self.doubles:
                d.restart()
            self.judge(row)
            if row.equal and row.agreed:
                row.hand_sql = "none"
            else:
                row.hand_sql = self.repaired(row)
            return row
        finally:
            row.notes += [
                f"{getattr(d, 'name', d)} crashed in ProxySQL's own start-up {n} time(s) so far and was "
                f"started again (sysown/proxysql#3233)"
                for d in self.doubles
                if (n := getattr(d, "init_crashes", 0))
            ]
            self.out(
                f"   {row.kind} paused at {row.step}: "
                + "; ".join(str(c) for c in row.cells()[2:])
                + "".join(f"\n      {n}" for n in row.notes)
            )

    def wait_for_lab(self, row, timeout=180):
        """Reads only: the Galera lab healthy before a row starts (a row is not judged on a lab someone else disturbs)."""
        if self.lab is None:
            return
        start = time.monotonic()
        while not self.lab.is_healthy():
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"the Galera lab was not healthy within {timeout} s")
            time.sleep(1)
        if time.monotonic() - start > 0.5:
            row.notes.append(f"waited {time.monotonic() - start:.0f} s for the Galera lab to be healthy first")

    @contextlib.contextmanager
    def armed(self, op, step):
        """A fault that must land inside one statement is armed here, before the worker starts (RealFaultMatrix)."""
        yield

    @staticmethod
    def wait_started(op, step, worker):
        """Until `step` of the operation has started: None, or why it never did."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = dict(OperationStep.objects.filter(operation=op).values_list("key", "state"))
            if states.get(step, "pending") != "pending":
                return None
            if not worker.is_alive():
                return f"not reached (operation {Operation.objects.get(pk=op.pk).state})"
            time.sleep(0.001)
        return "not reached within 60 s"

    @staticmethod
    def running(op):
        """The steps running now, or where the operation is."""
        keys = list(OperationStep.objects.filter(operation=op, state="running").values_list("key", flat=True))
        return ", ".join(keys) or f"after the steps (operation {Operation.objects.get(pk=op.pk).state})"

    def pause_at(self, op, step, worker):
        """Hang the second double as soon as `step` has started; resume it pause_s later. Returns where it landed."""
        missed = self.wait_started(op, step, worker)
        if missed:
            return missed
        engine = self.second.engine
        self.second.set_mode("hang")
        mark = engine.log_seq
        try:
            landed = self.running(op)
            time.sleep(self.pause_s)
        finally:
            self.second.set_mode("normal")
            resumed = time.time()
        # Where the second node was: the statement in flight (sent before the pause: it ran during the pause with its
        # answer held, or it runs as the node resumes), or else the last one it had answered. Its statement log says
        # (a statement is logged when it runs; the retry's statements come seconds later).
        time.sleep(self.latency_ms / 1000 + 0.3)
        log = list(engine.log)
        before = [e["sql"] for e in log if e["seq"] <= mark]
        during = [e["sql"] for e in log if e["seq"] > mark and e["t"] < resumed + self.latency_ms / 1000 + 0.2]
        if during:
            landed += f"; in flight on p2: {_short(during[0])}"
        elif before:
            landed += f"; p2 had answered {_short(before[-1])}"
        return landed

    def retry(self, row, op):
        """The product's retry, as beat runs it every 2 s, until nothing is pending on the cluster (bounded)."""
        deadline = time.monotonic() + self.retry_s
        while pending_rows.open_rows(self.cluster).exists() and time.monotonic() < deadline:
            for outcome in rollbacks.retry_due():
                row.notes.append(f"retry: {outcome}")
            time.sleep(RETRY_EVERY_S)

    def judge(self, row):
        """Reads only: every node's three layers against the inventory, and who each node routes writes to."""
        cluster = self.cluster
        cluster.refresh_from_db()
        intended = intended_rows(cluster)
        hostgroups = set(cluster.hostgroup_ids())
        versioned = versioned_variables(cluster)
        differ, writers = [], {}
        for node in cluster.proxysql_nodes.order_by("pk"):
            with ProxySQLAdmin.for_node(node) as admin:
                want = {
                    k: v for k, (v, _) in versioned.items() if v is not None
                }  # the version: the one record of intent
                for layer in ("memory", "runtime", "disk"):
                    rows = admin.servers(layer)
                    have = {r.key: configured(r) for r in rows if r.hostgroup_id in hostgroups}
                    values = admin.global_variables(MANAGED_VARIABLES, layer=layer)
                    wrong = [
                        f"hg {k[0]} {k[2]}"
                        for k in sorted(intended.keys() | have.keys())
                        if intended.get(k) != have.get(k)
                    ]
                    wrong += [
                        f"{name} {values.get(name)} (want {value})"
                        for name, value in want.items()
                        if values.get(name) != value
                    ]
                    if wrong:
                        differ.append((node.name, layer))
                        row.notes.append(f"{node.name} {layer} differs from the inventory: {', '.join(wrong)}")
                    if layer == "runtime":
                        writers[node.name] = sorted(
                            r.port
                            for r in rows
                            if r.hostgroup_id == cluster.writer_hostgroup and configured_status(r.status) == "ONLINE"
                        )
        row.equal = not differ
        per_node = {}
        for name, layer in differ:
            per_node.setdefault(name, []).append(layer)
        row.layers = "equal" if row.equal else "no: " + "; ".join(f"{n} {'+'.join(ls)}" for n, ls in per_node.items())
        inventory_writer = sorted(
            k[2] for k, v in intended.items() if k[0] == cluster.writer_hostgroup and v["status"] == "ONLINE"
        )
        seen = {tuple(w) for w in writers.values()}
        row.agreed = len(seen) == 1 and len(next(iter(seen))) == 1
        if row.agreed:
            port = next(iter(seen))[0]
            row.writer = f"agreed ({port})" + (
                ""
                if [port] == inventory_writer
                else f", inventory says {'/'.join(map(str, inventory_writer)) or 'none'}"
            )
        else:
            row.writer = "not agreed: " + ", ".join(
                f"{n} {'/'.join(map(str, w)) or 'none'}" for n, w in writers.items()
            )

    def repaired(self, row):
        """The product's repair of every node from the inventory, then restart and read again."""
        plan = repair.plan_repair(self.cluster)
        try:
            op = self.confirm(plan)
        except Refused as exc:
            row.notes.append(f"the repair was refused: {exc}")
            return "needed"
        executor.run(op.pk)
        op.refresh_from_db()
        if op.state != OperationState.DONE:
            row.notes.append(f"the repair ended {op.state}: {op.error}")
        for d in self.doubles:
            d.restart()
        again = Row(row.kind, row.step)
        self.judge(again)
        row.notes.append(f"after a repair and a restart: layers {again.layers}, writer {again.writer}")
        return "none (repair)" if again.equal and again.agreed else "needed"


# A real ProxySQL's SAVE MYSQL SERVERS TO DISK is, per table, a DELETE FROM disk.<table> then an INSERT INTO
# disk.<table> SELECT * FROM main.<table>, not one transaction: SIGKILLed between the two, its disk keeps no row
# (measured on real 2.7.1: killed 10 ms into a 16 ms SAVE of 20,000 rows, the disk held 0 and the restart loaded 0).
# A kill in the field lands there by chance (polled, about 1 pass in 4 of the save row did); the matrix's "kill" lands
# before p2 runs the step's first statement (its disk as before the SAVE), HALF_SAVED in the write, every time.
HALF_SAVED = "kill in the SAVE's write"
BACK_BEFORE_UNDO = (
    "kill in the SAVE's write, restarted before the rollback reaches it"  # (a fast restart, a slow console)
)
# A pause that ends only after the executor's rollback, a second later (epochs are whole seconds), and the retry more
# than ProxySQL Cluster's 3 checks after that (a late beat): what the pair met 2 times in 5 under load, made certain.
RESUMED_AFTER_ROLLBACK = "pause, resumed after the rollback"
KILLS = ("kill", HALF_SAVED, BACK_BEFORE_UNDO)
SYNC_DUE_S = 4.0  # past 3 checks of 1 s: a peer whose sync is on has pulled a difference by then


def half_saved(datadir):
    """The disk a SAVE MYSQL SERVERS TO DISK killed between its DELETE and its INSERT leaves: no mysql_servers row."""
    db = sqlite3.connect(Path(datadir) / "proxysql.db")
    try:
        with db:
            db.execute("DELETE FROM mysql_servers")
    finally:
        db.close()
    return "(its disk as a SAVE killed between its DELETE and INSERT leaves it: no mysql_servers row)"


class RealFaultMatrix(FaultMatrix):
    """The matrix on REAL ProxySQL nodes (the test suite's real tier): `make_node(name)` starts a fresh real node
    (lab.real_proxysql.RealProxySQL); the fault at a step is `fault`: "pause" (SIGSTOP of its process group, SIGCONT
    pause_s later: it answers what was in flight then) or "kill" (SIGKILL, started again pause_s later from its
    datadir without --initial: it loads its disk, as after a crash), RESUMED_AFTER_ROLLBACK (a pause resumed only once
    the rollback ended, the retry late), or HALF_SAVED (a kill in a SAVE's write: its
    disk's mysql_servers left empty before it starts again), or BACK_BEFORE_UNDO (the same, started again at once,
    before the executor's rollback reaches it). Restarts are real ones (SIGTERM, start)."""

    def __init__(self, make_node, fault="pause", proxysql_cluster=False, **kwargs):
        """make_node(name, peers=None, ports=None) -> a started RealProxySQL; proxysql_cluster: the two nodes form a
        ProxySQL Cluster at ProxySQL's default sync settings (lab.real_proxysql: each lists both in proxysql_servers)."""
        super().__init__(**kwargs)
        self.make_node, self.fault, self.proxysql_cluster = make_node, fault, proxysql_cluster

    def start_nodes(self):
        if not self.proxysql_cluster:
            return [self.make_node(f"p{i}") for i in (1, 2)]
        ports = free_ports(4)
        pairs = [(ports[0], ports[1]), (ports[2], ports[3])]
        peers = {f"p{i}": admin for i, (admin, _) in enumerate(pairs, 1)}
        return [self.make_node(f"p{i}", peers=peers, ports=pair) for i, pair in enumerate(pairs, 1)]

    @contextlib.contextmanager
    def armed(self, op, step):
        """A kill (KILLS) lands as the executor sends p2 its first statement of `step`, in the executor's thread (its
        admin client's run(), the one way a statement reaches a node): every time inside the step, before p2 ran its
        part (HALF_SAVED then leaves p2's disk as a SAVE killed in its write does). Polling the step's state from here
        landed after the step had ended when the machine was busy (a SAVE of a few rows takes milliseconds): CI's
        MariaDB pass once killed p2 past the point of no return, and the operation ended finish_pending.
        BACK_BEFORE_UNDO starts p2 again before the executor sees the statement fail, so its rollback finds p2
        answering (a fast restart, a slow console)."""
        if self.fault not in KILLS or step == NO_FAULT:
            yield
            return
        if self.fault != "kill" and step != "save":
            raise ValueError(f"{self.fault} lands in a save step, not {step}")
        node, seen = self.second, {}
        self.killed = threading.Event()

        def in_step():
            seen["running"] = self.running(op)
            return step in seen["running"].split(", ")

        def kill():
            os.killpg(node.proc.pid, signal.SIGKILL)
            node.proc.wait()
            self.landed = seen["running"] + "; p2 killed"
            if self.fault != "kill":
                self.landed += " " + half_saved(node.datadir)
            if self.fault == BACK_BEFORE_UNDO:
                node.start(fresh=False)
            self.killed.set()

        with at_statement(node.admin_port, kill, when=in_step):  # then sent on the dead connection: the step fails
            yield

    def pause_at(self, op, step, worker):
        node = self.second
        if self.fault in KILLS:
            deadline = time.monotonic() + 60
            while not self.killed.wait(0.05):
                if not worker.is_alive() or time.monotonic() > deadline:
                    return f"not reached (operation {Operation.objects.get(pk=op.pk).state})"
            if self.fault == BACK_BEFORE_UNDO:
                return self.landed + ", and back before the undo"
            time.sleep(self.pause_s)
            node.start(fresh=False)
            return self.landed
        missed = self.wait_started(op, step, worker)
        if missed:
            return missed
        os.killpg(node.proc.pid, signal.SIGSTOP)
        try:
            landed = self.running(op) + "; p2 stopped"
            if self.fault == RESUMED_AFTER_ROLLBACK:
                worker.join(120)
                time.sleep(1.1)
            else:
                time.sleep(self.pause_s)
        finally:
            os.killpg(node.proc.pid, signal.SIGCONT)
        if self.fault == RESUMED_AFTER_ROLLBACK:
            time.sleep(SYNC_DUE_S)  # it runs its in-flight statement now; no retry before a peer could pull it
            landed += ", resumed after the rollback"
            seen = Row("", "")  # p1 before the retry: its layers as the rollback left them, or what it pulled since
            self.judge(seen)
            self.seen_at_resume = [f"before the retry: {n}" for n in seen.notes if n.startswith("p1 ")]
        return landed


def _short(sql):
    return sql if len(sql) <= 40 else sql[:37] + "..."


class Refused(Exception):
    pass


def _execute(op_pk):
    """The worker's part, in a thread of this process."""
    try:
        executor.run(op_pk)
    finally:
        close_old_connections()


def forget(cluster):
    """The cluster out of the inventory with everything that refers to it (the next row adopts the same
    backends: a backend belongs to one cluster)."""
    from apps.configuration.models import ChangeSet, ConfigVersion

    Operation.objects.filter(cluster=cluster).delete()
    ChangeSet.objects.filter(cluster=cluster).delete()
    ConfigVersion.objects.filter(cluster=cluster).update(parent=None)
    ConfigVersion.objects.filter(cluster=cluster).delete()
    Server.objects.filter(cluster=cluster).delete()
    ProxySQLNode.objects.filter(cluster=cluster).delete()
    cluster.delete()


def run(kinds=KINDS, steps=None, pause_s=3.0, latency_ms=50, retry_s=40, out=print, lab=None):
    """Every requested row; returns them. `steps`: step keys and/or "none" (None: every step of each plan, and
    "none" first)."""
    matrix = FaultMatrix(pause_s=pause_s, latency_ms=latency_ms, retry_s=retry_s, out=out, lab=lab)
    rows = []
    try:
        for kind in kinds:
            keys = [NO_FAULT] + matrix.step_keys(kind)
            chosen = keys if not steps else [k for k in keys if k in steps]
            out(f"-- {kind}: steps {', '.join(keys[1:])}; rows {', '.join(chosen) or 'none chosen'}")
            rows += [matrix.row(kind, key) for key in chosen]
    finally:
        matrix.close()
    return rows


# -- the console's own faults (issue 39 item 3) -----------------------------------------------------------
CONSOLE_KINDS = ("switchover", "drain", "config", "repair")
CONSOLE_FAULTS = ("worker", "redis", "database", "beat")
TWO_FAULTS = ("worker+redis", "worker+database", "redis+beat", "worker+beat")  # --faults two: both in the same step


def console_faults(names):
    """The faults asked for: each of CONSOLE_FAULTS, or two of them joined by '+'; 'two' stands for TWO_FAULTS.
    Raises ValueError naming an unknown one."""
    faults = [f for name in names for f in (TWO_FAULTS if name == "two" else (name,))]
    unknown = [f for f in faults if not f or any(part not in CONSOLE_FAULTS for part in f.split("+"))]
    if unknown:
        raise ValueError(", ".join(unknown))
    return faults


REAP_TICK_S = 5  # beat's schedule of operations.reap_stale (controlplane/celery.py)
ENDED = {
    OperationState.DONE,
    OperationState.ROLLED_BACK,
    OperationState.FAILED,
    OperationState.CANCELLED,
    OperationState.EXPIRED,
    OperationState.REFUSED,
}


@dataclass
class ConsoleRow:
    kind: str
    step: str
    fault: str
    landed: str = ""
    state: str = ""
    layers: str = ""  # every node's memory, runtime and disk equal to each other
    intent: str = ""  # the latest configuration version (the inventory) equal to what the nodes run
    writer: str = ""
    hand_sql: str = ""
    resolved_s: float | None = None
    fault_s: float | None = None  # from the fault to the console back (worker ready, Redis, database, beat)
    notes: list = field(default_factory=list)

    def cells(self):
        took = (
            "not within the bound"
            if self.resolved_s is None
            else "during the fault"
            if self.resolved_s == 0
            else f"{self.resolved_s:.1f} s"
        )
        back = "-" if self.fault_s is None else f"{self.fault_s:.1f} s"
        return [
            self.kind,
            self.step,
            self.fault,
            self.landed or "-",
            back,
            self.state,
            self.layers,
            self.intent,
            self.writer,
            self.hand_sql,
            took,
        ]

    def as_targeted(self, within_s):
        """Ended (done, or rolled back before the point of no return), every layer equal, intent equal to the nodes,
        one writer agreed, no hand SQL, resolved within `within_s` (the heartbeat window plus one reaper tick)."""
        return (
            self.state in (OperationState.DONE, OperationState.ROLLED_BACK)
            and (self.layers, self.intent, self.hand_sql) == ("equal", "equal", "none")
            and self.writer.startswith("agreed (")
            and self.resolved_s is not None
            and self.resolved_s <= within_s
        )


CONSOLE_HEADER = [
    "operation",
    "fault at step",
    "fault",
    "landed in",
    "console back after",
    "end state",
    "layers equal",
    "intent = nodes",
    "writer",
    "hand SQL",
    "resolved after",
]


def console_table(rows):
    return table(rows, CONSOLE_HEADER)


class ConsoleProcesses:
    """The console's own processes, real and separate from the benchmark: a redis-server (the broker and the
    latest state; no persistence, as the demo runs it), a Celery worker and Celery beat, each a process group of
    its own (killed whole: SIGKILL of every child). `database`: "sqlite" (the analogue of an unavailable database:
    the write lock held; a writer waits up to the busy timeout) or a lab.mariadb_standalone lab (stopped, started)."""

    def __init__(self, workdir, stale_after_s, database_lab=None, database_url=None):
        """database_url: the console's database for the worker and beat (default: $DATABASE_URL, bin/bench-faults')."""
        self.workdir, self.stale_after_s, self.database_lab = workdir, stale_after_s, database_lab
        self.database_url = database_url or os.environ.get("DATABASE_URL", "")
        self.port = free_ports(1)[0]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.redis = self.worker = self.beat = None
        self.started = 0
        self.held = set()  # processes the fault keeps down (beat for 30 s): the supervisor leaves them
        self.restarts = []  # what the supervisor restarted, as notes for the row running then
        self.lock = threading.Lock()
        self.supervising = None

    def env(self):
        from django.conf import settings

        return {
            **os.environ,
            "REDIS_URL": self.url,
            "CELERY_BROKER_URL": self.url,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "OPERATIONS_STALE_AFTER_S": str(self.stale_after_s),
            "MONITOR_SHARDS": "1",
            "DATABASE_URL": self.database_url,
            "PROXYSQL_READ_TIMEOUT": str(settings.PROXYSQL_READ_TIMEOUT),
        }

    def start_redis(self):
        import subprocess

        self.redis = subprocess.Popen(
            [
                shutil.which("redis-server"),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.workdir,
            ],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_port(self.port)

    def start(self, kind):
        import subprocess
        import sys

        self.started += 1
        log = open(os.path.join(self.workdir, f"{kind}-{self.started}.log"), "w+")
        args = [sys.executable, "-m", "celery", "-A", "controlplane", kind, "--loglevel", "INFO"]
        if kind == "worker":
            args += ["--concurrency", "2", "--without-gossip", "--without-mingle", "-n", f"faults{self.started}@%h"]
        else:
            args += ["--schedule", os.path.join(self.workdir, f"beat-schedule-{self.started}")]
        proc = subprocess.Popen(args, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        proc.log = log
        setattr(self, kind, proc)
        return proc

    def worker_ready(self, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.worker.log.seek(0)
            if " ready." in self.worker.log.read():
                return True
            if self.worker.poll() is not None:
                raise RuntimeError(f"the celery worker exited; see {self.worker.log.name}")
            time.sleep(0.1)
        raise RuntimeError(f"the celery worker was not ready within {timeout} s; see {self.worker.log.name}")

    @staticmethod
    def beat_ready(beat, timeout=60):
        """Until beat has started its scheduler (it boots Django first: ~10 s at load 10)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and beat.poll() is None:
            beat.log.seek(0)
            if "beat: Starting..." in beat.log.read():
                return
            time.sleep(0.1)

    def worker_back(self, worker, mark, timeout=60):
        """After Redis came back: until the worker consumes again, reconnected, or (exited: before
        controlplane/broker.py, kombu's 'Unrecoverable error' closing a channel that held an unacknowledged message;
        or killed by the same step's other fault) restarted and ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            worker.log.seek(mark)
            if "Connected to redis" in worker.log.read():
                return
            if worker.poll() is not None:
                while self.worker is worker and time.monotonic() < deadline:
                    time.sleep(0.2)  # the supervisor's restart
                self.worker_ready()
                return
            time.sleep(0.1)

    def up(self):
        self.start_redis()
        self.start("worker")
        self.start("beat")
        self.worker_ready()
        self.supervising = threading.Event()
        threading.Thread(target=self.supervise, args=(self.supervising,), daemon=True).start()

    def supervise(self, running):
        """What systemd's Restart=always (README) does: a process that exited is started again, and it is said."""
        while running.is_set() is False:
            time.sleep(0.5)
            with self.lock:
                for kind in ("redis", "worker", "beat"):
                    proc = getattr(self, kind)
                    if kind in self.held or proc is None or proc.poll() is None:
                        continue
                    self.restarts.append(f"{kind} exited (code {proc.returncode}): restarted by the supervisor")
                    self.start_redis() if kind == "redis" else self.start(kind)

    @staticmethod
    def kill(proc):
        """SIGKILL of the process and every child (its own process group)."""
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def down(self):
        if self.supervising is not None:
            self.supervising.set()
        with self.lock:
            self.held.update(("redis", "worker", "beat"))
        for proc in (self.beat, self.worker, self.redis):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in (self.beat, self.worker, self.redis):
            if proc is not None:
                try:
                    proc.wait(timeout=20)
                except Exception:
                    self.kill(proc)

    def healthy(self):
        """Every process up (a row starts on a whole console: a worker restarted by the previous row is ready)."""
        for proc in (self.redis, self.worker, self.beat):
            if proc is None or proc.poll() is not None:
                return False
        return True

    # -- the faults: each returns when the fault is over and the process is back (as a supervisor restarts it)
    def fault(self, name):
        """One fault, or two at once ("worker+redis": each begun in the same instant, over when both are)."""
        if "+" in name:
            both = [threading.Thread(target=self.fault, args=(part,), daemon=True) for part in name.split("+")]
            for thread in both:
                thread.start()
            for thread in both:
                thread.join()
            return
        if name == "worker":
            with self.lock:
                self.kill(self.worker)
                self.start("worker")  # the supervisor's restart (systemd Restart=, the demo's)
            self.worker_ready()  # the fault is over when the new worker consumes
        elif name == "redis":
            with self.lock:
                worker = self.worker
                worker.log.seek(0, os.SEEK_END)
                mark = worker.log.tell()
                self.kill(self.redis)
                self.start_redis()
            self.worker_back(worker, mark)
        elif name == "beat":
            with self.lock:
                self.held.add("beat")
                self.kill(self.beat)
            time.sleep(30)
            with self.lock:
                beat = self.start("beat")
                self.held.discard("beat")
            self.beat_ready(beat)  # back when it schedules again, as the worker is when it consumes
        elif name == "database":
            self.database_outage(10)
        else:
            raise ValueError(name)

    def database_outage(self, seconds):
        if self.database_lab is not None:
            self.database_lab.stop(1)
            time.sleep(seconds)
            self.database_lab.up()  # until it accepts the console's user again
            return
        import sqlite3

        from django.db import connection

        path = connection.settings_dict["NAME"]
        holder = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")  # in WAL mode: every writer waits; readers read the last commit
            time.sleep(seconds)
            holder.execute("COMMIT")
        finally:
            holder.close()


def _wait_port(port, timeout=10):
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


class ConsoleFaultMatrix(FaultMatrix):
    """The console's own faults at each step of an operation run by a real Celery worker (confirmed as the page does:
    queued through Redis), with beat running the reaper and the retries: (a) the worker SIGKILLed with every child
    and started again, (b) Redis SIGKILLed and started again (empty), (c) the console's database unavailable 10 s,
    (d) beat stopped 30 s. The nodes are the doubles over the wire (the second one answering latency_ms late so that
    a fault lands inside a step). Each row waits until the operation has ended and nothing is pending (bounded by
    `bound_s`), then reads every node's three layers: equal to each other, equal to the latest configuration version
    (the inventory), one writer agreed. Time to resolution: from the fault to that end."""

    enqueue = True  # confirmed as the page does: queued through Redis, the real worker runs it

    def __init__(self, processes, bound_s=90, **kwargs):
        super().__init__(**kwargs)
        self.processes, self.bound_s = processes, bound_s

    def teardown(self):
        """The cluster forgotten: again when a poll (beat runs them) wrote a sample of its servers meanwhile."""
        from django.db import IntegrityError

        for _ in range(10):
            try:
                return super().teardown()
            except IntegrityError:
                time.sleep(0.5)
        return super().teardown()

    def point_broker(self):
        from django.conf import settings

        from controlplane.celery import app

        settings.REDIS_URL = settings.CELERY_BROKER_URL = self.processes.url
        app.conf.broker_url = self.processes.url
        app._pool = None
        app.amqp._producer_pool = None

    def console_row(self, kind, step, fault):
        row = ConsoleRow(kind, step, fault)
        self.wait_for_lab(row)
        deadline = time.monotonic() + 30
        while not self.processes.healthy() and time.monotonic() < deadline:
            time.sleep(0.5)  # the supervisor restarts it
        self.processes.worker_ready()
        self.setup()
        try:
            self._change_set = None
            try:
                op = self.confirm(self.plan(kind))
            except Refused as exc:
                row.state = f"refused: {exc}"
                return row
            fault_over, faulting = [time.monotonic()], None
            if step != NO_FAULT:
                missed = self.wait_step(op, step)
                if missed:
                    row.landed = missed
                else:
                    row.landed = self.running(op)
                    fault_over[0] = None  # until the process is back (or the database answers again)
                    fault_at = time.monotonic()

                    def inflict(name=fault):
                        try:
                            self.processes.fault(name)
                        finally:
                            fault_over[0] = time.monotonic()
                            row.fault_s = fault_over[0] - fault_at

                    faulting = threading.Thread(target=inflict, daemon=True)
                    faulting.start()
            resolved = self.wait_resolved(op, fault_over)
            if faulting is not None:
                faulting.join(60)  # the fault is over (beat back after its 30 s) before the next row
            row.resolved_s = resolved
            with self.processes.lock:
                row.notes += self.processes.restarts
                self.processes.restarts.clear()
            op.refresh_from_db()
            row.state = op.state
            if op.error:
                row.notes.append(f"error: {op.error[:300]}")
            self.judge_console(row)
            row.hand_sql = (
                "none"
                if (row.layers, row.intent) == ("equal", "equal")
                and row.writer.startswith("agreed (")
                and "inventory says" not in row.writer
                else "needed"
            )
            return row
        finally:
            self.out(
                f"   {kind} / {fault} at {step}: "
                + "; ".join(str(c) for c in row.cells()[3:])
                + "".join(f"\n      {n}" for n in row.notes)
            )

    def wait_step(self, op, step, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = dict(OperationStep.objects.filter(operation=op).values_list("key", "state"))
            if states.get(step, "pending") != "pending":
                return None
            state = Operation.objects.get(pk=op.pk).state
            if state in ENDED or state in (OperationState.ROLLBACK_PENDING, OperationState.FINISH_PENDING):
                return f"not reached (operation {state})"
            time.sleep(0.01)
        return f"not reached within {timeout} s"

    def wait_resolved(self, op, fault_over):
        """Seconds from the end of the fault (fault_over[0], set when the process is back or the database answers)
        until the operation has ended and nothing is pending on the cluster: 0 when it ended during the fault; None
        past bound_s. Reads only (a read may wait while the database is locked)."""
        deadline = time.monotonic() + self.bound_s
        while time.monotonic() < deadline:
            try:
                state = Operation.objects.get(pk=op.pk).state
                if state in ENDED and not pending_rows.open_rows(self.cluster).exists():
                    over = fault_over[0]
                    return 0.0 if over is None else max(0.0, time.monotonic() - over)
            except Exception:  # the database down (MariaDB stopped): read again
                close_old_connections()
            time.sleep(0.2)
        return None

    def judge_console(self, row):
        """Reads only: the three layers of every node equal to each other, and to the inventory; who writes."""
        cluster = self.cluster
        cluster.refresh_from_db()
        hostgroups = set(cluster.hostgroup_ids())
        seen = {}
        for node in cluster.proxysql_nodes.order_by("pk"):
            with ProxySQLAdmin.for_node(node) as admin:
                for layer in ("memory", "runtime", "disk"):
                    seen[(node.name, layer)] = {
                        r.key: configured(r) for r in admin.servers(layer) if r.hostgroup_id in hostgroups
                    }
        first = next(iter(seen.values()))
        differ = [f"{n} {layer}" for (n, layer), rows in seen.items() if rows != first]
        row.layers = "equal" if not differ else "no: " + ", ".join(differ) + " differ from the first node's memory"
        judged = Row(row.kind, row.step)
        self.judge(judged)  # every layer against the inventory (the latest version), and the writer
        row.intent = "equal" if judged.equal else "no: " + judged.layers[4:]
        row.writer = judged.writer
        row.notes += judged.notes


class RealConsoleFaultMatrix(ConsoleFaultMatrix, RealFaultMatrix):
    """The console's own faults in front of REAL ProxySQL nodes (the issue's own trial was on a real 2.7.1 pair):
    `make_node(name)` starts a fresh real node (lab.real_proxysql.RealProxySQL) for each row, as RealFaultMatrix does.
    A real node answers at once (no latency_ms): a step may end before its fault lands, and "landed in" says where."""


def real_node_maker(binary, root):
    """make_node(name, peers=None, ports=None) for RealConsoleFaultMatrix: a fresh real node on free ports, its datadir
    under `root`."""
    from lab.real_proxysql import RealProxySQL

    def make(name, peers=None, ports=None):
        admin_port, client_port = ports or free_ports(2)
        node = RealProxySQL(
            binary, Path(root) / f"{name}-{admin_port}", admin_port, client_port, peers=peers, name=name
        )
        node.start()
        return node

    return make


def run_console(
    processes,
    kinds=CONSOLE_KINDS,
    steps=None,
    faults=CONSOLE_FAULTS,
    latency_ms=50,
    bound_s=90,
    out=print,
    lab=None,
    make_node=None,
):
    """Every requested (operation, step, fault) row; a control row (no fault) per operation first. `make_node`: real
    ProxySQL nodes (real_node_maker) instead of the doubles."""
    if make_node is None:
        matrix = ConsoleFaultMatrix(processes, bound_s=bound_s, latency_ms=latency_ms, out=out, lab=lab)
    else:
        matrix = RealConsoleFaultMatrix(processes, bound_s=bound_s, make_node=make_node, out=out, lab=lab)
    matrix.point_broker()
    rows = []
    try:
        for kind in kinds:
            keys = matrix.step_keys(kind)
            chosen = keys if not steps else [k for k in keys if k in steps]
            out(f"-- {kind}: steps {', '.join(keys)}; faults at {', '.join(chosen) or 'none chosen'}")
            if not steps or NO_FAULT in steps:
                rows.append(matrix.console_row(kind, NO_FAULT, NO_FAULT))
            for key in chosen:
                rows += [matrix.console_row(kind, key, fault) for fault in faults]
    finally:
        matrix.close()
    return rows
