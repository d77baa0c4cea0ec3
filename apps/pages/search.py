"""The header's search (/search/?q=): clusters (name, description, tags), ProxySQL nodes (name, admin host),
backends (host, host:port) and query digests (text or hash), case-insensitive, each group bounded."""

import re

from django.db.models import Q
from django.urls import reverse

from apps.digests.selectors import search_digests
from apps.fleet import tags
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.fleet.validators import parse_endpoint

SHOWN = 20  # rows per group
QUERY_MAX = 200
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def cleaned(q):
    """The search term: control characters out, bounded, trimmed."""
    return CONTROL.sub("", q or "")[:QUERY_MAX].strip()


def search(q):
    """{"q", "groups": [{"name", "rows": [(label, detail, url)], "more"}]} for a cleaned term ("" finds nothing)."""
    q = cleaned(q)
    if not q:
        return {"q": q, "groups": []}
    in_tags = Q(tags__key__icontains=q) | Q(tags__value__icontains=q)
    try:
        key, value = tags.parse_filter(q)  # "env:prod" or "env=prod": that tag
        in_tags |= Q(tags__key=key, tags__value__iexact=value)
    except tags.BadTag:
        pass
    clusters = (
        Cluster.objects.filter(Q(name__icontains=q) | Q(description__icontains=q) | in_tags)
        .distinct()
        .order_by("name")[: SHOWN + 1]
    )
    nodes = (
        ProxySQLNode.objects.filter(Q(name__icontains=q) | Q(admin_host__icontains=q))
        .select_related("cluster")
        .order_by("name", "pk")[: SHOWN + 1]
    )
    at = Q(hostname__icontains=q)
    try:
        host, port = parse_endpoint(q)  # "host:port": that backend
        at |= Q(hostname__iexact=host, port=port)
    except ValueError:
        pass
    if q.isdigit() and int(q) <= 65535:  # a port alone ("3312"): the backends and nodes listening on it
        at |= Q(port=int(q))
        nodes = (
            ProxySQLNode.objects.filter(Q(name__icontains=q) | Q(admin_host__icontains=q) | Q(admin_port=int(q)))
            .select_related("cluster")
            .order_by("name", "pk")[: SHOWN + 1]
        )
    servers = Server.objects.filter(at).select_related("cluster").order_by("hostname", "port", "pk")[: SHOWN + 1]
    digests, more_digests = search_digests(q, SHOWN)

    def group(name, rows, more=False):
        return {"name": name, "rows": rows[:SHOWN], "more": more or len(rows) > SHOWN}

    return {
        "q": q,
        "groups": [
            group("Clusters", [(c.name, c.get_kind_display(), c.get_absolute_url()) for c in clusters]),
            group(
                "ProxySQL nodes",
                [(n.name, f"{n.admin_host}:{n.admin_port} · {n.cluster.name}", n.get_absolute_url()) for n in nodes],
            ),
            group("Backends", [(f"{s.hostname}:{s.port}", s.cluster.name, s.get_absolute_url()) for s in servers]),
            group(
                "Query digests",
                [(d.digest, d.digest_text[:200], reverse("digests:detail", args=[d.pk])) for d in digests],
                more_digests,
            ),
        ],
    }
