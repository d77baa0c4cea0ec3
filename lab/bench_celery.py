"""Celery entry point for the monitoring benchmark's beat (lab only): the product's Celery app, its beat
schedule narrowed to the poll kinds in BENCH_POLL_KINDS (comma-separated: proxysql, backend) plus the
rollup task, so that a benchmark phase measures exactly the work it names.

    BENCH_POLL_KINDS=proxysql celery -A lab.bench_celery beat ...

The worker runs the product's app as it is (`celery -A controlplane worker`).
"""

import os

from controlplane.celery import app

KINDS = [k.strip() for k in os.environ.get("BENCH_POLL_KINDS", "proxysql,backend").split(",") if k.strip()]
KEPT_TASKS = {f"monitoring.poll_{kind}_shard" for kind in KINDS} | {"monitoring.rollup_and_prune"}

app.conf.beat_schedule = {name: entry for name, entry in app.conf.beat_schedule.items() if entry["task"] in KEPT_TASKS}
