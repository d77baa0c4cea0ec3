"""The operations' series of /metrics (apps/monitoring/exporter.py names them in SPECS; apps/pages/metrics.py adds
this section): operations by cluster, kind and state, the histogram of their run times (counts.py keeps them), and
pending rollbacks and finishes by node and state (a small table, read at each scrape)."""

from django.db.models import Count
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from apps.monitoring.exporter import HISTOGRAM_HELP, PREFIX

from . import counts as operation_counts
from .choices import PendingState
from .models import PendingRollback


def operation_series(add, inv, now):
    names = {pk: c["name"] for pk, c in inv.clusters.items()}
    counts = operation_counts.TALLY.snapshot(now)
    for family, counter in (("operations", counts.ended), ("operations_open", counts.unended)):
        for (cluster_id, kind, state), n in sorted(
            counter.items(), key=lambda kv: (names.get(kv[0][0], ""), kv[0][1:])
        ):
            add(family, {"cluster": names.get(cluster_id, ""), "kind": kind, "state": state}, n)
    pending = (
        PendingRollback.objects.filter(state__in=PendingState.open())
        .values_list("node_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for node_id, state, n in sorted(pending):
        if node_id in inv.nodes:
            add("pending_rollbacks", {**inv.nodes[node_id][1], "state": state}, n)
    family = HistogramMetricFamily(PREFIX + "operation_duration_seconds", HISTOGRAM_HELP, labels=["kind", "state"])
    for (kind, state), (buckets, seconds) in counts.histogram.cumulative().items():
        family.add_metric([kind, state], [(floatToGoString(le), n) for le, n in buckets], seconds)
    return family
