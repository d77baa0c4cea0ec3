"""A real ProxySQL node paused mid-switchover (issue 9, done-when): bin/bench-real-pair PATH --pause-at STEP.

Against the real pair started by bench_real_pair (no client load), for each --pause-at STEP in turn:
writer sessions are pinned through both nodes (a user variable: ProxySQL keeps their backend connection),
so the switchover's drain waits; `manage.py switchover ... --yes --json` runs as the operator runs it; the
second ProxySQL process is SIGSTOPped
- wait_drain: while the drain waits on it (the drain step has set the old writer OFFLINE_SOFT and
  auto_increment_delay_multiplex to 0 there);
- any other step (autoinc_off, drain, move, verify, save, autoinc_restore): the pins are released (at the stop for the steps
  before the drain wait, else while it waits), and the node is stopped as soon as the step before it is done or that step has started
  (the operation's steps read in a busy loop once it exists: where the stop really landed is
  printed, with what the node had taken, and where the product met the stopped node);
kept stopped --pause-seconds (longer than the client's read timeout), then SIGCONTed. Printed: the operation's
end state and message, its PendingRollback rows, each node's runtime rows and managed variables right after
the resume, then after the product's own retry (rollbacks.retry_due(), what beat calls every 2 s, called
every 2 s here from the command's end), drift against the inventory and between the nodes; then (issue 21) each
node's three layers (memory main.mysql_servers, runtime, disk.mysql_servers: the cluster's hostgroups against the
inventory, SHUNNED read as ONLINE; mysql-auto_increment_delay_multiplex in each layer against its intended value)
and the backend it routes writes to; each real ProxySQL restarted in turn (SIGTERM, then started again from the same
datadir and config without --initial: it loads its disk), and the same read again: "layers equal", "writer
agreed" (both nodes route writes to the one backend the inventory names); then whether a further switchover is
accepted and done. A table row per pause is printed at the end. No SQL is typed by hand at the nodes: only reads.
"""

import json
from collections import namedtuple
import os
import re
import signal
import subprocess
import sys
import time

import MySQLdb

from apps.clients.proxysql import ProxySQLAdmin, configured
from apps.configuration.drift import cluster_drift
from apps.configuration.services import versioned_variables
from apps.fleet.drift import AUTOINC, MANAGED_VARIABLES, intended_rows
from apps.fleet.models import Server
from apps.operations import pending_rows, rollbacks, switchover
from apps.operations.models import Operation, OperationStep, PendingRollback
from lab import demo
from lab.galera import APP_PASSWORD, APP_USER
from lab.management.commands.bench_real_pair import REPO  # imported by it only once it is loaded

RETRY_EVERY_S = 2  # as beat schedules rollbacks.retry_due()
ENDED = ("done", "failed", "rolled_back", "rollback_pending", "finish_pending", "refused", "expired", "cancelled")
StepState = namedtuple("StepState", "key index state")
EARLY = ("autoinc_off", "drain")  # the steps before the drain waits: no need to hold the pinned sessions there


def pin(client_port):
    """A client session through this node that keeps its writer backend connection (multiplexing off)."""
    conn = MySQLdb.connect(host="127.0.0.1", port=client_port, user=APP_USER, passwd=APP_PASSWORD, autocommit=True)
    conn.cursor().execute("SET @pinned_by_bench=1")
    return conn


def state_of(node, hostgroups):
    """What a node holds at runtime: its cluster rows (hg, port, status, weight) and the managed variable."""
    try:
        rows = demo.admin_sql(
            node.admin_port,
            "SELECT hostgroup_id, port, status, weight FROM runtime_mysql_servers ORDER BY hostgroup_id, port",
        )
        autoinc = demo.admin_sql(
            node.admin_port, f"SELECT variable_value FROM runtime_global_variables WHERE variable_name='{AUTOINC}'"
        )
    except MySQLdb.Error as exc:
        return f"not readable: {exc}"
    rows = [f"{hg}:{port} {status} w{weight}" for hg, port, status, weight in rows if int(hg) in hostgroups]
    unloaded = demo.admin_sql(
        node.admin_port,
        "SELECT COUNT(*) FROM (SELECT hostgroup_id, hostname, port, weight, comment FROM mysql_servers "
        "EXCEPT SELECT hostgroup_id, hostname, port, weight, comment FROM runtime_mysql_servers)",
    )[0][0]
    memory = demo.admin_sql(
        node.admin_port, f"SELECT variable_value FROM global_variables WHERE variable_name='{AUTOINC}'"
    )
    return (
        f"{AUTOINC}={autoinc[0][0]} (memory {memory[0][0]}); "
        + ", ".join(rows)
        + f"; memory rows not at runtime: {unloaded}"
    )


