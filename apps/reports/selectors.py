"""Reads of health reports that the pages and the API share: one filter, two doors (the reports page and
GET /api/v1/reports/ answer the same rows for the same filter)."""

from django.db.models import QuerySet

from .models import Report, ReportSchedule


def reports(*, cluster: int | None = None, period: str = "") -> QuerySet[Report]:
    """Reports newest period first, without their data and HTML (they can be large), narrowed to a cluster (its id)
    and a period when given. The doors check the values first."""
    chosen = Report.objects.defer("data", "html").order_by("-end", "-pk")
    if cluster is not None:
        chosen = chosen.filter(cluster_id=cluster)
    if period:
        chosen = chosen.filter(period=period)
    return chosen


def schedules() -> QuerySet[ReportSchedule]:
    """Every report schedule with its cluster, oldest first: the schedules page and GET /api/v1/report-schedules/."""
    return ReportSchedule.objects.select_related("cluster").order_by("pk")
