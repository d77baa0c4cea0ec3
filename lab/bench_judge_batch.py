"""CPU time of judging pending alerts that end their `for` together (issue 40): N clusters of one node and one backend,
each node's conn_errors opened pending by one round at `start`, then judged at start + for + 0.5 s, in one process
with a private Redis and a scratch SQLite database (no worker, no doubles: synthetic documents).

    .venv/bin/python -m lab.bench_judge_batch [--clusters 1000] [--mode batch|per-cluster] [--workdir DIR]

--mode per-cluster: one evaluate.judge_now(cluster, pending_due=True) per cluster, as the per-cluster tasks ran them
(in one process: the inventory and the situation caches warm as in a busy worker, no Celery task overhead counted);
--mode batch: evaluate.judge_slot() of the slot, as its task does (and the tasks for the rest beyond a batch). Prints the tasks the round queued, the CPU ms
of the judging, the SQL statements it ran and the alerts it fired, as JSON.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from lab import bench_monitoring as bm

REPO = bm.REPO


def setup(lab, workdir):
    redis_url = bm.start_redis(lab)
    env = {
        **bm.BENCH_ENV,
        "DATABASE_URL": f"sqlite:///{Path(workdir) / 'judge-batch.sqlite3'}",
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    bm.reset_database(env["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def run(clusters, mode, workdir):
    lab = bm.Lab(workdir)
    try:
        setup(lab, workdir)
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from apps.alerts import context, evaluate, rulesettings
        from apps.alerts.models import Alert, AlertState
        from apps.monitoring import live
        from apps.monitoring.tests import synthetic
        from controlplane import tasks

        queued = []
        tasks.enqueue = lambda name, args=(), **options: queued.append((name, tuple(args)))  # no broker here
        ids, nodes, servers = synthetic.fleet(clusters, 1, 1)
        docs, backends = synthetic.publish(nodes, servers)
        no_drift = {"ts": time.time(), "version": None, "error": "", "findings": [], "runtime": [], "tables": {}}
        live.write_many(live.DRIFT, {pk: no_drift for pk in nodes})
        start = time.time()
        new = {pk: {**doc, "ts": start, "figures": {**doc["figures"], "conn_err_ps": 5.0}} for pk, doc in docs.items()}
        live.write_many(live.PROXYSQL, new)
        evaluate.after_poll_round(live.PROXYSQL, {pk: (docs[pk], new[pk]) for pk in new}, now=start)
        pending = Alert.objects.filter(rule="conn_errors", state=AlertState.PENDING)
        assert pending.count() == clusters, pending.count()
        judged_at = max(a.fires_at.timestamp() for a in pending) + 0.5
        round_tasks = len(queued)
        # the documents as fresh at the judgement (a stale node is judged on reachability only), still erroring
        live.write_many(live.PROXYSQL, {pk: {**doc, "ts": judged_at - 1} for pk, doc in new.items()})
        live.write_many(
            live.BACKEND, {pk: {**doc, "ts": judged_at - 1, "last_ok": judged_at - 1} for pk, doc in backends.items()}
        )
        context.inventory()  # warm, as in a worker (kept INVENTORY_CACHE_S)
        rulesettings.for_cluster(next(iter(context.inventory().clusters.values())))
        with CaptureQueriesContext(connection) as captured:
            cpu = time.process_time()
            if mode == "batch":
                [slot] = {args[0] for name, args in queued if name == "alerts.judge_due"}
                batches = 0
                while evaluate.judge_slot(slot, now=judged_at):  # the rest of a slot beyond JUDGEMENT_BATCH_MAX
                    batches += 1
            else:
                for cluster_id in ids:
                    evaluate.judge_now(cluster_id, now=judged_at, pending_due=True)
            cpu = time.process_time() - cpu
        fired = Alert.objects.filter(rule="conn_errors", state=AlertState.FIRING).count()
        return {
            "mode": mode,
            "clusters": clusters,
            "tasks_queued_by_the_round": round_tasks,
            "judging_cpu_ms": round(1000 * cpu, 1),
            "cpu_ms_per_cluster": round(1000 * cpu / clusters, 3),
            "sql_statements": len(captured.captured_queries),
            "fired": fired,
            **({"tasks_run": batches} if mode == "batch" else {}),
        }
    finally:
        lab.stop_all()


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m lab.bench_judge_batch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--mode", choices=("batch", "per-cluster"), default="batch")
    ap.add_argument("--workdir", help="scratch directory (default: a new one under var/bench)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    workdir = Path(
        args.workdir or tempfile.mkdtemp(prefix="judge-batch-", dir=bm.BENCH_DIR if bm.BENCH_DIR.exists() else None)
    )
    print(json.dumps(run(args.clusters, args.mode, workdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
