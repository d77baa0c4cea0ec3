"""The composite pages' URLs (apps/pages/views.py); their paths are those they always had."""

from django.urls import path

from . import views

app_name = "pages"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("clusters/<id:pk>/", views.cluster_detail, name="cluster"),
    path("clusters/<id:pk>/tags/", views.cluster_tags, name="cluster_tags"),
    path("clusters/<id:pk>/connections/", views.cluster_connections, name="cluster_connections"),
    path("clusters/<id:pk>/drift/", views.cluster_drift, name="cluster_drift"),
    path("proxysql/<id:pk>/", views.proxysql_node_detail, name="proxysql_node"),
    path("proxysql/<id:pk>/runtime/", views.proxysql_node_runtime, name="proxysql_node_runtime"),
    path("servers/<id:pk>/", views.server_detail, name="server"),
    path("servers/<id:pk>/state/", views.server_state, name="server_state"),
    path("audit/incident/", views.incident, name="incident"),
]
