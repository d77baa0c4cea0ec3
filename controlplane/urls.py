from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("apps.fleet.urls")),
    path("monitoring/", include("apps.monitoring.urls")),
    path("accounts/", include("apps.accounts.urls")),
    path("audit/", include("apps.audit.urls")),
    path("digests/", include("apps.digests.urls")),
    path("operations/", include("apps.operations.urls")),
    path("configuration/", include("apps.configuration.urls")),
    path("reports/", include("apps.reports.urls")),
    path("admin/", admin.site.urls),
]
