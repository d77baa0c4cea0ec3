"""The Celery app and the one beat schedule. Tasks live in workers/ and call services in apps/."""

import os

from celery import Celery
from django.conf import settings

from apps.monitoring.stagger import BACKEND_DEFAULT_INTERVAL_S, TICK_S, PhasedSchedule, tick_offset
from controlplane import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

broker.use()  # kombu's Redis transport, fixed for a worker whose Redis was lost (see broker.py)
app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_default_queue="default",
    worker_prefetch_multiplier=1,
    task_acks_late=False,  # only idempotent tasks opt in, per task
    broker_connection_retry_on_startup=True,
)


def _beat_schedule():
    schedule = {}
    default_interval = {"proxysql": settings.MONITOR_DEFAULT_INTERVAL_S, "backend": BACKEND_DEFAULT_INTERVAL_S}
    for shard in range(settings.MONITOR_SHARDS):
        for kind in ("proxysql", "backend"):  # staggered: shard i ticks at i/N of the default interval
            offset = tick_offset(shard, settings.MONITOR_SHARDS, default_interval[kind])
            schedule[f"poll {kind} nodes, shard {shard} of {settings.MONITOR_SHARDS}"] = {
                "task": f"monitoring.poll_{kind}_shard",
                "schedule": PhasedSchedule(TICK_S, offset),
                "args": (shard, settings.MONITOR_SHARDS),
                "options": {"expires": 1.5},
            }
    schedule["roll up monitoring history and apply retention"] = {
        "task": "monitoring.rollup_and_prune",
        "schedule": 60.0,
        "options": {"expires": 50},
    }
    for shard in range(settings.MONITOR_SHARDS):  # each node is polled when its digest interval has passed
        schedule[f"poll query digests, shard {shard} of {settings.MONITOR_SHARDS}"] = {
            "task": "digests.poll_shard",
            "args": (shard, settings.MONITOR_SHARDS),
            "options": {"expires": 4.5},
            "schedule": PhasedSchedule(5.0, 5.0 * shard / settings.MONITOR_SHARDS),
        }  # staggered over its 5 s tick
    schedule["roll up query digest history and apply retention"] = {
        "task": "digests.rollup_and_prune",
        "schedule": 60.0,
        "options": {"expires": 50},
    }
    schedule["build and mail the health reports that are due"] = {
        "task": "reports.run_due",
        "schedule": 60.0,
        "options": {"expires": 55},
    }
    schedule["audit drift as it appears and goes"] = {
        "task": "fleet.watch_drift",
        "schedule": 30.0,
        "options": {"expires": 25},
    }
    schedule["roll back operations whose worker died, expire those never started"] = {
        "task": "operations.reap_stale",
        "schedule": 5.0,
        "options": {"expires": 4},
    }
    schedule["retry rollbacks a ProxySQL node did not take"] = {
        "task": "operations.retry_pending_rollbacks",
        "schedule": 2.0,
        "options": {"expires": 1.8},
    }
    schedule["go on with rollouts whose worker died"] = {
        "task": "rollouts.resume_stale",
        "schedule": 10.0,
        "options": {"expires": 9},
    }
    schedule["write the summaries of repeated refusals"] = {
        "task": "audit.flush_refusal_bursts",
        "schedule": 15.0,
        "options": {"expires": 14},
    }
    schedule["send alert notifications that are due (repeats, lost tasks)"] = {
        "task": "alerts.flush_due",
        "schedule": 5.0,
        "options": {"expires": 4.5},
    }
    schedule["archive audit events past their retention"] = {
        "task": "audit.archive_old_events",
        "schedule": 3600.0,
        "options": {"expires": 3000},
    }
    return schedule


app.conf.beat_schedule = _beat_schedule()
# Task modules, imported by workers and beat at start (not at Django start: apps are not ready then).
app.conf.imports = [
    "workers.fleet",
    "workers.monitoring",
    "workers.operations",
    "workers.digests",
    "workers.reports",
    "workers.audit",
    "workers.alerts",
    "workers.rollouts",
]
