"""Benchmark of guarded operations against the Galera lab and two ProxySQL admin doubles.

    bin/bench-operations            (a scratch database under var/bench/, a private redis-server)

Measures:
- switchovers, planned as the operator's default plans them (no choice about the auto-increment delay: the
  writer sessions are pinned by auto-increment tokens, so the planner lowers it for the drain; counted, with
  the client errors of the doubles' traffic model): the whole operation and its parts, the writer hold (on each ProxySQL node, from the LOAD
  that drains the old writer to the LOAD that puts the new one in: read from the doubles' statement log),
  and how long the doubles' client sessions waited for a usable writer (their traffic model holds a
  query while its hostgroup has no usable server, as ProxySQL does); and that A→B→A gives back the
  original layout, row for row.
- read-pool rules: from a recv-queue threshold crossing seen by a poll to the runtime change.
- failover at the cluster's default policy: kill -9 of the writer at a random moment of the polling
  cycle, with polls driven like beat drives them (the backend polling task every second), to the new
  writer in runtime on every node.
- false failovers: many poll cycles with a heavily loaded writer, and with a writer that stalls (its
  process stopped for longer than a poll's timeout, then continued): the failovers counted must be 0.
Prints the machine.
"""

import contextlib
import logging
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import MySQLdb
from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from apps.audit.actor import Actor
from apps.clients.proxysql import ProxySQLAdmin
from apps.configuration import adoption as adopt
from apps.fleet.models import Cluster, Server
from apps.monitoring import live, pollers
from apps.operations import executor, rules, services, switchover
from apps.operations.choices import OperationKind
from apps.operations.models import Operation
from lab import demo
from lab.galera import GaleraLab
from lab.proxysql_double import ProxySQLDouble

LOAD_SERVERS = "LOAD MYSQL SERVERS TO RUNTIME"
# The cluster policy fields the failover benchmarks take at their model defaults.
FAILOVER_POLICY = ("poll_interval_s", "backend_poll_interval_s", "failover_after_polls")


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = next((int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem} MiB RAM, Python {platform.python_version()}, "
        f"Django DB {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}, load average {load}"
    )


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def summary(values, unit="ms"):
    return (
        f"median {statistics.median(values):.1f} {unit}, p95 {pct(values, 95):.1f} {unit}, max {max(values):.1f} {unit}"
    )


def log_since(double, seq):
    """The double's statement log after `seq`: [{"seq", "t" (wall clock), "sql"}...]."""
    return [e for e in list(double.engine.log) if e["seq"] > seq]


def last_seq(double):
    return double.engine.log_seq


def layout(double):
    return sorted(
        demo.admin_sql(
            double.port,
            "SELECT hostgroup_id, hostname, port, status, weight, max_connections, comment FROM runtime_mysql_servers",
        )
    )


