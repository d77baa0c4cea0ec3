"""Query digest tasks. Each is thin: it calls one service in apps/digests and returns its summary."""
from celery import shared_task

from apps.digests import services


# A lost tick is better than a late one: no retries, no acks_late (the next tick polls what is due).
@shared_task(name="digests.poll_shard", ignore_result=True, soft_time_limit=120, time_limit=150)
def poll_shard(shard, shards):
    return services.run_shard(shard, shards)


@shared_task(name="digests.rollup_and_prune", ignore_result=True, soft_time_limit=240, time_limit=300)
def rollup_and_prune():
    return services.rollup_and_prune()
