"""Benchmark of guarded operations against the Galera lab and two ProxySQL admin doubles.

    bin/bench-operations            (a scratch database under var/bench/, a private redis-server)

Measures: the control-plane overhead of a switchover beyond its drain wait (two ProxySQL nodes), the
time from a recv-queue threshold crossing to the runtime change (read-pool rules), and from a writer's
death to the new writer in runtime (automatic failover at a 1 s poll interval). Prints the machine.
"""
import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import MySQLdb
from django.conf import settings
from django.core.management.base import BaseCommand

from apps.clients.proxysql import ProxySQLAdmin
from apps.fleet import adopt
from apps.fleet.models import Cluster, Server
from apps.monitoring import live, pollers
from apps.operations import executor, rules, services, switchover
from apps.operations.models import Operation
from lab import demo
from lab.galera import GaleraLab
from lab.proxysql_double import ProxySQLDouble


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = next((int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return f"{os.cpu_count()} cores ({cpu}), {mem} MiB RAM, Python {platform.python_version()}, " \
           f"Django DB {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}"


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Command(BaseCommand):
    help = "Time switchovers, read-pool reactions and failovers against the lab."

    def add_arguments(self, parser):
        parser.add_argument("--switchovers", type=int, default=10)

    def handle(self, switchovers, **options):
        self.stdout.write(f"machine: {machine()}")
        lab = GaleraLab()
        lab.up()
        redis_dir = tempfile.mkdtemp(prefix="bench-redis-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            redis_port = s.getsockname()[1]
        redis = subprocess.Popen([shutil.which("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1",
                                  "--save", "", "--dir", redis_dir], stdout=subprocess.DEVNULL)
        settings.REDIS_URL = f"redis://127.0.0.1:{redis_port}/0"
        doubles = [ProxySQLDouble(port=0, user="admin", password="admin") for _ in range(2)]
        try:
            time.sleep(0.3)
            for d in doubles:
                d.start()
                demo.admin_sql(d.port, *demo.seed_statements())
                d.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
                d.traffic.set_sessions(hostgroup=101, count=8, kind="read")
            Operation.objects.all().delete()
            cluster = self.adopt(doubles)
            self.bench_switchovers(cluster, switchovers)
            self.bench_read_pool(cluster, lab)
            self.bench_failover(cluster, lab)
        finally:
            for d in doubles:
                d.stop()
            redis.terminate()
            redis.wait()
            shutil.rmtree(redis_dir, ignore_errors=True)
            lab.heal()

    def adopt(self, doubles):
        name = f"bench-{int(time.time())}"
        for i, d in enumerate(doubles, 1):
            with ProxySQLAdmin("127.0.0.1", d.port, "admin", "admin") as admin:
                snapshot, monitor = adopt.read_snapshot(admin), adopt.read_monitor_credentials(admin)
            plan = adopt.plan_adoption(snapshot, cluster_name=name, node_name=f"p{i}", admin_host="127.0.0.1",
                                       admin_port=d.port)
            adopt.apply_adoption(plan, admin_user="admin", admin_password="admin", monitor=monitor)
        return Cluster.objects.get(name=name)

    def run(self, plan):
        op = services.save_plan(plan, rule="benchmark")
        services.confirm(op, rule="benchmark", enqueue=False)
        executor.run(op.pk)
        op.refresh_from_db()
        return op

    def bench_switchovers(self, cluster, n):
        overheads, totals, drains, catchups, rechecks = [], [], [], [], []
        ports = [3312, 3311]
        for i in range(n):
            target = Server.objects.get(cluster=cluster, port=ports[i % 2])
            plan = switchover.plan_switchover(cluster, target, lower_autoinc=True, drain_timeout_ms=3000)
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
        self.stdout.write(f"switchover (2 ProxySQL nodes, pinned writer sessions, auto-increment way through), {len(totals)} runs:")
        for label, values in (("total", totals), ("drain wait", drains), ("Galera catch-up", catchups),
                              ("control-plane overhead beyond the waits", overheads),
                              ("of which the re-check at start (planned again, compared)", rechecks)):
            if values:
                self.stdout.write(f"  {label}: median {statistics.median(values):.1f} ms, p95 {pct(values, 95):.1f} ms, "
                                  f"max {max(values):.1f} ms")

    def bench_read_pool(self, cluster, lab):
        Cluster.objects.filter(pk=cluster.pk).update(read_pool_rules_enabled=True, rules_dry_run=False,
                                                     max_replication_lag=20, poll_interval_s=1)
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
                docs = live.read_many(live.BACKEND, [s.pk for s in servers])
                queue = docs[target.pk]["ok"] and docs[target.pk]["state"]["local_recv_queue"]
                if crossed_at is None and queue and queue > cluster.max_replication_lag:
                    crossed_at = tick  # the poll that saw it started here
                rules.apply_read_pool(cluster, docs)
                with ProxySQLAdmin.for_node(cluster.proxysql_nodes.first()) as admin:
                    if any(r.port == target.port and r.hostgroup_id == cluster.reader_hostgroup and r.status == "OFFLINE_SOFT"
                           for r in admin.servers("runtime")):
                        reacted_at = time.monotonic()
                if reacted_at is None:
                    time.sleep(max(0, 1.0 - (time.monotonic() - tick)))  # a 1 s poll interval
        finally:
            locker.cursor().execute("UNLOCK TABLES")
            locker.close()
            stop.set()
            lab.set_desync(node, False)
        if crossed_at and reacted_at:
            self.stdout.write(f"read-pool rules: recv queue over {cluster.max_replication_lag} seen by the poll -> "
                              f"OFFLINE_SOFT in runtime: {(reacted_at - crossed_at) * 1000:.0f} ms (1 s poll interval; "
                              f"the crossing itself happens at most one interval before that poll)")
        else:
            self.stdout.write("read-pool rules: the threshold was not crossed or not reacted to within 30 s")
        Cluster.objects.filter(pk=cluster.pk).update(read_pool_rules_enabled=False)

    def bench_failover(self, cluster, lab):
        Cluster.objects.filter(pk=cluster.pk).update(auto_failover_enabled=True, failover_after_polls=2, poll_interval_s=1)
        cluster.refresh_from_db()
        servers = list(Server.objects.filter(cluster=cluster).select_related("cluster"))
        writer = switchover.current_writer(cluster).server
        lab.kill(writer.port - 3310)
        killed = time.monotonic()
        done = None
        while time.monotonic() - killed < 15 and done is None:
            tick = time.monotonic()
            pollers.backend_round(servers)
            op = rules.apply_failover(cluster, live.read_many(live.BACKEND, [s.pk for s in servers]))
            if op:
                done = time.monotonic()
                break
            time.sleep(max(0, 1.0 - (time.monotonic() - tick)))
        if done:
            op = Operation.objects.get(pk=op)
            self.stdout.write(f"failover: writer killed -> new writer in runtime on both nodes: {(done - killed) * 1000:.0f} ms "
                              f"(2 polls at 1 s; the move itself {op.timings['total_ms']:.0f} ms including its re-check at start "
                              f"{op.timings['recheck_ms']:.1f} ms, state {op.state})")
        else:
            self.stdout.write("failover: no failover within 15 s")


def _write_load(port, stop):
    conn = MySQLdb.connect(host="127.0.0.1", port=port, user="app", passwd="app", db="app", autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS bench_load (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))")
    while not stop.is_set():
        cur.execute("INSERT INTO bench_load (v) VALUES (REPEAT('x', 64))")
    conn.close()