def _fields(values):
    """A mysql_servers row's configured fields, short: status, weight, then the others only when not the defaults."""
    if values is None:
        return "missing"
    return f"{values['status']} w{values['weight']}"


def starting(steps, at):
    """The moment to stop the node for a pause at `at`: the step before it (in the plan's order) is done, or `at`
    has started. The steps that talk to ProxySQL last a few milliseconds: stopping only once `at` is seen running
    (the rows are polled every millisecond) let a stop at `drain` land after real2 had answered the drain; stopped
    as the step before it ends, the node gets `at`'s first statement while stopped (it runs it on resume)."""
    if at not in steps:
        return False
    before = [s for s in steps.values() if s.index < steps[at].index]
    previous = max(before, key=lambda s: s.index) if before else None
    return steps[at].state != "pending" or (previous is not None and previous.state == "done")


def landed_in(op):
    """(the step running when the node was stopped, else the last one finished; every step's state), from one read
    right after the SIGSTOP."""
    if op is None:
        return "?", "no operation yet"
    steps = list(op.steps.order_by("index"))
    now = ", ".join(f"{s.key} {s.state}" for s in steps)
    running = [s.key for s in steps if s.state == "running"]
    if running:
        return running[0], now
    done = [s.key for s in steps if s.state != "pending"]
    return (f"after {done[-1]}" if done else "before the first step"), now


def met_at(error):
    """The step at which the product met the stopped node, from the operation's message ("...: save: no answer")."""
    m = re.search(r"\): ([a-z_]+): no answer", error or "") or re.search(
        r"\): (read [A-Za-z_]+): no answer", error or ""
    )
    return m.group(1) if m else "-"


