"""Reads of the inventory that the pages and the API share: one filter, two doors (the fleet page's tag filter and
GET /api/v1/clusters/ narrow clusters the same way; the cluster page's backends and ProxySQL nodes are those
GET /api/v1/servers/ and /api/v1/proxysql-nodes/ answer for ?cluster=, and its backend filter is the servers list's
hostname, port and maintenance)."""

from typing import TypedDict

from django.db.models import QuerySet

from . import tags
from .models import Cluster, ProxySQLNode, Server


def clusters(*, kind: str = "", name: str = "", tag: tuple[str, str] | None = None) -> QuerySet[Cluster]:
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


class ServerFilter(TypedDict, total=False):
    """servers()'s narrowing beside the cluster, as a door read it (only what was given): the cluster page's backend
    filter (fleet/forms.py backend_filter) and the API's query string (api/serializers.py ServerFilter)."""

    hostname: str
    port: int
    maintenance: bool


def servers(
    *, cluster: int | None = None, hostname: str = "", port: int | None = None, maintenance: bool | None = None
) -> QuerySet[Server]:
    """Backend servers by cluster, host and port, narrowed to a cluster (its id), a hostname, a port and the
    maintenance flag when given: the cluster page's backends and GET /api/v1/servers/. The doors
    check the values first."""
    chosen = Server.objects.order_by("cluster_id", "hostname", "port", "pk")
    if cluster is not None:
        chosen = chosen.filter(cluster_id=cluster)
    if hostname:
        chosen = chosen.filter(hostname=hostname)
    if port is not None:
        chosen = chosen.filter(port=port)
    if maintenance is not None:
        chosen = chosen.filter(maintenance=maintenance)
    return chosen


def proxysql_nodes(*, cluster: int | None = None) -> QuerySet[ProxySQLNode]:
    """ProxySQL nodes by cluster and name, narrowed to a cluster (its id) when given: the cluster page's nodes and
    GET /api/v1/proxysql-nodes/."""
    chosen = ProxySQLNode.objects.order_by("cluster_id", "name", "pk")
    if cluster is not None:
        chosen = chosen.filter(cluster_id=cluster)
    return chosen
