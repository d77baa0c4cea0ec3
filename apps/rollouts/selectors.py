"""Reads of rollouts that the pages and the API share: one filter, two doors (the rollouts page and
GET /api/v1/rollouts/ answer the same rollouts)."""

from . import services
from .models import Rollout

LIST_LIMIT = 100  # the latest rollouts a list shows


def latest(limit: int = LIST_LIMIT) -> list[services.Described]:
    """The latest rollouts, newest first, each as services.describe() says it (waves, clusters, gates)."""
    return [services.describe(r) for r in Rollout.objects.order_by("-pk")[:limit]]