class PauseRun:
    """One switchover with the second real ProxySQL stopped at one step, and what the product made of it."""

    def __init__(self, bench, cluster, nodes, pause_at):
        self.bench, self.cluster, self.nodes, self.pause_at = bench, cluster, nodes, pause_at
        self.o = bench.o
        self.out = bench.stdout.write
        self.paused = nodes[1]
        self.hostgroups = set(cluster.hostgroup_ids())

    def command(self, target):
        cmd = [
            sys.executable,
            "manage.py",
            "switchover",
            self.cluster.name,
            "--to",
            f"{target.hostname}:{target.port}",
            "--user",
            self.o["user"],
            "--lower-autoinc",
            "--drain-timeout-ms",
            str(self.o["pause_drain_timeout_ms"]),
            "--yes",
            "--json",
        ]
        return subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.bench.command_env()
        )

    def operation_after(self, last_pk):
        return Operation.objects.filter(cluster=self.cluster, pk__gt=last_pk).order_by("pk").first()

    def wait_for_step(self, last_pk, test, timeout=30.0, every=0.005):
        """The operation once test({key: step}) holds (or it has ended). every=0: once the operation exists, its
        steps' (key, index, state) are read in a busy loop (a step that talks to ProxySQL lasts a few ms: a loop with
        a 1 ms sleep and whole rows missed the drain's 7 ms)."""
        deadline = time.monotonic() + timeout
        op = None
        while time.monotonic() < deadline:
            op = op or self.operation_after(last_pk)
            if op is not None:
                steps = {
                    key: StepState(key, index, state)
                    for key, index, state in OperationStep.objects.filter(operation_id=op.pk).values_list(
                        "key", "index", "state"
                    )
                }
                if test(steps):
                    return op
                if Operation.objects.filter(pk=op.pk, state__in=ENDED).exists():
                    op.refresh_from_db()
                    return op
            if every or op is None:
                time.sleep(every or 0.001)
        return None

    def run(self):
        out, node = self.out, self.paused
        writer = switchover.current_writer(self.cluster).server
        target = Server.objects.filter(cluster=self.cluster).exclude(pk=writer.pk).order_by("port").first()
        out(
            f"-- pause at {self.pause_at}: switchover {writer.port} -> {target.port}, ProxySQL :{node.admin_port} "
            f"(pid {node.proc.pid}) stopped for {self.o['pause_seconds']} s; load average "
            f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        pins = [pin(n.client_port) for n in self.nodes]
        used = [
            demo.admin_sql(
                n.admin_port,
                "SELECT SUM(ConnUsed) FROM stats_mysql_connection_pool "
                f"WHERE hostgroup={self.cluster.writer_hostgroup} AND srv_port={writer.port}",
            )[0][0]
            for n in self.nodes
        ]
        out(
            f"   pinned writer sessions: ConnUsed of {writer.port} in hg {self.cluster.writer_hostgroup} per node {used}"
        )
        last_pk = Operation.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        started = time.time()
        proc = self.command(target)
        stopped_at = resumed_at = None
        try:
            if self.pause_at not in EARLY:
                op = self.wait_for_step(last_pk, lambda s: "wait_drain" in s and s["wait_drain"].state == "running")
                if op is None or op.state in ENDED:
                    out(f"   the drain wait never ran: {op and op.state}: {op and op.error}")
                    return
            if self.pause_at in EARLY:  # before the drain waits: see starting()
                at = self.pause_at
                op = self.wait_for_step(last_pk, lambda s: starting(s, at), timeout=60, every=0)
                if op is None or op.state in ENDED:
                    out(f"   {at} never ran: {op and op.state}: {op and op.error}")
                    return
                os.kill(node.proc.pid, signal.SIGSTOP)
                for c in pins:
                    c.close()
                pins = []
            elif self.pause_at == "wait_drain":
                time.sleep(0.3)  # the drain probe has read this node a few times
                os.kill(node.proc.pid, signal.SIGSTOP)
                for c in pins:  # the other node drains now; the paused one cannot answer the probe
                    c.close()
                pins = []
            else:
                for c in pins:
                    c.close()
                pins = []
                at = self.pause_at
                op = self.wait_for_step(last_pk, lambda s: starting(s, at), every=0)
                os.kill(node.proc.pid, signal.SIGSTOP)
            stopped_at = time.time()
            landed, steps = landed_in(op)
            out(
                f"   SIGSTOP at +{(stopped_at - started) * 1000:.0f} ms from the command's spawn, landed in {landed}; "
                f"steps then: {steps}"
            )
            tries = []
            stdout, stderr = None, None
            while time.time() < stopped_at + self.o["pause_seconds"]:
                if stdout is None and proc.poll() is not None:
                    stdout, stderr = proc.communicate()
                    out(
                        f"   command exited {proc.returncode} at +{(time.time() - stopped_at) * 1000:.0f} ms after "
                        f"the SIGSTOP, node still stopped"
                    )
                if stdout is not None:  # the beat's retry runs meanwhile, as it would
                    tries += [(time.time() - stopped_at, r) for r in rollbacks.retry_due()]
                time.sleep(RETRY_EVERY_S if stdout is not None else 0.05)
            os.kill(node.proc.pid, signal.SIGCONT)
            resumed_at = time.time()
            if stdout is None:
                stdout, stderr = proc.communicate(timeout=120)
                out(
                    f"   command exited {proc.returncode} {time.time() - stopped_at:.1f} s after the SIGSTOP "
                    f"(node resumed)"
                )
            for at, r in tries:
                out(f"   retry (beat) at +{at:.1f} s while stopped: {r}")
        finally:
            if resumed_at is None and stopped_at is not None:
                os.kill(node.proc.pid, signal.SIGCONT)
            for c in pins:
                c.close()
            if proc.poll() is None:
                proc.wait(120)
        events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        outcome = next((e for e in events if e.get("event") == "outcome"), {})
        op = Operation.objects.get(pk=outcome["operation"]) if outcome.get("operation") else op
        op.refresh_from_db()
        out(f"   operation #{op.pk}: {op.state}: {op.error or '(no message)'}")
        out("   steps: " + "; ".join(f"{s.key} {s.state}" for s in op.steps.order_by("index")))
        for s in op.steps.order_by("index"):
            taken = [e["sql"] for e in s.executed or [] if isinstance(e, dict) and e.get("node") == "real2"]
            if s.state in ("failed", "running") or s.detail.get("rollback_pending_on"):
                out(f"   step {s.key} ({s.state}) on real2: statements answered {taken}")
        if stderr.strip():
            out(f"   command stderr: {stderr.strip()[-400:]}")
        self.report_pending(op)
        self.report_nodes("right after the SIGCONT")
        # the product's own retry, as beat runs it every 2 s, until nothing is pending or 60 s have passed
        deadline = time.time() + 60
        while pending_rows.open_rows(self.cluster).exists() and time.time() < deadline:
            for r in rollbacks.retry_due():
                out(f"   retry (beat) at +{time.time() - resumed_at:.1f} s after the SIGCONT: {r}")
            time.sleep(RETRY_EVERY_S)
        op.refresh_from_db()
        out(f"   then operation #{op.pk}: {op.state}: {op.error or '(no message)'}")
        self.report_pending(op)
        self.report_nodes("after the product's retry")
        consistent = self.report_drift()
        before = self.layers("after the retry, before the restarts")
        for n in self.nodes:  # each node in turn, as an operator's rolling restart: the other one keeps serving
            how, took = n.restart()
            out(
                f"   restarted :{n.admin_port} ({how}); its admin answered {took:.1f} s after the start, "
                f"without --initial: memory and runtime loaded from its disk"
            )
        after = self.layers("after both restarts")
        result = self.bench.switch(
            self.cluster,
            Server.objects.filter(cluster=self.cluster)
            .exclude(pk=switchover.current_writer(self.cluster).server.pk)
            .order_by("port")
            .first(),
        )
        out(
            f"   a further switchover to {result['to']}: {result['state']}"
            + (f" ({result['error']})" if result["error"] else "")
            + f", exit {result['exit']}"
        )
        if result["state"] != "done":  # refused: which guards failed, with their values
            later = Operation.objects.filter(cluster=self.cluster).order_by("-pk").first()
            out(
                f"   its failed guards: {[(g['label'], g['value']) for g in later.plan.get('guards', []) if not g['passed']]}"
            )
        self.report_nodes("after the further switchover")
        consistent = self.report_drift() and consistent
        pending = pending_rows.open_rows(self.cluster).count()
        return {
            "pause_at": self.pause_at,
            "landed": landed,
            "met": met_at(outcome.get("error")),
            "state": outcome.get("state") or "?",
            "after_retry": op.state + (f" ({pending} still pending)" if pending else ""),
            "before": before["layers"],
            "after": after["layers"],
            "writer": after["writer"],
            "consistent": consistent,
            "next": result["state"],
        }

    def layers(self, when):
        """Reads only, through the product's admin client: per node the cluster's mysql_servers rows in memory
        (main), runtime and disk against the inventory (the configured status: SHUNNED is ProxySQL's own runtime
        verdict, not a difference), the managed variable in each layer against its intended value, and which
        backend the node routes writes to (ONLINE rows of the writer hostgroup at runtime)."""
        out, cluster = self.out, self.cluster
        cluster.refresh_from_db()
        intended = intended_rows(cluster)
        versioned = versioned_variables(cluster)
        inventory_writer = sorted(
            k[2] for k, v in intended.items() if k[0] == cluster.writer_hostgroup and v["status"] == "ONLINE"
        )
        differ, writers = {}, {}
        for node in cluster.proxysql_nodes.order_by("pk"):
            try:
                with ProxySQLAdmin.for_node(node) as admin:
                    want = {
                        k: v for k, (v, _) in versioned.items() if v is not None
                    }  # the version: the one record of intent
                    for layer in ("memory", "runtime", "disk"):
                        rows = [r for r in admin.servers(layer) if r.hostgroup_id in self.hostgroups]
                        values = admin.global_variables(MANAGED_VARIABLES, layer=layer)
                        have = {r.key: configured(r) for r in rows}
                        wrong = [
                            f"hg {k[0]} :{k[2]} {_fields(have.get(k))} (inventory {_fields(intended.get(k))})"
                            for k in sorted(intended.keys() | have.keys())
                            if intended.get(k) != have.get(k)
                        ]
                        wrong += [
                            f"{name} {values.get(name)} (intended {value})"
                            for name, value in want.items()
                            if values.get(name) != value
                        ]
                        if wrong:
                            differ.setdefault(node.name, []).append(f"{layer}: " + "; ".join(wrong))
                        out(
                            f"   {when}, {node.name} {layer:7}: "
                            + ", ".join(f"{r.hostgroup_id}:{r.port} {r.status} w{r.weight}" for r in rows)
                            + "; "
                            + ", ".join(f"{k}={v}" for k, v in values.items())
                            + ("" if not wrong else f"  <- differs: {'; '.join(wrong)}")
                        )
                        if layer == "runtime":
                            writers[node.name] = sorted(
                                r.port
                                for r in rows
                                if r.hostgroup_id == cluster.writer_hostgroup and r.status == "ONLINE"
                            )
            except Exception as exc:  # a node that does not answer is a difference too, said as such
                differ.setdefault(node.name, []).append(f"not readable: {exc}")
                writers[node.name] = None
        seen = {tuple(w) for w in writers.values() if w is not None}
        agreed = None not in writers.values() and seen == {tuple(inventory_writer)} and len(inventory_writer) == 1
        layers = "yes" if not differ else "no (" + "; ".join(f"{n} {d}" for n, ds in differ.items() for d in ds) + ")"
        writer = (
            ("yes" if agreed else "no")
            + " ("
            + ", ".join(f"{n} -> {'/'.join(map(str, w)) if w else 'none'}" for n, w in writers.items())
            + f"; inventory {'/'.join(map(str, inventory_writer)) or 'none'})"
        )
        out(f"   {when}: layers equal: {layers}")
        out(f"   {when}: writer agreed: {writer}")
        return {"layers": layers, "writer": writer, "equal": not differ, "agreed": agreed}

    def report_pending(self, op):
        for row in PendingRollback.objects.filter(operation=op).select_related("node").order_by("pk"):
            out = self.out
            out(
                f"   PendingRollback #{row.pk} on {row.node.name}: {row.state}, {row.attempts} tries, "
                f"{len(row.statements)} still to run, {len(row.ran)} ran"
                + (f"; resolution: {row.resolution}" if row.resolution else "")
                + (f"; last error: {row.last_error}" if row.last_error else "")
            )
            for s in row.statements:
                out(f"      to run: [{s['step']}] {s['sql']}")

    def report_nodes(self, when):
        for n in self.nodes:
            self.out(f"   {when}, :{n.admin_port} runtime: {state_of(n, self.hostgroups)}")

    def report_drift(self):
        drift = cluster_drift(self.cluster)
        for n in drift.nodes:
            self.out(
                f"   drift {n.node_name}: "
                + (
                    f"in sync with version {drift.version}"
                    if n.in_sync
                    else f"error {n.error!r}; " + "; ".join(f.words for f in n.findings)
                )
            )
        self.out(f"   between the nodes: {drift.between_nodes or 'no difference'}; consistent: {drift.in_sync}")
        return drift.in_sync


def run_pauses(bench, cluster, nodes):
    results = [PauseRun(bench, cluster, nodes, at).run() for at in bench.o["pause_at"]]
    bench.stdout.write(
        "pause mid-switchover, summary: "
        + "; ".join(
            f"at {r['pause_at']}: {r['state']}, nodes consistent {r['consistent']}, next switchover {r['next']}"
            for r in results
            if r
        )
    )
    header = [
        "step paused",
        "stop landed in",
        "the product met the stopped node at",
        "operation state",
        "after retry",
        "layers equal before restart",
        "layers equal after restart",
        "writer agreed after restart",
        "hand SQL",
        "next switchover",
    ]
    out = bench.stdout.write
    out("| " + " | ".join(header) + " |")
    out("|" + "---|" * len(header))
    for r in results:
        if r:
            out(
                "| "
                + " | ".join(
                    [
                        r["pause_at"],
                        r["landed"],
                        r["met"],
                        r["state"],
                        r["after_retry"],
                        r["before"],
                        r["after"],
                        r["writer"],
                        "none",
                        r["next"],
                    ]
                )
                + " |"
            )
