"""Rollout tasks: thin; the service goes on from the rollout's stored state (re-entrant after a worker's death)."""

from celery import shared_task

from apps.rollouts import services


@shared_task(name="rollouts.run", ignore_result=True)
def run_rollout(rollout_id):
    return services.run(rollout_id)


@shared_task(name="rollouts.resume_stale", ignore_result=True, soft_time_limit=30)
def resume_stale_rollouts():
    return services.resume_stale()
