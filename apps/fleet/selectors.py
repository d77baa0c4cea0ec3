"""Reads of the inventory that the pages and the API share: one filter, two doors (the fleet page's tag filter and
GET /api/v1/clusters/ narrow clusters the same way)."""

from . import tags
from .models import Cluster


def clusters(*, kind="", name="", tag=None):
    """Clusters by name, narrowed to a kind, a name and a tag (key, value) when given. The doors check the values
    first (tags.parse_filter for the tag)."""
    chosen = Cluster.objects.order_by("name", "pk")
    if kind:
        chosen = chosen.filter(kind=kind)
    if name:
        chosen = chosen.filter(name=name)
    if tag:
        chosen = tags.tagged(chosen, *tag)
    return chosen
