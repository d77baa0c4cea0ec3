"""Benchmark of switchovers and failover against a REAL ProxySQL pair (issue 9, "Speed found on the real pair").

    bin/bench-real-pair /path/to/proxysql [--switchovers 10] [--seconds 60] [--kills 10]

Never part of the test suite: it needs a ProxySQL binary built by hand (docs/benchmarks.md, "Against a real
ProxySQL 2.7.1 pair", says how). It starts two ProxySQL processes of its own (datadirs under --workdir,
admin 16132 / 26132, clients 16133 / 26133) in front of the Galera lab, configures them through their admin
port like the seeds' pair (lab/demo.py), adopts them into the scratch database, and measures:

1. the client's worst response with and without switchovers: two sysbench oltp_read_write processes, one
   through each ProxySQL node, plus a write probe (one autocommit INSERT after another through each node,
   every latency kept). Each of --rounds rounds is a control run of --seconds, where the switchover command
   runs --switchovers times with --plan-only (same CPU cost to the machine, nothing switched), then a run
   where it switches: `manage.py switchover CLUSTER --to HOST:PORT --lower-autoinc --yes --json` (the
   operator's command, a process of its own each time). Printed: sysbench's max and p99 latency, errors and
   reconnects per run; per switchover the writer hold (drain step start to move step end), its parts, each
   real node's LOAD MYSQL SERVERS TO RUNTIME, and the longest probe write that overlapped the hold;
2. failover at the cluster's default policy: the writer's mariadbd killed (-9) at a random moment of the
   backend polling cycle (polling driven every second as beat drives it), timed to the new writer ONLINE
   in runtime_mysql_servers' writer hostgroup on both ProxySQL nodes (their admin ports polled every 10 ms);
3. false failovers: the same polling for --quiet-seconds under sysbench through both nodes plus a
   CPU-burning session on the writer.
Every sysbench transaction is timed (lab/sysbench/oltp_read_write_lab.lua) and placed in the switchover
command's phases (start+plan, confirm+lock, each step, finish+exit), with the command's CPU and the writer
hostgroup's connection pool read every 20 ms; raw data in --workdir/timed-N/trace.json. Each failover's time
is split (the wait for the next poll, the poll round, the plan, the move's LOAD, its SAVE) and the clients'
side measured: when a write through each node is answered again after the kill.
Prints the machine, the load average at each phase and ProxySQL's version.
Issue 37: the write probe keeps every query (start, end, backend, error, retry); each node's LOAD is placed beside the
steps; each run's worst sysbench transaction and probe query are attributed (attribute()), and each round prints
switch minus control for worst and p99; --cpu-burners busy loops run through the rounds (an extra CPU load of its
own); each kill prints its timeline (kill_timeline()).
"""

import json
import logging
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import MySQLdb
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from apps.fleet.models import Cluster, Server
from apps.monitoring import live
from apps.operations import switchover
from apps.operations.choices import OperationKind
from apps.operations.models import Operation
from apps.operations.writer_watch import WriterWatch as BackendWriterWatch
from lab import demo
from lab.galera import APP_PASSWORD, APP_SCHEMA, APP_USER, GaleraLab
from lab.real_proxysql import RealProxySQL
from lab.management.commands.bench_operations import (
    Beat,
    PollCounter,
    _cpu_load,
    adopt_nodes,
    machine,
    pct,
    private_redis,
    summary,
)
from workers.monitoring import poll_cluster_backends

REPO = Path(__file__).resolve().parents[3]
LOAD_SCRIPT = REPO / "lab" / "sysbench" / "oltp_read_write_lab.lua"
ADMIN_PORTS, CLIENT_PORTS = (16132, 26132), (16133, 26133)  # clear of the demo doubles (16032, 16033)
WRITER_HG = 100
# Every step of a switchover that talks to ProxySQL (--pause-at): its statements, or its reads (the drain's ConnUsed
# probe, the verify). The backend steps (promote, catch_up) and the inventory's do not.
PAUSE_STEPS = ["autoinc_off", "drain", "wait_drain", "move", "verify", "save", "autoinc_restore"]
# The application's routing, as in the seeds: locking reads and writes to the writer, plain reads to readers.
APP_STATEMENTS = [
    "DELETE FROM mysql_users",
    "DELETE FROM mysql_query_rules",
    f"INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('{APP_USER}','{APP_PASSWORD}',{WRITER_HG})",
    "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply) VALUES"
    f" (10,1,'^SELECT.*FOR UPDATE$',{WRITER_HG},1),(20,1,'^SELECT',101,1)",
    "LOAD MYSQL USERS TO RUNTIME",
    "SAVE MYSQL USERS TO DISK",
    "LOAD MYSQL QUERY RULES TO RUNTIME",
    "SAVE MYSQL QUERY RULES TO DISK",
]


def loadavg():
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def timeline(op, spawned, exited):
    """The command's phases in wall-clock seconds: [(name, start, end)...], from its spawn to its exit.
    "start+plan" is Python and Django starting, then the plan's reads (the operation row is written at its end)."""
    if op is None:
        return [("command", spawned, exited)]
    marks = [("start+plan", spawned, op.created_at.timestamp())]
    last = op.created_at.timestamp()
    for step in op.steps.order_by("index"):
        if step.started_at is None or step.finished_at is None:
            continue
        start, end = step.started_at.timestamp(), step.finished_at.timestamp()
        marks.append(("confirm+lock" if step.index == 0 else "between steps", last, start))
        marks.append((step.key, start, end))
        last = end
    marks.append(("finish+exit", last, exited))
    return [(name, a, b) for name, a, b in marks if b >= a]


def failover_parts(killed, ticks, op, seen):
    """Where a failover's time went, in ms: from the kill to the next poll's start, that poll round until the
    operation was planned and saved (the poll, the rules, the re-probe, the plan's reads), until its first step
    (confirm, lock, re-check), its move step (statements, LOAD and SAVE on each node), and from the move's start
    to both nodes showing the new writer in runtime (10 ms reads)."""
    tick = next((start for start, end in ticks if start >= killed - 0.001), None) or killed
    steps = {s.key: s for s in op.steps.all()}
    created, first = op.created_at.timestamp(), min(s.started_at.timestamp() for s in steps.values() if s.started_at)
    move = steps.get("move")
    parts = {
        "kill -> next poll starts": tick - killed,
        "poll round -> operation planned": created - tick,
        "planned -> first step (confirm, lock, re-check)": first - created,
    }
    if move is not None and move.started_at and move.finished_at:
        parts["move step (statements, LOAD, SAVE per node)"] = (move.finished_at - move.started_at).total_seconds()
        # per node, the time its statements took up to its LOAD (the nodes run in parallel): the new writer is
        # live in that node's runtime from then on, before the SAVE TO DISK that follows it
        to_load = {}
        for e in move.executed or []:
            if isinstance(e, dict) and e.get("node") not in to_load.get("done", set()):
                to_load[e["node"]] = to_load.get(e["node"], 0.0) + e["ms"] / 1000
                if e["sql"] == "LOAD MYSQL SERVERS TO RUNTIME":
                    to_load.setdefault("done", set()).add(e["node"])
        loaded = max((v for k, v in to_load.items() if k != "done"), default=0.0)
        parts["kill -> the move's LOAD done on both nodes"] = move.started_at.timestamp() + loaded - killed
        parts["move step start -> seen by admin reads on both nodes (they wait for the SAVE)"] = (
            seen - move.started_at.timestamp()
        )
    return {k: v * 1000 for k, v in parts.items()}


