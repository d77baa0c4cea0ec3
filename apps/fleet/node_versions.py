"""Each ProxySQL node's version as the polls read it (admin-version): stored on the node when it changes (an
upgrade or a downgrade between polls), audited. Called after each poll round (workers/monitoring.py)."""

from django.db import transaction

from apps.audit.services import record

from .models import ProxySQLNode


def _version(doc):
    return ((doc or {}).get("variables") or {}).get("admin-version") or ""


def record_polled(docs):
    """`docs`: {node pk: (previous, new latest-state document)} of a round. Only nodes whose polled version moved
    since their previous document are looked at: a steady fleet costs no query. Returns the nodes updated."""
    moved = {pk: _version(new) for pk, (prev, new) in docs.items() if _version(new) and _version(new) != _version(prev)}
    if not moved:
        return []
    changed = []
    for node in ProxySQLNode.objects.filter(pk__in=moved).select_related("cluster"):
        if node.version == moved[node.pk]:
            continue
        with transaction.atomic():
            before, node.version = node.version, moved[node.pk]
            node.save(update_fields=["version"])
            record(
                "proxysql version changed",
                rule="monitoring",
                cluster=node.cluster,
                target=node.name,
                details={"before": before, "after": node.version},
            )
        changed.append(node)
    return changed
