from django.urls import path

from . import views

app_name = "monitoring"
urlpatterns = [
    path("overview/live/", views.overview_live, name="overview_live"),
    path("clusters/<id:pk>/live/", views.cluster_live, name="cluster_live"),
    path("clusters/<id:pk>/sparklines/", views.cluster_sparklines, name="cluster_sparklines"),
    path("proxysql/<id:pk>/pool/", views.proxysql_pool, name="proxysql_pool"),
    path("proxysql/<id:pk>/mirror/", views.proxysql_mirror, name="proxysql_mirror"),
    path("proxysql/<id:pk>/charts/<slug:name>.json", views.proxysql_chart, name="proxysql_chart"),
    path("clusters/<id:pk>/query-stats/", views.cluster_query_stats, name="cluster_query_stats"),
    path("proxysql/<id:pk>/query-stats/", views.proxysql_query_stats, name="proxysql_query_stats"),
    path("proxysql/<id:pk>/sessions/", views.proxysql_sessions, name="proxysql_sessions"),
    path("proxysql/<id:pk>/sessions/<int:session_id>/kill/", views.proxysql_kill_session, name="proxysql_kill_session"),
    path("servers/<id:pk>/live/", views.server_live, name="server_live"),
    path("servers/<id:pk>/charts/<slug:name>.json", views.server_chart, name="server_chart"),
]
