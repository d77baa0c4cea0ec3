"""Monitoring tasks. Each is thin: it calls one service in apps/monitoring and returns its summary."""

import os
import resource

import logging

from celery import shared_task
from celery.signals import worker_init

from apps.alerts import evaluate
from apps.dr import polling
from apps.fleet import node_versions
from apps.monitoring import live, rollups, rounds
from apps.operations import rules

log = logging.getLogger(__name__)


@worker_init.connect
def raise_open_files_limit(**kwargs):
    """A worker process keeps one connection to every node it has polled (a shard's round may land on any
    pool process): at fleet scale that is thousands of sockets per process, above the usual soft limit of
    1,024 open files. Raise the soft limit to the hard one, in the main process before the pool forks."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


# Polls are idempotent per tick, but a lost tick is better than a late one: no retries, no acks_late.
@shared_task(bind=True, name="monitoring.poll_proxysql_shard", ignore_result=True, soft_time_limit=20, time_limit=25)
def poll_proxysql_shard(self, shard, shards):
    summary = rounds.run_shard(live.PROXYSQL, shard, shards, holder=_holder(self))
    _record_versions(summary)
    _evaluate_alerts(live.PROXYSQL, summary, shard, shards)
    return summary


@shared_task(bind=True, name="monitoring.poll_backend_shard", ignore_result=True, soft_time_limit=20, time_limit=25)
def poll_backend_shard(self, shard, shards):
    summary = rounds.run_shard(live.BACKEND, shard, shards, holder=_holder(self))
    if summary.get("polled"):
        # The read-pool rules and failover react to what this round just saw.
        rules.after_backend_poll(rules.clusters_of_shard(shard, shards))
    if not summary.get("skipped"):  # this worker holds the shard: its channels too
        _poll_channels(shard, shards)
    _evaluate_alerts(live.BACKEND, summary, shard, shards)
    return summary


# Queued by the writer watch (apps/operations/writer_watch.py) when a watched writer's connection closed: the
# cluster's backends polled at once rather than at the next tick, then the rules and the alerts as after a round.
# No retries: the next tick polls them anyway.
@shared_task(name="monitoring.poll_cluster_backends", ignore_result=True, soft_time_limit=20, time_limit=25)
def poll_cluster_backends(cluster_id):
    summary = rounds.poll_cluster_now(cluster_id)
    if summary.get("polled"):
        rules.after_backend_poll([cluster_id])
    # Judged as a round's polls are: the next round skips a failure judged at its previous poll (_still_failing).
    _evaluate_alerts(live.BACKEND, summary, 0, 1)
    return summary


def _holder(task):
    """The worker's node name (celery -n name@host) and this pool process: who holds the shard's lease."""
    return f"{task.request.hostname} pid {os.getpid()}" if task.request.hostname else None


def _poll_channels(shard, shards):
    """Disaster-recovery channels are polled with the backends (apps/dr/polling.py)."""
    try:
        poll_channels(shard, shards)
    except Exception:  # a channel's trouble must never stop the backend polls
        log.exception("channel poll of shard %s failed", shard)


def poll_channels(shard, shards, now=None):
    """The channels due in this shard polled (and moved, when their policy says so), then the alert rules over them:
    after the moves, so a move is not delayed by them and the move that just ran holds what it caused."""
    results = polling.run_shard(shard, shards, now)
    if results:
        try:
            evaluate.after_channel_poll(results, now)
        except Exception:  # an alerting bug must never stop the channels' polls or moves
            log.exception("alert evaluation after the channel polls failed")
    return results


def _record_versions(summary):
    """A node whose polled ProxySQL version changed gets it stored (apps/fleet/node_versions.py)."""
    try:
        node_versions.record_polled(summary.get("docs") or {})
    except Exception:  # must never stop polling
        log.exception("recording the polled ProxySQL versions failed")


def _evaluate_alerts(kind, summary, shard, shards):
    """The alert rules judge what the round just wrote (and, for the clusters this shard owns, the rest)."""
    docs = summary.pop("docs", {})
    if summary.get("skipped"):
        return
    try:
        summary["alerts"] = evaluate.after_poll_round(kind, docs, shard, shards)  # logged with the task's result
    except Exception:  # an alerting bug must never stop polling
        log.exception("alert evaluation after the %s round of shard %s failed", kind, shard)


@shared_task(name="monitoring.rollup_and_prune", ignore_result=True, soft_time_limit=240, time_limit=300)
def rollup_and_prune():
    return rollups.run_all()
