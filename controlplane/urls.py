from django.contrib import admin
from django.urls import include, path, register_converter

from controlplane.converters import IdConverter

from apps.monitoring.views import metrics, metrics_targets, pool_metrics, search_page

register_converter(IdConverter, "id")  # before the apps' URLs are read: they use <id:pk>

urlpatterns = [
    path("", include("apps.pages.urls")),  # the composite pages: overview, cluster, node, backend
    path("", include("apps.fleet.urls")),
    path("monitoring/", include("apps.monitoring.urls")),
    path("search/", search_page, name="search"),  # the header's search
    path("accounts/", include("apps.accounts.urls")),
    path("audit/", include("apps.audit.urls")),
    path("digests/", include("apps.digests.urls")),
    path("operations/", include("apps.operations.urls")),
    path("configuration/", include("apps.configuration.urls")),
    path("reports/", include("apps.reports.urls")),
    path("alerts/", include("apps.alerts.urls")),
    path("dr/", include("apps.dr.urls")),
    path(
        "rollouts/", include("apps.rollouts.urls")
    ),  # fleet rollouts (apps/rollouts)  # disaster-recovery channels between clusters (apps/dr)
    path("api/", include("apps.api.urls")),  # the JSON API, /api/v1/ (apps/api)
    path("admin/", admin.site.urls),
    # Prometheus: outside the login, see apps/monitoring/scrape_access.py; what each exports: apps/monitoring/exporter.py
    path("metrics", metrics, name="metrics"),
    path("metrics/pool", pool_metrics, name="pool_metrics"),
    path("metrics/targets", metrics_targets, name="metrics_targets"),
]

handler403 = "apps.accounts.views.permission_denied"  # the refusal with a way back
