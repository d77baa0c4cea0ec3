"""CPU time per ProxySQL poll, in one process: the worker task's whole path (the shard's round, the versions, the
alert evaluation) run in-process over N lab doubles (served by another process) with a private Redis and a scratch
SQLite database, so that CPU time (time.process_time, every thread) counts the polling work only.

    .venv/bin/python -m lab.bench_poll_cost [--nodes 100] [--duration 30] [--interval 5] [--profile out.prof]
                                            [--kind proxysql|backend]

--kind backend measures the backend task's path instead (monitoring.poll_backend_shard: the round over the
benchmark's 3 backends a node, closed loopback ports as in bin/bench-monitoring's phase C, the read-pool and failover
rules, the channels, the alert rules); its "polls" are backend polls.

Prints CPU ms per poll (the first round, which opens the connections and reads everything, is left out) and the
history bytes per row, and the alert judgement tasks (alerts.judge_due, one per slot of pending alerts ending their
`for`; alerts.judge_cluster, a hold's end) the measured rounds queued and the most of them waiting at once. --profile writes a cProfile of the measured rounds (read with `python -m pstats`).
lab/tests/test_budgets.py runs it against docs/budgets.json.
"""

import argparse
import cProfile
import heapq
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from lab import bench_monitoring as bm
from lab.cpu_calibration import calibration_ms

REPO = bm.REPO
JUDGEMENT_TASKS = ("alerts.judge_due", "alerts.judge_cluster")
TICK_S = 1.0  # beat ticks each shard once a second (controlplane/celery.py): a tick that finds no node due costs too


