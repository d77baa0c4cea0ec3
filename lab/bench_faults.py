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
"""
import os
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.db import close_old_connections, transaction

from apps.audit.actor import Actor
from apps.clients.proxysql import ProxySQLAdmin, configured, configured_status
from apps.configuration import adoption as adopt
from apps.configuration.services import versioned_variables
from apps.fleet.drift import MANAGED_VARIABLES, intended_rows, intended_variables
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.operations import drain, executor, repair, rollbacks, services, switchover
from apps.operations.choices import OperationState
from apps.operations.models import Operation, OperationStep
from lab import demo
from lab.bench_config import free_ports
from lab.proxysql_double import DoubleServer, ProxySQLDouble

KINDS = ("switchover", "drain", "restore", "config", "repair")
NO_FAULT = "none"
RETRY_EVERY_S = 2  # as beat schedules rollbacks.retry_due()
RULE = "fault matrix benchmark"
NEW_WEIGHT = 12345  # the weight the change set and the repair give one reader row (hostgroup 101, second backend)


@dataclass
class Row:
    kind: str
    step: str
    landed: str = ""          # the step running when the node was paused, as read right after
    state: str = ""           # the operation's end state (as the executor left it)
    after_retries: str = ""   # its state once the product's retries are over
    pending_left: int = 0     # PendingRollback rows still open after the retries
    before: str = ""          # "equal" or what differs, after the retries, before the restarts
    layers: str = ""          # "equal" or what differs, after the restarts
    writer: str = ""          # "agreed (PORT)" or who routes where, after the restarts
    hand_sql: str = ""
    notes: list = field(default_factory=list)
    equal: bool = False
    agreed: bool = False

    def cells(self):
        after = self.after_retries + (f" ({self.pending_left} still pending)" if self.pending_left else "")
        return [self.kind, self.step, self.landed or "-", self.state, after, self.before, self.layers, self.writer,
                self.hand_sql]


HEADER = ["operation", "paused at", "pause landed in", "operation state", "after the retries",
          "layers equal before restart", "layers equal after restart", "writer after restart", "hand SQL"]


def table(rows):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(str(c) for c in row.cells()) + " |" for row in rows]
    return "\n".join(lines)


class FaultMatrix:
    """Runs rows of the matrix. Needs the Galera lab up, a database, and settings.REDIS_URL reachable (the retry
    reads the latest-state documents)."""

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
            demo.admin_sql(d.port, *demo.seed_statements(backend_ports=self.ports))  # LOADed and SAVEd: the three layers agree
        name = f"faults-{os.getpid()}-{self.serial}"
        for i, d in enumerate(self.doubles, 1):
            with ProxySQLAdmin("127.0.0.1", d.port, "admin", "admin") as admin:
                snapshot, monitor = adopt.read_snapshot(admin), adopt.read_monitor_credentials(admin)
            plan = adopt.plan_adoption(snapshot, cluster_name=name, node_name=f"p{i}", admin_host="127.0.0.1",
                                       admin_port=d.port)
            if not plan.ok:
                raise RuntimeError(f"adoption refused: {plan.errors}")
            adopt.apply_adoption(plan, admin_user="admin", admin_password="admin", monitor=monitor,
                                 actor=Actor.rule(RULE))
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
            setup = self.confirm(drain.plan_drain(Server.objects.get(cluster=cluster, port=self.drained_port),
                                                  drain_timeout_ms=3000))
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

            config.record_version(cluster, lambda parent: config.with_servers(parent.content, {
                self.weight_row: {**config.servers_of(parent.content)[self.weight_row], "weight": NEW_WEIGHT}}),
                actor=Actor.rule(RULE), reason="a weight moved for the repair row", source="admin")
            return repair.plan_repair(cluster)
        raise ValueError(kind)

    def change_set_plan(self):
        from django.contrib.auth import get_user_model

        from apps.configuration import services as config
        from apps.configuration.models import ChangeSet
        from apps.operations.change_set import plan_change_set

        user, _ = get_user_model().objects.get_or_create(username="bench-faults")
        cs = config.start_change_set(self.cluster, actor=Actor.command(user), reason="fault matrix: one weight")
        row = next(r for r in cs.base.content["mysql_servers"]
                   if (r["hostgroup_id"], r["hostname"], r["port"]) == self.weight_row)
        config.add_edit(cs, {"op": "upsert", "table": "mysql_servers", "key": list(self.weight_row),
                             "row": {**row, "weight": NEW_WEIGHT}}, actor=Actor.command(user))
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
        return services.confirm(op, actor=Actor.rule(RULE), enqueue=False)

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
            worker.start()
            if step != NO_FAULT:
                row.landed = self.pause_at(op, step, worker)
            worker.join(120)
            if worker.is_alive():
                row.notes.append("the executor was still running 120 s after the resume")
            op.refresh_from_db()
            row.state = op.state
            self.retry(row, op)
            op.refresh_from_db()
            row.after_retries = op.state
            row.pending_left = rollbacks.open_rows(self.cluster).count()
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
            self.out(f"   {row.kind} paused at {row.step}: " + "; ".join(str(c) for c in row.cells()[2:])
                     + "".join(f"\n      {n}" for n in row.notes))

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
        while rollbacks.open_rows(self.cluster).exists() and time.monotonic() < deadline:
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
                want = {k: v for k, (v, _) in intended_variables(node, admin, versioned).items() if v is not None}
                for layer in ("memory", "runtime", "disk"):
                    rows = admin.servers(layer)
                    have = {r.key: configured(r) for r in rows if r.hostgroup_id in hostgroups}
                    values = admin.global_variables(MANAGED_VARIABLES, layer=layer)
                    wrong = [f"hg {k[0]} {k[2]}" for k in sorted(intended.keys() | have.keys())
                             if intended.get(k) != have.get(k)]
                    wrong += [f"{name} {values.get(name)} (want {value})" for name, value in want.items()
                              if values.get(name) != value]
                    if wrong:
                        differ.append((node.name, layer))
                        row.notes.append(f"{node.name} {layer} differs from the inventory: {', '.join(wrong)}")
                    if layer == "runtime":
                        writers[node.name] = sorted(r.port for r in rows if r.hostgroup_id == cluster.writer_hostgroup
                                                    and configured_status(r.status) == "ONLINE")
        row.equal = not differ
        per_node = {}
        for name, layer in differ:
            per_node.setdefault(name, []).append(layer)
        row.layers = "equal" if row.equal else "no: " + "; ".join(f"{n} {'+'.join(ls)}" for n, ls in per_node.items())
        inventory_writer = sorted(k[2] for k, v in intended.items()
                                  if k[0] == cluster.writer_hostgroup and v["status"] == "ONLINE")
        seen = {tuple(w) for w in writers.values()}
        row.agreed = len(seen) == 1 and len(next(iter(seen))) == 1
        if row.agreed:
            port = next(iter(seen))[0]
            row.writer = f"agreed ({port})" + ("" if [port] == inventory_writer else
                                               f", inventory says {'/'.join(map(str, inventory_writer)) or 'none'}")
        else:
            row.writer = "not agreed: " + ", ".join(f"{n} {'/'.join(map(str, w)) or 'none'}" for n, w in writers.items())

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
# The kill lands there by chance (about 1 pass in 4 of the save row); HALF_SAVED puts it there every time.
HALF_SAVED = "kill in the SAVE's write"
BACK_BEFORE_UNDO = "kill in the SAVE's write, restarted before the rollback reaches it"  # (a fast restart, a slow console)


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
    datadir without --initial: it loads its disk, as after a crash), or HALF_SAVED (a kill in a SAVE's write: its
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

    def pause_at(self, op, step, worker):
        missed = self.wait_started(op, step, worker)
        if missed:
            return missed
        node = self.second
        if self.fault == BACK_BEFORE_UNDO:
            # The console's database held meanwhile (a write on the step's row): the executor cannot record the step's
            # failure, so its rollback starts only once p2 answers again.
            with transaction.atomic():
                OperationStep.objects.filter(operation=op, key=step).update(state="running")
                os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait()
                landed = self.running(op) + "; p2 killed " + half_saved(node.datadir)
                node.start(fresh=False)
            return landed + ", and back before the undo"
        if self.fault in ("kill", HALF_SAVED):
            os.killpg(node.proc.pid, signal.SIGKILL)
            node.proc.wait()
            landed = self.running(op) + "; p2 killed"
            if self.fault == HALF_SAVED:
                landed += " " + half_saved(node.datadir)
            time.sleep(self.pause_s)
            node.start(fresh=False)
            return landed
        os.killpg(node.proc.pid, signal.SIGSTOP)
        try:
            landed = self.running(op) + "; p2 stopped"
            time.sleep(self.pause_s)
        finally:
            os.killpg(node.proc.pid, signal.SIGCONT)
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
