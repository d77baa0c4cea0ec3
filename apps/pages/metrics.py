"""The body of /metrics: monitoring's exporter (clusters, nodes, backends, mirror rules) with the series of the apps
above it, operations' and alerts' (each app owns the reads of its own tables)."""

from apps.alerts.metrics import alert_series
from apps.monitoring import exporter
from apps.operations.metrics import operation_series

SECTIONS = (operation_series, alert_series)


def collector(now=None):
    return exporter.FleetCollector(now, SECTIONS)


def exposition(now=None):
    return exporter.exposition(now, SECTIONS)
