"""The alerts' series of /metrics (apps/monitoring/exporter.py names it in SPECS; apps/pages/metrics.py adds this
section): open alerts counted by cluster, rule, severity and state (a held alert counts as held, whatever its
state), at most clusters x rules x 3 x 3 series, read through the open alerts' unique key."""

from collections import Counter

from django.db.models import Count

from .models import Alert


def alert_series(add, inv, now):
    names = {pk: c["name"] for pk, c in inv.clusters.items()}
    rows = (
        Alert.objects.filter(active_key__isnull=False)
        .values_list("cluster_id", "rule", "severity", "state", "held")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts = Counter()
    for cluster_id, rule, severity, state, held, n in rows:
        if cluster_id in names:
            counts[(names[cluster_id], rule, severity, "held" if held else state)] += n
    for (cluster, rule, severity, state), n in sorted(counts.items()):
        add("alerts", {"cluster": cluster, "rule": rule, "severity": severity, "state": state}, n)