def kill_timeline(killed, ticks, op, seen):
    """One failover's events in ms from the kill: the last poll round that ended before it (the last good poll),
    each poll round after it (start..end), the decision (the operation saved), its first step, each node's LOAD in
    the move, and the new writer seen ONLINE on both nodes."""
    ms = lambda x: f"{(x - killed) * 1000:+.0f}"  # noqa: E731
    before = [end for start, end in ticks if end <= killed]
    after = [(start, end) for start, end in ticks if start >= killed - 0.001][:3]
    first = min((s.started_at.timestamp() for s in op.steps.all() if s.started_at), default=None)
    parts = [
        f"last good poll ended {ms(before[-1])}" if before else "no poll before",
        "polls " + ", ".join(f"{ms(a)}..{ms(b)}" for a, b in after),
        f"decision {ms(op.created_at.timestamp())}",
    ]
    if first is not None:
        parts.append(f"first step {ms(first)}")
    parts += [f"LOAD {node} {ms(a)}..{ms(b)}" for node, key, a, b in load_windows(op) if key == "move"]
    parts.append(f"ONLINE seen on both {ms(seen)}" if seen else "ONLINE never seen")
    return "; ".join(parts)


def phase_of(t, ms, switches, margin=0.5):
    """Where a transaction [t, t + ms] spent most of its time: a phase of a command's timeline, "near" (within
    `margin` s of a command), or "away"."""
    end = t + ms / 1000
    best, most = "away", 0.0
    for s in switches:
        for name, a, b in s["timeline"]:
            overlap = min(end, b) - max(t, a)
            if overlap > most:
                best, most = name, overlap
        spawned, exited = s["timeline"][0][1], s["timeline"][-1][2]
        if best == "away" and spawned - margin <= end and t <= exited + margin:
            best = "near"
    return best


def autoinc_offsets(ports):
    """{auto_increment_offset: backend port} of the Galera nodes (wsrep_auto_increment_control sets them)."""
    out = {}
    for port in ports:
        conn = MySQLdb.connect(host="127.0.0.1", port=port, user=APP_USER, passwd=APP_PASSWORD, connect_timeout=2)
        cur = conn.cursor()
        cur.execute("SELECT @@auto_increment_offset, @@auto_increment_increment")
        offset, increment = cur.fetchone()
        conn.close()
        out[int(offset)] = port
    return out if len(out) == increment else {}


def load_windows(op):
    """Each node's LOAD MYSQL SERVERS TO RUNTIME in the operation's steps, wall clock: [(node, step, start, end)...].
    A node's statements run one after another from its step's start (the nodes in parallel), so each LOAD starts at
    the step's start plus that node's statements before it."""
    out = []
    for step in op.steps.order_by("index"):
        if step.started_at is None:
            continue
        elapsed = {}
        for e in step.executed or []:
            if not (isinstance(e, dict) and "node" in e and "ms" in e):
                continue
            start = step.started_at.timestamp() + elapsed.get(e["node"], 0.0)
            elapsed[e["node"]] = elapsed.get(e["node"], 0.0) + e["ms"] / 1000
            if e.get("sql") == "LOAD MYSQL SERVERS TO RUNTIME":
                out.append((str(e["node"]), step.key, start, start + e["ms"] / 1000))
    return out


STEP_CAUSES = {
    "wait_drain": "waiting for the drain",
    "catch_up": "Galera catch-up",
    "drain": "the drain step",
    "move": "the move step",
}


def attribute(t, end, switches, pool_rows=(), admin_port=None, retry=0, error=None):
    """What a client query [t, end] (wall clock s) waited for: an error, the client's own retry, a node's LOAD (when
    the LOAD is at least half of the step the query overlaps most), a step of the hold, a new backend connection to
    the new writer (its ConnOK in the writer hostgroup rose on the query's ProxySQL node while it waited), the new
    writer's first writes (the query began within 1 s after the move), else the command's phase (phase_of)."""
    if error:
        return "error"
    if retry:
        return "the client's retry"
    where = phase_of(t, (end - t) * 1000, switches)
    for s in switches:
        step = next(((a, b) for name, a, b in s["timeline"] if name == where), None)
        if step is None:
            continue
        in_step = min(end, step[1]) - max(t, step[0])
        loads = [(node, min(end, b) - max(t, a)) for node, key, a, b in s.get("loads", []) if key == where]
        node, most = max(loads, key=lambda x: x[1], default=(None, 0.0))
        if node is not None and most > 0 and most >= in_step / 2:
            return f"LOAD ({where}) on {node}"
    move = [(s, b) for s in switches for name, a, b in s["timeline"] if name == "move"]
    for s, moved in move:
        if admin_port is not None and moved - 0.05 <= end and t <= moved + 1.0:
            rows = [r for r in pool_rows if r[1] == admin_port and r[2] == WRITER_HG and r[3] == s["to"]]
            before = [r[7] for r in rows if r[0] <= max(t, moved - 0.05)]
            during = [r[7] for r in rows if r[0] <= end + 0.02]
            if before and during and during[-1] > before[-1]:
                return "connecting to the new writer"
        if moved <= t <= moved + 1.0:
            return "the new writer's first writes (certification)"
    return STEP_CAUSES.get(where, where)


def around(t, end, switches):
    """The nearest switch's steps and each node's LOAD, in ms from its drain step's start, beside a query [t, end]."""
    s = min(switches, key=lambda s: abs(s["timeline"][0][1] - t), default=None)
    if s is None or not s.get("loads"):
        return ""
    zero = next((a for name, a, b in s["timeline"] if name == "drain"), s["timeline"][0][1])
    ms = lambda x: f"{(x - zero) * 1000:+.0f}"  # noqa: E731
    steps = " ".join(
        f"{name} {ms(a)}..{ms(b)}"
        for name, a, b in s["timeline"]
        if name in ("drain", "wait_drain", "catch_up", "move", "verify", "save")
    )
    loads = " ".join(f"LOAD({key}) {node} {ms(a)}..{ms(b)}" for node, key, a, b in s["loads"])
    return f" [query {ms(t)}..{ms(end)}; {steps}; {loads}]"