def setup(lab, nodes, interval, workdir):
    """Doubles, Redis, a scratch database with the benchmark's inventory; Django set up in this process."""
    redis_url = bm.start_redis(lab)
    db = Path(workdir) / "poll-cost.sqlite3"
    env = {
        **bm.BENCH_ENV,
        "DATABASE_URL": f"sqlite:///{db}",
        "REDIS_URL": redis_url,
        "MONITOR_SHARDS": "1",
        "MONITOR_DEFAULT_INTERVAL_S": str(interval),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    node_ports = bm.pick_ports(17000 + (os.getpid() % 50) * 40, nodes, bm.port_free)
    backend_ports = bm.pick_ports(24000, 6 * ((nodes + 1) // 2), bm.closed_port, avoid=set(node_ports))
    layout = bm.Layout(nodes, interval, node_ports, backend_ports)
    bm.start_doubles(lab, node_ports, 1)
    layout.seed_doubles()
    bm.reset_database(env["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    layout.create_inventory()
    QUEUED.install()
    return layout


class QueuedTasks:
    """The tasks a round queues (the alert rules' judge_at of a pending alert, notifications) run in this process at
    their eta, as a worker runs them, so that their CPU is counted. Not at once (CELERY_TASK_ALWAYS_EAGER, as this
    benchmark did before): a judgement made before its time finds what is due then, not at its eta, and ran
    whole where the worker's ends at its one query."""

    def __init__(self):
        self.heap, self.order = [], itertools.count()
        # judgement tasks (JUDGEMENT_TASKS): queued, the most waiting at once, run (whole: those that judged, the due
        # alerts' targets or the cluster whole; the others ended at their one query, nothing due)
        self.judgements = self.judgements_waiting = self.judgements_run = self.judgements_whole = 0

    def install(self):
        from controlplane import tasks
        from controlplane.celery import app

        app.loader.import_default_modules()
        tasks.enqueue = self.enqueue  # every app queues through this one function

    def enqueue(self, name, args=(), eta=None, countdown=None, **options):
        when = eta.timestamp() if eta is not None else time.time() + (countdown or 0)
        heapq.heappush(self.heap, (when, next(self.order), name, tuple(args)))
        if name in JUDGEMENT_TASKS:
            self.judgements += 1
            waiting = sum(1 for entry in self.heap if entry[2] in JUDGEMENT_TASKS)
            self.judgements_waiting = max(self.judgements_waiting, waiting)

    def run_due(self):
        from controlplane.celery import app

        while self.heap and self.heap[0][0] <= time.time():
            _, _, name, args = heapq.heappop(self.heap)
            result = app.tasks[name](*args)
            if name in JUDGEMENT_TASKS:
                self.judgements_run += 1
                self.judgements_whole += bool(result)


QUEUED = QueuedTasks()


def one_tick(cpu=None, kind="proxysql"):
    """What the worker's task monitoring.poll_proxysql_shard (or poll_backend_shard) does for one beat tick (one
    shard). cpu: a dict that gets the CPU seconds of the round (run_shard: the polls, their documents and history),
    of the backend task's rules and channels, and of the alert rules."""
    from apps.monitoring import live, rounds
    from workers import monitoring

    started = time.process_time()
    if kind == live.BACKEND:
        summary = rounds.run_shard(live.BACKEND, 0, 1)
        if cpu is not None:
            cpu["round"] = cpu.get("round", 0.0) + time.process_time() - started
        rules_started = time.process_time()
        if summary.get("polled"):
            from apps.operations import rules

            rules.after_backend_poll(rules.clusters_of_shard(0, 1))
        if not summary.get("skipped"):
            monitoring._poll_channels(0, 1)
        if cpu is not None:
            cpu["rules and channels"] = cpu.get("rules and channels", 0.0) + time.process_time() - rules_started
        between = time.process_time()
        monitoring._evaluate_alerts(live.BACKEND, summary, 0, 1)
        QUEUED.run_due()
        if cpu is not None:
            cpu["alerts"] = cpu.get("alerts", 0.0) + time.process_time() - between
        return summary.get("polled", 0)
    summary = rounds.run_shard(live.PROXYSQL, 0, 1)
    monitoring._record_versions(summary)
    between = time.process_time()
    monitoring._evaluate_alerts(live.PROXYSQL, summary, 0, 1)
    QUEUED.run_due()
    if cpu is not None:
        part = "round" if summary.get("polled") else "idle tick"
        cpu[part] = cpu.get(part, 0.0) + between - started
        cpu["alerts"] = cpu.get("alerts", 0.0) + time.process_time() - between
    return summary.get("polled", 0)


def measure(nodes, duration, interval, profile=None, kind="proxysql", targets=None):
    """{"polls", "cpu_ms_per_poll", its parts, "history_bytes_per_row"} after a first round left out."""
    while one_tick(kind=kind) < (targets or nodes):  # the first round: connections opened, variables and layers read
        time.sleep(TICK_S)
    profiler = cProfile.Profile(time.process_time) if profile else None  # CPU time, not waits
    QUEUED.judgements = QUEUED.judgements_waiting = QUEUED.judgements_run = QUEUED.judgements_whole = 0
    polls, cpu, parts = 0, 0.0, {}
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        started = time.process_time()
        if profiler:
            profiler.enable()
        polled = one_tick(parts, kind)
        if profiler:
            profiler.disable()
        cpu += time.process_time() - started
        polls += polled
        time.sleep(max(0.0, TICK_S - (time.process_time() - started)))
    if profiler:
        profiler.dump_stats(profile)
    per_poll = {f"{part} ms/poll": round(1000 * seconds / max(polls, 1), 3) for part, seconds in parts.items()}
    figures = {"kind": kind, "polls": polls, "cpu_ms_per_poll": round(1000 * cpu / max(polls, 1), 3), **per_poll}
    figures.update(
        judgements_queued=QUEUED.judgements,
        judgements_waiting_at_most=QUEUED.judgements_waiting,
        judgements_run=QUEUED.judgements_run,
        judgements_whole=QUEUED.judgements_whole,
    )
    if kind == "proxysql":
        figures["history_bytes_per_row"] = history_bytes_per_row()
    return figures


def history_bytes_per_row():
    """Bytes per ProxySQL poll's history (its ProxySQLSample row and its PoolSnapshot row), indexes included."""
    from django.db import connection

    from apps.monitoring.models import PoolSnapshot, ProxySQLSample

    total = 0
    with connection.cursor() as cur:
        for model in (ProxySQLSample, PoolSnapshot):
            table = model._meta.db_table
            cur.execute(
                "SELECT SUM(pgsize) FROM dbstat WHERE name = %s OR name IN "
                "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = %s)",
                [table, table],
            )
            total += cur.fetchone()[0] or 0
    rows = ProxySQLSample.objects.count()
    return round(total / max(rows, 1), 1)


def run(nodes, duration, interval, profile=None, workdir=None, kind="proxysql"):
    workdir = Path(
        workdir or tempfile.mkdtemp(prefix="poll-cost-", dir=bm.BENCH_DIR if bm.BENCH_DIR.exists() else None)
    )
    lab = bm.Lab(workdir)
    try:
        layout = setup(lab, nodes, interval, workdir)
        backends = sum(len(ports) for ports in layout.backends)
        figures = measure(nodes, duration, interval, profile, kind, backends if kind == "backend" else nodes)
        return {**figures, "calibration_ms": calibration_ms()}  # this core's speed, measured here (budgets scale by it)
    finally:
        lab.stop_all()


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m lab.bench_poll_cost", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--interval", type=float, default=5)
    ap.add_argument("--profile", help="write a cProfile of the measured rounds here")
    ap.add_argument(
        "--kind",
        choices=("proxysql", "backend"),
        default="proxysql",
        help="which poll task's path to measure (backend: its polls are backend polls)",
    )
    ap.add_argument(
        "--workdir", help="where the scratch database and the processes' logs go (default: var/bench/poll-cost-*)"
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    print(json.dumps(run(args.nodes, args.duration, args.interval, args.profile, args.workdir, args.kind)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
