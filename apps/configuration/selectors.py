"""Reads of configuration that the pages and the API share: one filter, two doors (the configuration page and
GET /api/v1/clusters/<id>/config/versions/ and .../config/change-sets/ answer the same rows for the same filter)."""

from collections.abc import Iterable

from django.db.models import QuerySet

from apps.fleet.models import Cluster

from .models import ChangeSet, ConfigVersion


def versions(cluster: Cluster) -> QuerySet[ConfigVersion]:
    """A cluster's versions, newest first, without their content (it can be large: one version's page reads it)."""
    return ConfigVersion.objects.filter(cluster=cluster).defer("content").select_related("parent").order_by("-number")


def change_sets(cluster: Cluster, *, states: Iterable[str] = ()) -> QuerySet[ChangeSet]:
    """A cluster's change sets, newest first, narrowed to some states when given (the page's drafts: draft and
    planned). The doors check the states first."""
    chosen = ChangeSet.objects.filter(cluster=cluster).select_related("base", "result").order_by("-id")
    states = list(states)
    if states:
        chosen = chosen.filter(state__in=states)
    return chosen


# The change sets the configuration page lists as work in progress.
OPEN_STATES = (ChangeSet.State.DRAFT, ChangeSet.State.PLANNED)