class WriterWatch:
    """Reads runtime_mysql_servers' writer hostgroup on every node every 10 ms over open admin connections."""

    def __init__(self, nodes):
        self.conns = [
            MySQLdb.connect(host="127.0.0.1", port=n.admin_port, user="admin", passwd="admin", connect_timeout=2)
            for n in nodes
        ]

    def writers(self):
        out = []
        for conn in self.conns:
            cur = conn.cursor()
            cur.execute(f"SELECT port FROM runtime_mysql_servers WHERE hostgroup_id={WRITER_HG} AND status='ONLINE'")
            out.append({int(r[0]) for r in cur.fetchall()})
        return out

    def not_online(self):
        """Per node, the runtime rows ProxySQL does not have ONLINE: [(hostgroup, port, status)...]."""
        out = []
        for conn in self.conns:
            cur = conn.cursor()
            cur.execute(
                "SELECT hostgroup_id, port, status FROM runtime_mysql_servers WHERE status<>'ONLINE' "
                "ORDER BY hostgroup_id, port"
            )
            out.append([(int(hg), int(port), status) for hg, port, status in cur.fetchall()])
        return out

    def wait_for(self, test, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(test(w) for w in self.writers()):
                return time.time()
            time.sleep(0.01)
        return None

    def close(self):
        for conn in self.conns:
            conn.close()


class Sysbench:
    """sysbench oltp_read_write through each ProxySQL node (one process per node), parsed at the end."""

    COMMON = [
        "--mysql-host=127.0.0.1",
        f"--mysql-user={APP_USER}",
        f"--mysql-password={APP_PASSWORD}",
        f"--mysql-db={APP_SCHEMA}",
        "--tables=4",
        "--table-size=10000",
        "--db-ps-mode=disable",
        # ids 1..table-size given, not left to AUTO_INCREMENT: on Galera (auto_increment_increment = cluster size)
        # the prepared ids were 1, 4, 7 .. 29998, so two thirds of the ids the load picks were missing; a DELETE of a
        # missing id takes a gap lock, and two clients inserting into one gap deadlocked (1213) under load
        "--auto_inc=off",
    ]

    def __init__(self, ports, seconds, threads, timed_dir=None):
        """timed_dir: every transaction's start and latency written there. Each thread of each process picks its ids
        from a stripe of its own (lab/sysbench/oltp_read_write_lab.lua): no two clients touch one row."""
        self.ports, self.timed_dir = ports, timed_dir
        # a seed per process: by default each seeds with the current second, so processes started together send the
        # same statements
        self.procs = [
            subprocess.Popen(
                [
                    "sysbench",
                    str(LOAD_SCRIPT),
                    *self.COMMON,
                    f"--mysql-port={p}",
                    f"--rand-seed={p}",
                    f"--threads={threads}",
                    f"--time={seconds}",
                    "--report-interval=1",
                    "--percentile=99",
                    "run",
                ],
                env={
                    **os.environ,
                    "TIMED_DIR": str(timed_dir or ""),
                    "TIMED_NAME": str(p),
                    "STRIPE": f"{i}/{len(ports) * threads}",
                },
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i, p in enumerate(ports)
        ]

    def transactions(self):
        """[(start epoch s, latency ms, port)...] of every transaction, from the timed script's files."""
        out = []
        for path in Path(self.timed_dir).glob("*.tsv"):
            port = int(path.name.split("-")[0])
            for line in path.read_text().splitlines():
                if line.strip():
                    t, ms = line.split("\t")
                    out.append((float(t), float(ms), port))
        return out

    @classmethod
    def prepare(cls, port):
        subprocess.run(
            ["sysbench", "oltp_read_write", *cls.COMMON, f"--mysql-port={port}", "cleanup"], capture_output=True
        )
        subprocess.run(
            ["sysbench", "oltp_read_write", *cls.COMMON, f"--mysql-port={port}", "prepare"],
            check=True,
            capture_output=True,
        )

    def results(self):
        out = []
        for proc in self.procs:
            text = proc.communicate()[0]

            def figure(label):
                m = re.search(rf"^\s*{label}\s+([0-9.]+)", text, re.M)
                return float(m.group(1)) if m else None

            errors = re.search(r"ignored errors:\s+(\d+)", text)
            reconnects = re.search(r"reconnects:\s+(\d+)", text)
            fatal = [
                line
                for line in text.splitlines()
                if "FATAL" in line or "error" in line.lower() and "ignored errors" not in line
            ]
            out.append(
                {
                    "transactions": figure("transactions:"),
                    "max_ms": figure("max:"),
                    "p99_ms": figure("99th percentile:"),
                    "avg_ms": figure("avg:"),
                    "ignored_errors": int(errors.group(1)) if errors else None,
                    "reconnects": int(reconnects.group(1)) if reconnects else None,
                    "exit": proc.returncode,
                    "fatal": fatal[:5],
                    "text": text,
                }
            )
        return out


class PoolSampler:
    """stats_mysql_connection_pool of every node every `every` s, timestamped: did the new writer's backend
    connections (ConnOK, ConnFree) have to be opened while clients waited?"""

    def __init__(self, nodes, every=0.02):
        self.nodes, self.every = nodes, every
        self.rows = []  # (t, admin port, hostgroup, backend port, status, ConnUsed, ConnFree, ConnOK, ConnERR, Queries)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        conns = [
            (
                n.admin_port,
                MySQLdb.connect(host="127.0.0.1", port=n.admin_port, user="admin", passwd="admin", connect_timeout=2),
            )
            for n in self.nodes
        ]
        while not self.stop.is_set():
            for port, conn in conns:
                cur = conn.cursor()
                t = time.time()
                cur.execute(
                    "SELECT hostgroup, srv_port, status, ConnUsed, ConnFree, ConnOK, ConnERR, Queries "
                    "FROM stats_mysql_connection_pool"
                )
                self.rows += [(t, port, int(r[0]), int(r[1]), r[2], *map(int, r[3:])) for r in cur.fetchall()]
            self.stop.wait(self.every)
        for _, conn in conns:
            conn.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


class WriteProbe:
    """One autocommit INSERT after another through each ProxySQL node, every query kept: (start, end, backend port,
    error, retry) in `queries[port]`, retry 1 for the first query after an error (the client's own retry). `samples`
    keeps (start, ms) of the good ones. The backend is told by the new row's id: Galera gives each node its own
    auto_increment_offset (`offsets`: offset -> backend port). Not by `@@port` in the statement: ProxySQL stops
    multiplexing a session whose query names a session variable, and the pinned probe would hold every drain."""

    def __init__(self, ports, offsets=None):
        self.offsets = offsets or {}
        self.stop = threading.Event()
        self.samples = {p: [] for p in ports}
        self.errors = {p: [] for p in ports}
        self.reconnects = {p: [] for p in ports}
        self.queries = {p: [] for p in ports}
        self.threads = [threading.Thread(target=self.run, args=(p,), daemon=True) for p in ports]

    def run(self, port):
        conn, retry = None, 0
        while not self.stop.is_set():
            start = time.time()
            try:
                if conn is None:
                    conn = MySQLdb.connect(
                        host="127.0.0.1", port=port, user=APP_USER, passwd=APP_PASSWORD, db=APP_SCHEMA, autocommit=True
                    )
                    connected = time.time()
                    conn.cursor().execute(
                        "CREATE TABLE IF NOT EXISTS bench_probe (id INT AUTO_INCREMENT PRIMARY KEY, t DOUBLE)"
                    )
                    # (start, connect ms, first statement ms): a client's reconnection after an error
                    self.reconnects[port].append((start, (connected - start) * 1000, (time.time() - connected) * 1000))
                    continue
                cur = conn.cursor()
                cur.execute("INSERT INTO bench_probe (t) VALUES (%s)", (start,))
                step = len(self.offsets) or 1
                backend = self.offsets.get((cur.lastrowid - 1) % step + 1)
            except MySQLdb.Error as exc:
                self.errors[port].append((start, str(exc)))
                self.queries[port].append((start, time.time(), None, str(exc)[:80], retry))
                conn, retry = None, 1
                time.sleep(0.01)
                continue
            end = time.time()
            self.samples[port].append((start, (end - start) * 1000))
            self.queries[port].append((start, end, backend, None, retry))
            retry = 0
        if conn is not None:
            conn.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()

    def worst(self, start=0.0, end=float("inf")):
        """The longest write that was waiting at some moment of [start, end]."""
        return max(
            (ms for samples in self.samples.values() for t, ms in samples if t <= end and t + ms / 1000 >= start),
            default=0.0,
        )

    def first_write_after(self, t):
        """When clients were served again after `t` through every node: per node the end of the first write that
        started after `t` and succeeded (a write ProxySQL held until a writer was back ends then), the latest."""
        ends = [
            min((start + ms / 1000 for start, ms in samples if start > t), default=None)
            for samples in self.samples.values()
        ]
        return None if None in ends else max(ends)

    def all_ms(self):
        return [ms for samples in self.samples.values() for _, ms in samples]


@contextmanager
def writer_watched(beat, on):
    """The writer watch on a thread while the block runs (when `on`), its trigger the triggered poll's task run here
    under the beat's lock (a worker's pool process runs one task at a time); yields the list of times it fired."""
    fired = []
    if not on:
        yield fired
        return

    def poll_now(cluster_id):
        fired.append(time.time())
        with beat.lock:
            start = time.time()
            poll_cluster_backends(cluster_id)
            beat.ticks.append((start, time.time()))

    watch = BackendWriterWatch(poll_now)

    def loop():
        try:
            watch.run()
        finally:
            close_old_connections()

    thread = threading.Thread(target=loop, name="writer watch", daemon=True)
    thread.start()
    try:
        yield fired
    finally:
        watch.stop()
        thread.join(10)


class Command(BaseCommand):
    help = "Switchovers and failover against a real ProxySQL pair (a binary built by hand); never in the suite."

    def add_arguments(self, parser):
        parser.add_argument("proxysql", help="path of the ProxySQL binary (e.g. a 2.7.1 built from source)")
        parser.add_argument(
            "--workdir",
            default=str(REPO / "var" / "bench" / "real-pair"),
            help="where the two ProxySQL datadirs go (run-1, run-2)",
        )
        parser.add_argument("--switchovers", type=int, default=10)
        parser.add_argument("--seconds", type=int, default=60, help="each load run, without and with switchovers")
        parser.add_argument("--threads", type=int, default=2, help="sysbench threads per ProxySQL node")
        parser.add_argument("--rounds", type=int, default=2, help="control run, then switchover run, this many times")
        parser.add_argument(
            "--cpu-burners",
            type=int,
            default=1,
            help="busy-loop processes the benchmark runs through the switchover rounds (extra CPU load)",
        )
        parser.add_argument("--kills", type=int, default=10, help="writer kills for the failover timing")
        parser.add_argument(
            "--switchovers-after-failover",
            type=int,
            default=2,
            help="switchovers once the killed backends are back (their rows may be SHUNNED)",
        )
        parser.add_argument(
            "--writer-watch",
            action="store_true",
            help="the kills with the writer watch running (apps/operations/writer_watch.py, on a thread here): a "
            "watched writer's closed connection polls its cluster at once (the task's code, run here under the "
            "polling thread's lock, as a worker's pool process runs one task at a time)",
        )
        parser.add_argument("--quiet-seconds", type=int, default=30, help="polling a loaded healthy writer")
        parser.add_argument(
            "--skip", action="append", default=[], choices=["metrics", "switchovers", "failover", "quiet"]
        )
        parser.add_argument(
            "--lab-name",
            help="a named Galera lab of its own (bin/lab galera --name NAME) instead of "
            "the default one, e.g. while the test suite uses that",
        )
        parser.add_argument(
            "--cluster",
            action="store_true",
            help="the two nodes run ProxySQL Cluster (native sync at its defaults): the switchovers "
            "then hold the sync (apps/operations/sync_hold.py), each is followed by a check of "
            "both nodes' three layers and sync settings, and the propagation time of each "
            "module is measured at the end",
        )
        parser.add_argument("--user", default="bench", help="the operator user the switchover command runs as")
        parser.add_argument(
            "--no-bytecode-cache",
            action="store_true",
            help="run the switchover command with this process's PYTHONDONTWRITEBYTECODE, if set",
        )
        parser.add_argument(
            "--galera-provider-options",
            default="",
            help="with --lab-name: more wsrep_provider_options for that lab, e.g. evs.suspect_timeout=PT2S",
        )
        parser.add_argument(
            "--proxysql-variable",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="set a ProxySQL global variable on both nodes before the runs (an experiment)",
        )
        parser.add_argument(
            "--pause-at",
            action="append",
            default=[],
            choices=PAUSE_STEPS,
            help="instead of the timings: a switchover with the second node SIGSTOPped at this step, "
            "then resumed, the product's retry, then both nodes restarted from their disk and their three "
            "layers read (lab/real_pair_pause.py); repeat for several runs",
        )
        parser.add_argument("--pause-seconds", type=float, default=5.0, help="how long the node stays stopped")
        parser.add_argument(
            "--pause-drain-timeout-ms", type=int, default=20000, help="the paused switchover's --drain-timeout-ms"
        )
        parser.add_argument(
            "--command-nice",
            type=int,
            default=0,
            help="run the switchover command (and its --plan-only control) under nice -n N",
        )

    def handle(self, proxysql, workdir, **o):
        for noisy in ("apps.monitoring.rounds", "apps.operations.rules"):  # a line per poll otherwise
            logging.getLogger(noisy).setLevel(logging.WARNING)
        if not os.access(proxysql, os.X_OK):
            raise CommandError(f"{proxysql!r} is not an executable ProxySQL binary")
        if not shutil.which("sysbench"):
            raise CommandError("sysbench is not installed (Debian: apt-get install sysbench)")
        self.o = {**o, "workdir": workdir}
        self.stdout.write(f"machine: {machine()}")
        lab = (
            GaleraLab(name=o["lab_name"], provider_options=o["galera_provider_options"])
            if o["lab_name"]
            else GaleraLab()
        )
        lab.up()
        peers = {f"proxysql-{i + 1}": a for i, a in enumerate(ADMIN_PORTS)} if o["cluster"] else None
        nodes = [
            RealProxySQL(proxysql, Path(workdir) / f"run-{i + 1}", a, c, peers=peers, name=f"proxysql-{i + 1}")
            for i, (a, c) in enumerate(zip(ADMIN_PORTS, CLIENT_PORTS))
        ]
        with private_redis():
            self.bench(lab, nodes, proxysql)

    def bench(self, lab, nodes, proxysql):
        o = self.o
        self.nodes, self.runs = nodes, 0
        try:
            for node in nodes:
                version = node.start()
                node.admin(*demo.seed_statements(backend_ports=lab.ports), *APP_STATEMENTS)
                if o["proxysql_variable"]:  # an experiment on ProxySQL's own settings (printed)
                    node.admin(
                        *[
                            f"UPDATE global_variables SET variable_value='{v.split('=', 1)[1]}' WHERE "
                            f"variable_name='{v.split('=', 1)[0]}'"
                            for v in o["proxysql_variable"]
                        ],
                        "LOAD MYSQL VARIABLES TO RUNTIME",
                    )
                    self.stdout.write(f"ProxySQL :{node.admin_port} variables set: {o['proxysql_variable']}")
            self.stdout.write(f"ProxySQL: {proxysql}, SELECT @@version on admin: {version}")
            lab.heal()
            if o["pause_at"]:
                from lab.real_pair_pause import run_pauses

                self.ensure_user()
                run_pauses(self, self.adopt(nodes), nodes)
                return
            Sysbench.prepare(lab.ports[0])
            self.offsets = autoinc_offsets(lab.ports)
            cluster = self.adopt(nodes)
            if o["cluster"]:
                self.sync_before = {n.name: self.sync_settings(n) for n in nodes}
                self.stdout.write(
                    f"ProxySQL Cluster: each node lists both in proxysql_servers; sync settings "
                    f"{self.sync_before[nodes[0].name]['runtime']}"
                )
            if "metrics" not in o["skip"]:
                self.check_metrics(cluster, nodes)
            if "switchovers" not in o["skip"]:
                self.bench_switchovers(cluster, nodes)
            if "failover" not in o["skip"]:
                self.bench_failover(cluster, lab, nodes)
            if "quiet" not in o["skip"]:
                self.bench_false_failovers(cluster, lab, nodes)
            if o["cluster"]:
                self.bench_propagation()
        finally:
            for node in nodes:
                node.stop()
            lab.heal()

    def adopt(self, nodes):
        cluster = adopt_nodes([n.admin_port for n in nodes], f"real-{int(time.time())}", "real")
        self.stdout.write(
            f"adopted as {cluster.name}: kind {cluster.kind}, writer {cluster.writer_hostgroup}, "
            f"reader {cluster.reader_hostgroup}, writer also reader {cluster.writer_is_also_reader}"
        )
        return cluster

    # -- 0. what Prometheus reads of the real nodes --------------------------------------------------------
    def check_metrics(self, cluster, nodes):
        """The real nodes polled once, then /metrics/targets, /metrics and the cluster's /metrics/pool read as
        Prometheus reads them, against each node's own stats_mysql_connection_pool read right after: the same rows
        (hostgroup, server), the same status, and counters no greater than the node's. Raises on any difference."""
        from django.test import Client

        from apps.fleet.models import ProxySQLNode
        from apps.monitoring import pollers
        from apps.monitoring.tests.test_metrics import series

        pollers.proxysql_round(list(ProxySQLNode.objects.filter(cluster=cluster).select_related("cluster")))
        client = Client()
        targets = client.get("/metrics/targets", REMOTE_ADDR="127.0.0.1").json()
        pool_paths = [t for t in targets if t["labels"].get("__param_cluster") == cluster.name]
        fleet = series(client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())
        response = client.get("/metrics/pool", {"cluster": cluster.name}, REMOTE_ADDR="127.0.0.1")
        if response.status_code != 200 or len(pool_paths) != 1:
            raise CommandError(
                f"/metrics/pool?cluster={cluster.name}: HTTP {response.status_code}, "
                f"{len(pool_paths)} targets listed for it"
            )
        exported = series(response.content.decode())
        by_port = {n.admin_port: n for n in nodes}
        checked = 0
        for node in ProxySQLNode.objects.filter(cluster=cluster):
            labels = {"cluster": cluster.name, "node": node.name}
            if fleet[("proxysql_fleet_proxysql_up", frozenset(labels.items()))] != 1:
                raise CommandError(f"/metrics: proxysql_up of {node.name} is not 1")
            direct = by_port[node.admin_port].admin(
                "SELECT hostgroup, srv_host, srv_port, status, Queries, ConnERR FROM stats_mysql_connection_pool"
            )
            mine = {}
            for name, row_labels in exported:
                row_labels = dict(row_labels)
                if name == "proxysql_fleet_pool_server_status" and row_labels["node"] == node.name:
                    mine[(row_labels["hostgroup"], row_labels["server"])] = row_labels["status"]
            theirs = {(str(hg), f"{host}:{port}"): status for hg, host, port, status, _, _ in direct}
            if mine != theirs:
                raise CommandError(
                    f"{node.name}: /metrics/pool rows {sorted(mine)} differ from the node's "
                    f"stats_mysql_connection_pool {sorted(theirs)}"
                )
            for hg, host, port, _, queries, errors in direct:
                row = frozenset({**labels, "hostgroup": str(hg), "server": f"{host}:{port}"}.items())
                if not (
                    exported[("proxysql_fleet_pool_queries_total", row)] <= float(queries)
                    and exported[("proxysql_fleet_pool_connection_errors_total", row)] <= float(errors)
                ):
                    raise CommandError(f"{node.name} {hg} {host}:{port}: an exported counter is ahead of the node's")
                checked += 1
        self.stdout.write(
            f"metrics: /metrics/targets lists /metrics and {len(targets) - 1} pool target(s); "
            f"/metrics/pool?cluster={cluster.name}: {checked} rows of {len(nodes)} real nodes, each "
            f"with the node's status and counters no greater than the node's ({len(exported)} series; "
            f"/metrics {len(fleet)} series)"
        )

    # -- 1. the client's worst response -----------------------------------------------------------------
    def load_run(self, label, switch=0, plan_only=False):
        """sysbench and the write probe for --seconds; `switch` runs of the switchover command meanwhile, or
        with plan_only the same command at the same moments with --plan-only (it plans, nothing runs): the
        control, which costs the machine the same CPU without switching."""
        seconds = self.o["seconds"]
        self.stdout.write(f"{label}: load average {loadavg()} at the start")
        self.runs += 1
        timed_dir = Path(self.o["workdir"]) / f"timed-{self.runs}"
        shutil.rmtree(timed_dir, ignore_errors=True)
        timed_dir.mkdir(parents=True)
        bench = Sysbench(CLIENT_PORTS, seconds, self.o["threads"], timed_dir)
        switches = []
        pools = PoolSampler(self.nodes).__enter__()
        probe = WriteProbe(CLIENT_PORTS, self.offsets).__enter__()
        if switch:
            cluster = self.cluster
            gap = (seconds - 6) / switch
            start = time.monotonic()
            for i in range(switch):
                time.sleep(max(0.0, start + 3 + i * gap - time.monotonic()))
                writer = switchover.current_writer(cluster).server
                target = Server.objects.filter(cluster=cluster).exclude(pk=writer.pk).order_by("port").first()
                began = time.time()
                result = self.switch(cluster, target, plan_only)
                result["probe_command_ms"] = probe.worst(began, time.time())
                result["probe_hold_ms"] = probe.worst(*result["window"]) if result["window"] else None
                result["load"] = os.getloadavg()[0]
                switches.append(result)
        results = bench.results()
        probe.__exit__()
        pools.__exit__()
        placed = self.place_worst(label, bench.transactions(), switches, pools.rows, probe, timed_dir)
        values = probe.all_ms()
        errors = sum(len(e) for e in probe.errors.values())
        self.stdout.write(
            f"  write probe (one autocommit INSERT after another through each node): {len(values)} "
            f"queries, {errors} errors, max {max(values, default=0):.1f} ms, p99 {pct(values, 99):.1f} ms"
            + (f"; first errors: {[e for errs in probe.errors.values() for e in errs][:3]}" if errors else "")
        )
        results.append(
            {
                "probe_max_ms": max(values, default=0.0),
                "probe_p99_ms": pct(values, 99),
                "probe_errors": errors,
                **placed,
            }
        )
        self.stdout.write(f"  load average {loadavg()} at the end")
        for port, r in zip(CLIENT_PORTS, results[:2]):
            self.stdout.write(
                f"  sysbench through :{port}: {r['transactions']:.0f} transactions, max {r['max_ms']} ms, "
                f"p99 {r['p99_ms']} ms, avg {r['avg_ms']} ms, ignored errors {r['ignored_errors']}, "
                f"reconnects {r['reconnects']}, exit {r['exit']}"
                + (f", errors: {r['fatal']}" if r["exit"] or r["fatal"] else "")
            )
        return results, switches

    def place_worst(self, label, transactions, switches, pool_rows, probe, timed_dir, top=8):
        """Every sysbench transaction set against the command's phases: the worst ones placed, the slow ones
        counted per phase, the new writer's backend connections around the move; raw data kept as JSON."""
        if not transactions:
            self.stdout.write("  (no timed transactions)")
            return {}
        admin_of = dict(zip(CLIENT_PORTS, ADMIN_PORTS))
        ms_sorted = sorted(ms for _, ms, _ in transactions)
        self.stdout.write(
            f"  timed transactions: {len(transactions)}, max {ms_sorted[-1]:.1f} ms, p99 "
            f"{pct(ms_sorted, 99):.1f}, p99.9 {pct(ms_sorted, 99.9):.1f} ms"
        )
        for t, ms, port in sorted(transactions, key=lambda x: -x[1])[:top]:
            where = attribute(t, t + ms / 1000, switches, pool_rows, admin_of[port])
            near = min(switches, key=lambda s: abs(s["timeline"][0][1] - t), default=None)
            offset = f", {(t - near['timeline'][0][1]) * 1000:+.0f} ms from the nearest command's spawn" if near else ""
            self.stdout.write(
                f"    {ms:7.1f} ms through :{port} at {time.strftime('%H:%M:%S', time.gmtime(t))}"
                f"{f'{t % 1:.3f}'[1:]}: {where}{offset}{around(t, t + ms / 1000, switches)}"
            )
        worst_t, worst_ms, worst_port = max(transactions, key=lambda x: x[1])
        placed = {
            "worst_ms": worst_ms,
            "p99_ms": pct(ms_sorted, 99),
            "worst_where": attribute(worst_t, worst_t + worst_ms / 1000, switches, pool_rows, admin_of[worst_port]),
        }
        queries = [(port, *q) for port, qs in probe.queries.items() for q in qs]
        if queries:
            q_ms = [(end - start) * 1000 for _, start, end, *_ in queries]
            port, start, end, backend, error, retry = max(queries, key=lambda q: q[2] - q[1])
            where = attribute(start, end, switches, pool_rows, admin_of[port], retry, error)
            placed.update(probe_worst_ms=max(q_ms), probe_p99_ms=pct(q_ms, 99), probe_worst_where=where)
            self.stdout.write(
                f"    probe's worst query: {(end - start) * 1000:.1f} ms through :{port} to backend "
                f"{backend}{f', error {error}' if error else ''}{', a retry' if retry else ''}: {where}"
                f"{around(start, end, switches)}"
            )
            counts = {}
            for port, start, end, backend, error, retry in queries:
                if (end - start) * 1000 > 50 or error:
                    cause = attribute(start, end, switches, pool_rows, admin_of[port], retry, error)
                    counts[cause] = counts.get(cause, 0) + 1
            self.stdout.write(
                "    probe queries over 50 ms or failed, by cause: "
                + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none")
            )
        if switches:
            self.stdout.write(
                f"    the command's CPU (user+sys) {summary([s['cpu_ms'] for s in switches])}, wall clock "
                f"{summary([s['wall_ms'] for s in switches])}"
            )
        seconds, slow = {}, {}
        for s in switches:
            for name, a, b in s["timeline"]:
                seconds[name] = seconds.get(name, 0.0) + (b - a)
        for threshold in (50, 100, 200):
            counts = {}
            for t, ms, _ in transactions:
                if ms > threshold:
                    where = phase_of(t, ms, switches)
                    counts[where] = counts.get(where, 0) + 1
            slow[threshold] = counts
            self.stdout.write(
                f"    transactions over {threshold} ms by phase: "
                + ", ".join(
                    f"{k} {v}" + (f" in {seconds[k]:.2f} s" if k in seconds else "") for k, v in sorted(counts.items())
                )
            )
        # the new writer's backend connections in the writer hostgroup around each move
        for s in switches:
            move = next(((a, b) for name, a, b in s["timeline"] if name == "move"), None)
            if move is None:
                continue
            for node in self.nodes:
                rows = [r for r in pool_rows if r[1] == node.admin_port and r[2] == WRITER_HG and r[3] == s["to"]]
                before = [r for r in rows if r[0] <= move[0]]
                after = [r for r in rows if move[1] <= r[0] <= move[1] + 1.0]
                if before and after:
                    b, a = before[-1], after[-1]
                    s.setdefault("pool", []).append(
                        f":{node.admin_port} free {b[6]}->{a[6]} ConnOK +{a[7] - b[7]} ConnERR +{a[8] - b[8]}"
                    )
            if s.get("pool"):
                self.stdout.write(
                    f"    switch to {s['to']}: new writer in hg {WRITER_HG}, last sample before the move "
                    f"-> 1 s after: {'; '.join(s['pool'])}"
                )
        (timed_dir / "trace.json").write_text(
            json.dumps(
                {
                    "label": label,
                    "switches": [{k: v for k, v in s.items()} for s in switches],
                    "slow": [x for x in transactions if x[1] > 20],
                    "slow_by_phase": slow,
                    "probe": {str(p): v for p, v in probe.samples.items()},
                    "probe_queries": {str(p): v for p, v in probe.queries.items()},
                    "pool": [r for r in pool_rows if r[2] == WRITER_HG],
                },
                default=str,
            )
        )
        return placed

    def command_env(self):
        """The command's environment. With --no-bytecode-cache as this process has it (PYTHONDONTWRITEBYTECODE set:
        every project module compiled again by each command); by default bytecode is cached, under var/bench/, as
        on an operator's host where the installed code has its .pyc files."""
        env = dict(os.environ)
        if not self.o["no_bytecode_cache"]:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(REPO / "var" / "bench" / "pycache")
        return env

    def switch(self, cluster, target, plan_only=False):
        """One switchover through the operator's command, in a process of its own as a runbook runs it."""
        cmd = [
            sys.executable,
            "manage.py",
            "switchover",
            cluster.name,
            "--to",
            f"{target.hostname}:{target.port}",
            "--user",
            self.o["user"],
            "--lower-autoinc",
            "--yes",
            "--json",
            *(["--plan-only"] if plan_only else []),
        ]
        if self.o["command_nice"]:
            cmd = ["nice", "-n", str(self.o["command_nice"]), *cmd]
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        spawned = time.time()
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=self.command_env())
        exited = time.time()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # only the command: sysbench is not reaped yet
        cpu_ms = (after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime) * 1000
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        outcome = next((e for e in events if e.get("event") == "outcome"), {})
        op = Operation.objects.filter(pk=outcome.get("operation")).first()
        hold = loads = inside = window = None
        if op is not None and not plan_only:
            steps = {s.key: s for s in op.steps.all()}
            if "drain" in steps and "move" in steps and steps["move"].finished_at and steps["drain"].finished_at:
                hold = (steps["move"].finished_at - steps["drain"].finished_at).total_seconds() * 1000
                window = (steps["drain"].started_at.timestamp(), steps["move"].finished_at.timestamp())
                # the steps' own durations inside the hold; the rest is the executor's bookkeeping between them
                inside = sum(steps[k].duration_ms or 0 for k in ("wait_drain", "catch_up", "move") if k in steps)
                loads = [
                    e["ms"]
                    for k in ("drain", "move")
                    for e in (steps[k].executed or [])
                    if isinstance(e, dict) and e.get("sql") == "LOAD MYSQL SERVERS TO RUNTIME"
                ]
        result = {
            "exit": done.returncode,
            "state": outcome.get("state"),
            "error": outcome.get("error"),
            "timings": outcome.get("timings") or {},
            "hold_ms": hold,
            "to": target.port,
            "between_steps_ms": None if hold is None else hold - inside,
            "load_ms": loads or [],
            "window": window,
            "timeline": timeline(op, spawned, exited),
            "plan_only": plan_only,
            "loads": load_windows(op) if op is not None and not plan_only else [],
            "cpu_ms": cpu_ms,
            "wall_ms": (exited - spawned) * 1000,
        }
        if done.returncode:
            self.stdout.write(
                f"  switchover to {target.port}: exit {done.returncode}, {result['state']}: "
                f"{result['error']} {done.stderr[-500:]}"
            )
        if self.o["cluster"] and not plan_only:
            result["held_sync"] = op is not None and {"sync_hold", "sync_restore"} <= {s.key for s in op.steps.all()}
            result["cluster_problems"] = self.cluster_problems()
            for problem in result["cluster_problems"]:
                self.stdout.write(f"  after the switchover to {target.port}: {problem}")
        return result

    # -- ProxySQL Cluster mode (--cluster) ---------------------------------------------------------------
    def sync_settings(self, node):
        """{layer: {variable: value}} of the node's admin-cluster_*_diffs_before_sync in memory, runtime, disk."""
        where = "WHERE variable_name LIKE 'admin-cluster%diffs_before_sync'"
        return {
            layer: dict(node.admin(f"SELECT variable_name, variable_value FROM {table} {where}"))
            for layer, table in (
                ("memory", "main.global_variables"),
                ("runtime", "runtime_global_variables"),
                ("disk", "disk.global_variables"),
            )
        }

    @staticmethod
    def server_layers(node):
        """{layer: sorted mysql_servers rows} of one node; SHUNNED counts as ONLINE (ProxySQL's own verdict) and
        runtime's OFFLINE_HARD rows (a removed server kept until its connections close) are left out."""
        out = {}
        for layer, prefix in (("memory", "main."), ("runtime", "runtime_"), ("disk", "disk.")):
            rows = node.admin(f"SELECT hostgroup_id, hostname, port, status, weight FROM {prefix}mysql_servers")
            out[layer] = sorted(
                (hg, host, int(port), "ONLINE" if st == "SHUNNED" else st, int(w))
                for hg, host, port, st, w in rows
                if st != "OFFLINE_HARD"
            )
        return out

    def cluster_problems(self):
        """What differs after an operation: a node's three layers of mysql_servers, the two nodes, or the sync
        settings against what they were before the first switchover. An empty list when all agree."""
        problems = []
        layers = [self.server_layers(n) for n in self.nodes]
        for node, by_layer in zip(self.nodes, layers):
            if not by_layer["memory"] == by_layer["runtime"] == by_layer["disk"]:
                problems.append(f"{node.name}: mysql_servers layers differ: {by_layer}")
        if layers[0]["runtime"] != layers[1]["runtime"]:
            problems.append(f"the nodes' runtime mysql_servers differ: {layers[0]['runtime']} / {layers[1]['runtime']}")
        for node in self.nodes:
            now = self.sync_settings(node)
            if now != self.sync_before[node.name]:
                problems.append(f"{node.name}: sync settings {now} (before: {self.sync_before[node.name]})")
        return problems

    def bench_propagation(self, loads=3, modules=None):
        """Per module, a change LOADed on the first node (never saved there) until the second node's runtime checksum
        equals it: ProxySQL Cluster's own propagation at its defaults (lab/capture_cluster_sync.py's changes)."""
        from lab.capture_cluster_sync import MODULES, change, settle, wait_converged

        origin, peer = self.nodes
        nodes = {n.name: n for n in self.nodes}
        self.stdout.write(
            "ProxySQL Cluster propagation (a LOAD on the first node -> the second node's runtime "
            f"checksum equal), {loads} loads a module:"
        )
        for module in modules or MODULES:
            times = []
            for n in range(1, loads + 1):
                settle()  # two LOADs in one second share an epoch (the reference's cluster facts)
                t_load = change(origin, module, 1000 + n)
                times.append(wait_converged(nodes, origin, module, t_load, timeout=15.0)[peer.name])
            got = [t * 1000 for t in times if t is not None]
            missed = len(times) - len(got)
            self.stdout.write(
                f"  {module}: {summary(got) if got else 'never'}"
                f"{f', {missed} of {loads} not within 15 s' if missed else ''} "
                f"(each: {', '.join('-' if t is None else f'{t * 1000:.0f}' for t in times)} ms)"
            )

    def bench_switchovers(self, cluster, nodes):
        self.ensure_user()
        self.cluster = cluster
        n, seconds = self.o["switchovers"], self.o["seconds"]
        quiet, busy, switches, controls = [], [], [], []
        # an extra CPU load of the benchmark's own (busy loops at the default priority) through every run, so that the
        # figures are those of a busy machine whatever else runs on it
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.o["cpu_burners"])]
        self.stdout.write(f"extra CPU load: {len(burners)} busy loop(s) through the load runs")
        try:
            for r in range(self.o["rounds"]):  # control and switch runs alternate: the machine's load drifts
                results, runs = self.load_run(
                    f"round {r + 1}, control: the command {n} times with --plan-only ({seconds} s)",
                    switch=n,
                    plan_only=True,
                )
                quiet.append(results)
                controls += runs
                results, runs = self.load_run(f"round {r + 1}: {n} switchovers ({seconds} s)", switch=n)
                busy.append(results)
                switches += runs
        finally:
            for proc in burners:
                proc.kill()
                proc.wait()
        done = [s for s in switches if s["state"] == "done"]
        self.stdout.write(
            f"switchovers: {len(done)} of {len(switches)} done "
            f"({', '.join(sorted({str(s['state']) for s in switches}))})"
        )
        if self.o["cluster"]:
            self.stdout.write(
                f"ProxySQL Cluster: {sum(1 for s in switches if s['held_sync'])} of {len(switches)} "
                f"held the sync (sync_hold ... sync_restore steps); after "
                f"{sum(1 for s in switches if not s['cluster_problems'])} of {len(switches)} both nodes' "
                f"memory, runtime and disk agreed and the sync settings were back in every layer"
            )
        for label, values in (
            (
                "writer hold (drain step start -> move step end, both nodes)",
                [(s["window"][1] - s["window"][0]) * 1000 for s in done if s["window"]],
            ),
            ("drain wait", [s["timings"].get("wait_drain", 0) for s in done]),
            ("Galera catch-up", [s["timings"].get("catch_up", 0) for s in done]),
            ("move step (both nodes)", [s["timings"].get("move", 0) for s in done]),
            (
                "LOAD MYSQL SERVERS TO RUNTIME on one real node (drain and move)",
                [ms for s in done for ms in s["load_ms"]],
            ),
            (
                "in the hold but between the steps (the executor's bookkeeping)",
                [s["between_steps_ms"] for s in done if s["between_steps_ms"] is not None],
            ),
            ("operation total", [s["timings"].get("total_ms", 0) for s in done]),
            ("longest probe write overlapping the hold", [s["probe_hold_ms"] for s in done]),
            ("longest probe write while the switchover command ran", [s["probe_command_ms"] for s in done]),
            (
                "control: longest probe write while the --plan-only command ran",
                [s["probe_command_ms"] for s in controls],
            ),
        ):
            if values:
                self.stdout.write(f"  {label}: {summary(values)} (each: {', '.join(f'{v:.0f}' for v in values)})")
        for r, (q, b) in enumerate(zip(quiet, busy), 1):
            worst_q, worst_b = max(x["max_ms"] or 0 for x in q[:2]), max(x["max_ms"] or 0 for x in b[:2])
            self.stdout.write(
                f"round {r}: client worst response (sysbench transaction) {worst_b} ms with switchovers, "
                f"{worst_q} ms in the control: difference {worst_b - worst_q:.2f} ms (target: within 40 ms); "
                f"p99 {max(x['p99_ms'] or 0 for x in b[:2])} / {max(x['p99_ms'] or 0 for x in q[:2])} ms; "
                f"write probe worst {b[2]['probe_max_ms']:.1f} / {q[2]['probe_max_ms']:.1f} ms, "
                f"errors {b[2]['probe_errors']} / {q[2]['probe_errors']}; sysbench ignored errors "
                f"{sum(x['ignored_errors'] or 0 for x in b[:2])} / {sum(x['ignored_errors'] or 0 for x in q[:2])}, "
                f"reconnects {sum(x['reconnects'] or 0 for x in b[:2])} / {sum(x['reconnects'] or 0 for x in q[:2])}"
            )
        self.stdout.write("per round, switch - control (timed sysbench transactions and the probe's every query):")
        for r, (q, b) in enumerate(zip(quiet, busy), 1):
            sq, sb = q[2], b[2]
            if "worst_ms" not in sq or "worst_ms" not in sb:
                continue
            self.stdout.write(
                f"  round {r}: sysbench worst {sb['worst_ms']:.1f} / {sq['worst_ms']:.1f} ms "
                f"({sb['worst_ms'] - sq['worst_ms']:+.1f}), p99 {sb['p99_ms']:.1f} / {sq['p99_ms']:.1f} "
                f"({sb['p99_ms'] - sq['p99_ms']:+.1f}); worst in: {sb['worst_where']} / {sq['worst_where']}"
                + (
                    f"; probe worst {sb['probe_worst_ms']:.1f} / {sq['probe_worst_ms']:.1f} "
                    f"({sb['probe_worst_ms'] - sq['probe_worst_ms']:+.1f}), p99 {sb['probe_p99_ms']:.1f} / "
                    f"{sq['probe_p99_ms']:.1f} ({sb['probe_p99_ms'] - sq['probe_p99_ms']:+.1f}); probe worst in: "
                    f"{sb['probe_worst_where']} / {sq['probe_worst_where']}"
                    if "probe_worst_ms" in sb
                    else ""
                )
            )

    # -- 2. failover ------------------------------------------------------------------------------------
    def at_default_policy(self, cluster):
        from lab.management.commands.bench_operations import FAILOVER_POLICY

        defaults = {f.name: f.default for f in Cluster._meta.fields if f.name in FAILOVER_POLICY}
        Cluster.objects.filter(pk=cluster.pk).update(
            auto_failover_enabled=True, read_pool_rules_enabled=False, **defaults
        )
        cluster.refresh_from_db()
        return ", ".join(f"{k}={v}" for k, v in sorted(defaults.items()))

    def bench_failover(self, cluster, lab, nodes):
        policy = self.at_default_policy(cluster)
        interval = getattr(cluster, "backend_poll_interval_s", None) or cluster.poll_interval_s
        watch = WriterWatch(nodes)
        rng = random.Random()
        times, moves, loads, after, parts = [], [], [], [], []
        # clients through both nodes during each kill, so that ProxySQL meets the dead writer itself (and shuns it)
        probe = WriteProbe(CLIENT_PORTS).__enter__()
        try:
            for _ in range(self.o["kills"]):
                lab.heal()
                live.client().flushdb()
                writer = switchover.current_writer(cluster).server
                before = set(Operation.objects.filter(kind=OperationKind.FAILOVER).values_list("pk", flat=True))
                with Beat() as beat, writer_watched(beat, self.o["writer_watch"]) as fired:
                    time.sleep(2.5 + rng.uniform(0, interval))
                    loads.append(os.getloadavg()[0])
                    killed = time.time()
                    lab.kill(lab.ports.index(writer.port) + 1)
                    seen = watch.wait_for(lambda ports: bool(ports) and writer.port not in ports, 20)
                    time.sleep(0.2)  # the operation's last steps (verify, save, inventory)
                    after.append(watch.not_online())
                op = Operation.objects.filter(kind=OperationKind.FAILOVER).exclude(pk__in=before).order_by("pk").first()
                ticks = sorted(beat.ticks)  # a triggered poll is a poll round too
                if op is not None:
                    fired_after = [f"{(t - killed) * 1000:+.0f}" for t in fired if t >= killed]
                    self.stdout.write(
                        f"  kill of {writer.port}: "
                        + (
                            f"writer watch fired {', '.join(fired_after) or 'never'}; "
                            if self.o["writer_watch"]
                            else ""
                        )
                        + kill_timeline(killed, ticks, op, seen)
                    )
                if seen is not None and op is not None:
                    parts.append(failover_parts(killed, ticks, op, seen))
                    parts[-1]["killed"] = killed  # the clients' side is read at the end (a held write ends later)
                if seen is None:
                    self.stdout.write(
                        f"  kill of {writer.port}: no new writer on both nodes within 20 s "
                        f"({op and op.state}: {op and op.error}; writers now {watch.writers()})"
                    )
                    continue
                times.append((seen - killed) * 1000)
                if op is not None and op.timings:
                    moves.append(op.timings.get("total_ms", 0))
            lab.heal()
            switched = self.switch_after_failovers(cluster, watch)
        finally:
            probe.__exit__()
            watch.close()
        lab.heal()
        around = []
        for p in parts:  # each node's writes and errors from 0.5 s before each kill to 12 s after, kept as JSON
            at = p["killed"]
            around.append(
                {
                    "killed": at,
                    "writes": {
                        port: [(t - at, ms) for t, ms in v if at - 0.5 <= t <= at + 12]
                        for port, v in probe.samples.items()
                    },
                    "errors": {
                        port: [(t - at, e) for t, e in v if at - 0.5 <= t <= at + 12]
                        for port, v in probe.errors.items()
                    },
                    "reconnects": {
                        port: [(t - at, c, q) for t, c, q in v if at - 0.5 <= t <= at + 12]
                        for port, v in probe.reconnects.items()
                    },
                }
            )
        (Path(self.o["workdir"]) / "failover-writes.json").write_text(json.dumps(around))
        for p in parts:
            at = p.pop("killed")
            served = probe.first_write_after(at)
            if served is not None:
                p["kill -> a client's write served again through both nodes"] = (served - at) * 1000
        errors = [e for errs in probe.errors.values() for e in errs]
        self.stdout.write(
            f"  clients during the kills (write probe through both nodes): {len(probe.all_ms())} writes, "
            f"{len(errors)} errors ({sorted({e[1][:60] for e in errors})[:3]})"
        )
        self.stdout.write(
            "  rows not ONLINE in runtime right after each failover, per node: " + "; ".join(str(a) for a in after)
        )
        self.stdout.write(f"  switchovers after the failovers: {switched}")
        if times:
            self.stdout.write(
                f"failover at the default policy ({policy}), writer kill -9 at a random moment of the "
                f"{interval:g} s cycle, {len(times)} runs, 1-min load average at each kill "
                f"{', '.join(f'{x:.1f}' for x in loads)}:"
            )
            self.stdout.write(
                f"  kill -> new writer ONLINE in runtime on both real nodes (10 ms polls): "
                f"{summary(times)} (each: {', '.join(f'{x:.0f}' for x in times)})"
            )
            if moves:
                self.stdout.write(f"  of which the failover operation itself: {summary(moves)}")
            self.stdout.write(f"  under 1 s: {sum(t < 1000 for t in times)} of {len(times)}")
            for name in dict.fromkeys(k for p in parts for k in p):
                values = [p[name] for p in parts if name in p]
                self.stdout.write(
                    f"    {name}: {summary(values)} (each: {', '.join(f'{v:.0f}' for v in values)})"
                    + (
                        f"; under 1 s: {sum(v < 1000 for v in values)} of {len(values)}"
                        if name.startswith("kill -> ") and name != "kill -> next poll starts"
                        else ""
                    )
                )

    def switch_after_failovers(self, cluster, watch):
        """Switchovers once the killed backends are back: ProxySQL may still have their rows SHUNNED in
        runtime (issue 9, item 1); the product must not refuse for that."""
        self.ensure_user()
        out = []
        for _ in range(self.o["switchovers_after_failover"]):
            writer = switchover.current_writer(cluster).server
            target = Server.objects.filter(cluster=cluster).exclude(pk=writer.pk).order_by("port").first()
            shunned = watch.not_online()
            result = self.switch(cluster, target)
            out.append(
                f"to {target.port} with {shunned} not ONLINE: {result['state']}"
                + (f" ({result['error']})" if result["error"] else "")
            )
        return out

    def ensure_user(self):
        from django.core.management import call_command

        call_command(
            "ensure_user", self.o["user"], role="operator", password="bench-operator", stdout=open(os.devnull, "w")
        )

    # -- 3. false failovers -----------------------------------------------------------------------------
    def bench_false_failovers(self, cluster, lab, nodes):
        policy = self.at_default_policy(cluster)
        lab.heal()
        live.client().flushdb()
        seconds = self.o["quiet_seconds"]
        before = Operation.objects.filter(kind=OperationKind.FAILOVER).count()
        writer = switchover.current_writer(cluster).server
        stop = threading.Event()
        burners = [threading.Thread(target=_cpu_load, args=(writer.port, stop), daemon=True) for _ in range(2)]
        self.stdout.write(f"false failovers ({policy}): load average {loadavg()} at the start")
        polls = PollCounter(writer)
        with polls, Beat():
            bench = Sysbench(CLIENT_PORTS, seconds, self.o["threads"] * 2)
            for t in burners:
                t.start()
            results = bench.results()
            stop.set()
            for t in burners:
                t.join()
            counted = polls.take()
        failovers = Operation.objects.filter(kind=OperationKind.FAILOVER).count() - before
        self.stdout.write(
            f"  {seconds} s of sysbench ({self.o['threads'] * 2} threads per node, "
            f"{sum(r['transactions'] or 0 for r in results):.0f} transactions, exits "
            f"{[r['exit'] for r in results]}) and 2 CPU-burning sessions on the writer {writer.port}: "
            f"{counted}; failovers: {failovers}; load average {loadavg()} at the end"
        )
