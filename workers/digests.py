"""Query digest tasks. Each is thin: it calls one service in apps/digests and returns its summary."""

import logging

from celery import shared_task

from apps.alerts import digest_rules
from apps.digests import services

log = logging.getLogger(__name__)


# A lost tick is better than a late one: no retries, no acks_late (the next tick polls what is due).
@shared_task(name="digests.poll_shard", ignore_result=True, soft_time_limit=120, time_limit=150)
def poll_shard(shard, shards):
    summary = services.run_shard(shard, shards)
    if not summary.get("skipped"):
        try:
            digest_rules.after_digest_round(summary.get("nodes", []), shard, shards)
        except Exception:  # an alerting bug must never stop digest polling
            log.exception("alert evaluation after the digest round of shard %s failed", shard)
    summary.pop("nodes", None)
    return summary


@shared_task(name="digests.rollup_and_prune", ignore_result=True, soft_time_limit=240, time_limit=300)
def rollup_and_prune():
    return services.rollup_and_prune()
