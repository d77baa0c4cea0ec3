from django.urls import path

from . import views

app_name = "alerts"
urlpatterns = [
    path("", views.alert_list, name="list"),
    path("live/", views.alert_list_live, name="list_live"),
    path("<id:pk>/", views.alert_detail, name="detail"),
    path("<id:pk>/state/", views.alert_state, name="state"),
    path("<id:pk>/acknowledge/", views.acknowledge, name="acknowledge"),
    path("silences/", views.silence_list, name="silences"),
    path("silences/new/", views.silence_create, name="silence_create"),
    path("silences/<id:pk>/end/", views.silence_end, name="silence_end"),
    path("rules/", views.rules, name="rules"),
    path("rules/<slug:rule>/", views.rule_edit, name="rule_edit"),
    path("rules/cluster/<id:pk>/", views.cluster_rules, name="cluster_rules"),
    path("rules/cluster/<id:pk>/<slug:rule>/", views.cluster_rule_edit, name="cluster_rule_edit"),
    path("channels/", views.channel_list, name="channels"),
    path("channels/new/", views.channel_create, name="channel_create"),
    path("channels/<id:pk>/", views.channel_detail, name="channel"),
    path("channels/<id:pk>/edit/", views.channel_edit, name="channel_edit"),
    path("channels/<id:pk>/delete/", views.channel_delete, name="channel_delete"),
    path("channels/<id:pk>/test/", views.channel_test, name="channel_test"),
    path("channels/<id:pk>/log/", views.channel_log, name="channel_log"),
    path("clusters/<id:pk>/", views.cluster_alerts, name="cluster_alerts"),
]