@contextlib.contextmanager
def private_redis():
    """A redis-server of the benchmark's own on a free port, for the latest-state documents; settings and the
    environment (for the commands the benchmark starts) point at it."""
    redis_dir = tempfile.mkdtemp(prefix="bench-redis-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        redis_port = s.getsockname()[1]
    redis = subprocess.Popen(
        [
            shutil.which("redis-server"),
            "--port",
            str(redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            redis_dir,
        ],
        stdout=subprocess.DEVNULL,
    )
    settings.REDIS_URL = os.environ["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    try:
        time.sleep(0.3)
        yield
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(redis_dir, ignore_errors=True)


def adopt_nodes(admin_ports, name, node_prefix):
    """Adopt the ProxySQL nodes on these admin ports (admin/admin) into one new cluster, as an operator would."""
    for i, port in enumerate(admin_ports, 1):
        with ProxySQLAdmin("127.0.0.1", port, "admin", "admin") as admin:
            snapshot, monitor = adopt.read_snapshot(admin), adopt.read_monitor_credentials(admin)
        plan = adopt.plan_adoption(
            snapshot, cluster_name=name, node_name=f"{node_prefix}{i}", admin_host="127.0.0.1", admin_port=port
        )
        adopt.apply_adoption(plan, admin_user="admin", admin_password="admin", monitor=monitor)
    return Cluster.objects.get(name=name)


class Beat:
    """Drives backend polling like Celery beat does: the backend polling task (poll, then the rules)
    every second, here in a thread of this process."""

    def __init__(self):
        from workers.monitoring import poll_backend_shard

        self.task = poll_backend_shard
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.ticks = []  # (start, end) of each task, wall clock: where a failover's time went
        # One task at a time in this process, as in a worker's pool process: the pollers' cached connections are
        # not shared between threads (bench_real_pair's --writer-watch runs its triggered polls under it too).
        self.lock = threading.Lock()

    def run(self):
        try:
            tick = time.monotonic()
            while not self.stop.is_set():
                with self.lock:
                    start = time.time()
                    self.task(0, 1)
                    self.ticks.append((start, time.time()))
                tick += 1.0
                self.stop.wait(max(0.0, tick - time.monotonic()))
        finally:
            close_old_connections()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


class Command(BaseCommand):
    help = "Time switchovers, read-pool reactions and failovers against the lab; count false failovers."

    def add_arguments(self, parser):
        parser.add_argument("--switchovers", type=int, default=10)
        parser.add_argument("--failovers", type=int, default=10, help="writer kills at random moments")
        parser.add_argument(
            "--quiet-seconds",
            type=int,
            default=30,
            help="seconds of polling a loaded writer, then as long a stalling one",
        )
        parser.add_argument(
            "--only-switchovers",
            action="store_true",
            help="the switchovers only: nothing desyncs, locks or kills a lab node (a lab shared with running tests)",
        )

    def handle(self, switchovers, failovers, quiet_seconds, only_switchovers=False, **options):
        for noisy in ("apps.monitoring.rounds", "apps.operations.rules"):  # a line per poll otherwise
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.stdout.write(f"machine: {machine()}")
        lab = GaleraLab()
        lab.up()
        doubles = [ProxySQLDouble(port=0, user="admin", password="admin") for _ in range(2)]
        with private_redis():
            self.bench(lab, doubles, switchovers, failovers, quiet_seconds, only_switchovers)

    def bench(self, lab, doubles, switchovers, failovers, quiet_seconds, only_switchovers=False):
        try:
            for d in doubles:
                d.start()
                demo.admin_sql(d.port, *demo.seed_statements())
                d.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
                d.traffic.set_sessions(hostgroup=101, count=8, kind="read")
            Operation.objects.all().delete()
            cluster = self.adopt(doubles)
            self.bench_switchovers(cluster, doubles, switchovers)
            if only_switchovers:
                return
            self.bench_read_pool(cluster, lab)
            self.bench_failover(cluster, lab, doubles, failovers)
            self.bench_false_failovers(cluster, lab, quiet_seconds)
        finally:
            for d in doubles:
                d.stop()
            if not only_switchovers:
                lab.heal()

    def adopt(self, doubles):
        return adopt_nodes([d.port for d in doubles], f"bench-{int(time.time())}", "p")

    def run(self, plan):
        op = services.save_plan(plan, actor=Actor.rule("benchmark"))
        services.confirm(op, actor=Actor.rule("benchmark"), enqueue=False)
        executor.run(op.pk)
        op.refresh_from_db()
        return op

    # -- switchovers ---------------------------------------------------------------------------------
    def bench_switchovers(self, cluster, doubles, n):
        overheads, totals, drains, catchups, holds, waited, rechecks = [], [], [], [], [], [], []
        original = [layout(d) for d in doubles]
        back_to_original, round_trips, autoinc_by_planner = 0, 0, 0
        errors_before = [dict(d.traffic.status()["counters"]) for d in doubles]
        ports = [3312, 3311]
        for i in range(n):
            target = Server.objects.get(cluster=cluster, port=ports[i % 2])
            marks = [last_seq(d) for d in doubles]
            for d in doubles:
                d.traffic.take_holds()
            plan = switchover.plan_switchover(cluster, target, drain_timeout_ms=3000)  # the default way
            autoinc_by_planner += (
                plan.facts["autoinc_way"]["taken"] and plan.facts["autoinc_way"]["chosen_by"] == "planner"
            )
            op = self.run(plan)
            if op.state != "done":
                self.stdout.write(f"switchover {i} ended {op.state}: {op.error}")
                continue
            t = op.timings
            overheads.append(t["overhead_ms"])
            totals.append(t["total_ms"])
            drains.append(t.get("wait_drain", 0))
            catchups.append(t.get("catch_up", 0))
            rechecks.append(t["recheck_ms"])
            for d, mark in zip(doubles, marks):
                loads = [e["t"] for e in log_since(d, mark) if e["sql"] == LOAD_SERVERS]
                holds.append((loads[1] - loads[0]) * 1000)  # the drain's LOAD, then the move's
                waited.extend(d.traffic.take_holds(hostgroup=cluster.writer_hostgroup) or [0.0])
            if i % 2:
                round_trips += 1
                back_to_original += [layout(d) for d in doubles] == original
        after = [d.traffic.status()["counters"] for d in doubles]
        errors = {k: sum(a[k] - b[k] for a, b in zip(after, errors_before)) for k in ("client_errors", "sessions_cut")}
        self.stdout.write(
            f"switchover (2 ProxySQL nodes, pinned writer sessions, the default plan), {len(totals)} of "
            f"{n} runs done; the auto-increment way taken by the planner in {autoinc_by_planner} of {n}; "
            f"client errors in the doubles' traffic model: {errors['client_errors']} "
            f"(sessions cut: {errors['sessions_cut']}):"
        )
        for label, values in (
            ("total", totals),
            ("drain wait", drains),
            ("Galera catch-up", catchups),
            ("control-plane overhead beyond the waits", overheads),
            ("of which the re-check at start (planned again, compared)", rechecks),
            ("writer hold per ProxySQL node (drain LOAD -> move LOAD)", holds),
            ("longest wait of a client query in the doubles' traffic model", waited),
        ):
            if values:
                self.stdout.write(f"  {label}: {summary(values)}")
        self.stdout.write(
            f"  A->B->A round trips that gave back the original layout (every row, weight, comment): "
            f"{back_to_original} of {round_trips}"
        )

    # -- read pool -----------------------------------------------------------------------------------
    def bench_read_pool(self, cluster, lab):
        Cluster.objects.filter(pk=cluster.pk).update(
            read_pool_rules_enabled=True, rules_dry_run=False, max_replication_lag=20, poll_interval_s=1
        )
        cluster.refresh_from_db()
        servers = list(Server.objects.filter(cluster=cluster).select_related("cluster"))
        target = next(s for s in servers if s.pk != switchover.current_writer(cluster).server_id)
        node = target.port - 3310
        lab.set_desync(node, True)
        locker = lab.root_connection(node)
        locker.cursor().execute("FLUSH TABLES WITH READ LOCK")
        writer = switchover.current_writer(cluster).server
        stop = threading.Event()
        threading.Thread(target=_write_load, args=(writer.port, stop), daemon=True).start()
        crossed_at = reacted_at = None
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and reacted_at is None:
                tick = time.monotonic()
                pollers.backend_round(servers)
                docs = rules.read_polls([s.pk for s in servers])
                queue = docs[target.pk].ok and docs[target.pk].state["local_recv_queue"]
                if crossed_at is None and queue and queue > cluster.max_replication_lag:
                    crossed_at = tick  # the poll that saw it started here
                rules.apply_read_pool(cluster, docs)
                with ProxySQLAdmin.for_node(cluster.proxysql_nodes.first()) as admin:
                    if any(
                        r.port == target.port
                        and r.hostgroup_id == cluster.reader_hostgroup
                        and r.status == "OFFLINE_SOFT"
                        for r in admin.servers("runtime")
                    ):
                        reacted_at = time.monotonic()
                if reacted_at is None:
                    time.sleep(max(0, 1.0 - (time.monotonic() - tick)))  # a 1 s poll interval
        finally:
            locker.cursor().execute("UNLOCK TABLES")
            locker.close()
            stop.set()
            lab.set_desync(node, False)
        if crossed_at and reacted_at:
            self.stdout.write(
                f"read-pool rules: recv queue over {cluster.max_replication_lag} seen by the poll -> "
                f"OFFLINE_SOFT in runtime: {(reacted_at - crossed_at) * 1000:.0f} ms (1 s poll interval; "
                f"the crossing itself happens at most one interval before that poll)"
            )
        else:
            self.stdout.write("read-pool rules: the threshold was not crossed or not reacted to within 30 s")
        Cluster.objects.filter(pk=cluster.pk).update(read_pool_rules_enabled=False)

    # -- failover ------------------------------------------------------------------------------------
    def at_default_policy(self, cluster):
        defaults = {f.name: f.default for f in Cluster._meta.fields if f.name in FAILOVER_POLICY}
        Cluster.objects.filter(pk=cluster.pk).update(
            auto_failover_enabled=True, read_pool_rules_enabled=False, **defaults
        )
        cluster.refresh_from_db()
        return ", ".join(f"{k}={v}" for k, v in sorted(defaults.items()))

    def bench_failover(self, cluster, lab, doubles, kills):
        policy = self.at_default_policy(cluster)
        interval = getattr(cluster, "backend_poll_interval_s", None) or cluster.poll_interval_s
        rng = random.Random()
        times, moves, notes = [], [], []
        for _ in range(kills):
            lab.heal()
            live.client().flushdb()
            before = set(Operation.objects.filter(kind=OperationKind.FAILOVER).values_list("pk", flat=True))
            writer = switchover.current_writer(cluster).server
            marks = [last_seq(d) for d in doubles]
            with Beat():
                time.sleep(2.5 + rng.uniform(0, interval))  # a few polls first, then a random moment of the cycle
                killed = time.time()
                lab.kill(writer.port - 3310)
                deadline = time.monotonic() + 20
                op = None
                while op is None and time.monotonic() < deadline:
                    op = (
                        Operation.objects.filter(kind=OperationKind.FAILOVER, finished_at__isnull=False)
                        .exclude(pk__in=before)
                        .first()
                    )
                    time.sleep(0.02)
            if op is None or op.state != "done":
                self.stdout.write(f"failover: none done within 20 s of the kill ({op and op.error})")
                continue
            in_runtime = max(
                next(e["t"] for e in log_since(d, mark) if e["sql"] == LOAD_SERVERS) for d, mark in zip(doubles, marks)
            )
            times.append((in_runtime - killed) * 1000)
            moves.append(op.timings["total_ms"])
            notes.append(
                f"{op.plan['facts'].get('down_polls')} poll(s)"
                + (f" + re-probe: {op.plan['facts']['reprobe']}" if op.plan["facts"].get("reprobe") else "")
            )
        lab.heal()
        if times:
            self.stdout.write(
                f"failover at the default policy ({policy}), writer kill -9 at a random moment of the "
                f"{interval:g} s polling cycle, {len(times)} runs:"
            )
            self.stdout.write(
                f"  kill -> new writer in runtime on both nodes: {summary(times)} "
                f"(each: {', '.join(f'{x:.0f}' for x in times)})"
            )
            self.stdout.write(f"  of which the failover operation itself: {summary(moves)}")
            self.stdout.write(f"  detected by: {'; '.join(sorted(set(notes)))}")

    def bench_false_failovers(self, cluster, lab, seconds):
        """Three healthy writers that are hard to poll: loaded, stalling, and stalled by Galera itself."""
        policy = self.at_default_policy(cluster)
        before = Operation.objects.filter(kind=OperationKind.FAILOVER).count()
        lab.heal()
        live.client().flushdb()
        writer = switchover.current_writer(cluster).server
        n = writer.port - 3310
        rng = random.Random()
        stop = threading.Event()
        load = [threading.Thread(target=_write_load, args=(writer.port, stop), daemon=True) for _ in range(6)]
        load += [threading.Thread(target=_cpu_load, args=(writer.port, stop), daemon=True) for _ in range(2)]
        polls = PollCounter(writer)
        with polls, Beat():
            for t in load:
                t.start()
            time.sleep(seconds)
            loaded = polls.take()
            stop.set()
            for t in load:
                t.join()

            stalls, deadline = 0, time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(2.0, 4.0))
                os.kill(lab.pid(n), signal.SIGSTOP)  # alive, answering nothing, longer than a poll's timeout
                time.sleep(1.5)
                os.kill(lab.pid(n), signal.SIGCONT)
                stalls += 1
            time.sleep(2)
            stalled = polls.take()

            # kill -9 of another node: Galera stalls every write for ~5-6 s until it evicts the dead node
            stop = threading.Event()
            load = threading.Thread(target=_write_load, args=(writer.port, stop), daemon=True)
            load.start()
            other = next(m for m in (1, 2, 3) if m != n)
            lab.kill(other)
            time.sleep(10)
            stop.set()
            load.join()
            galera_stall = polls.take()
        failovers = Operation.objects.filter(kind=OperationKind.FAILOVER).count() - before
        self.stdout.write(f"false failovers at the default policy ({policy}), a live writer:")
        self.stdout.write(f"  {seconds} s under 6 writing and 2 CPU-burning sessions: {loaded}")
        self.stdout.write(f"  {seconds} s with {stalls} stalls of 1.5 s (SIGSTOP, SIGCONT) 2-4 s apart: {stalled}")
        self.stdout.write(
            f"  10 s after a kill -9 of node {other} (cluster writes stall until it is evicted), "
            f"under a write load: {galera_stall}"
        )
        self.stdout.write(f"  failovers in all: {failovers}")
        lab.heal()


class PollCounter:
    """Counts the polls of one backend, and those that failed, from its latest-state documents."""

    def __init__(self, server):
        self.server = server
        self.stop = threading.Event()
        self.ok = self.failed = 0
        self.seen = set()

    def __enter__(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def run(self):
        try:
            while not self.stop.wait(0.1):
                doc = live.read_many(live.BACKEND, [self.server.pk]).get(self.server.pk)
                if doc and doc["ts"] not in self.seen:
                    self.seen.add(doc["ts"])
                    if doc.get("ok"):
                        self.ok += 1
                    else:
                        self.failed += 1
        finally:
            close_old_connections()

    def take(self):
        out = f"{self.ok + self.failed} polls of the writer, {self.failed} failed"
        self.ok = self.failed = 0
        return out


def _write_load(port, stop):
    conn = MySQLdb.connect(host="127.0.0.1", port=port, user="app", passwd="app", db="app", autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS bench_load (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))")
    while not stop.is_set():
        cur.execute("INSERT INTO bench_load (v) VALUES (REPEAT('x', 64))")
    conn.close()


def _cpu_load(port, stop):
    conn = MySQLdb.connect(host="127.0.0.1", port=port, user="app", passwd="app", db="app", autocommit=True)
    cur = conn.cursor()
    while not stop.is_set():
        cur.execute("SELECT BENCHMARK(2000000, MD5(RAND()))")  # about a second of one core
        cur.fetchall()
    conn.close()
