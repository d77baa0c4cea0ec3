from django.urls import path

from . import views

app_name = "operations"
urlpatterns = [
    path("", views.operation_list, name="list"),
    path("<id:pk>/", views.operation_detail, name="detail"),
    path("<id:pk>/progress/", views.operation_progress, name="progress"),
    path("<id:pk>/confirm/", views.operation_confirm, name="confirm"),
    path("<id:pk>/cancel/", views.operation_cancel, name="cancel"),
    path("<id:pk>/discard/", views.operation_discard, name="discard"),
    path("<id:pk>/rollback-now/", views.operation_rollback_now, name="rollback_now"),
    path("pending-rollbacks/", views.pending_rollbacks, name="pending_rollbacks"),
    path("repair/<id:cluster_pk>/", views.repair_new, name="repair"),
    path("record-nodes/<id:cluster_pk>/", views.record_nodes, name="record_nodes"),
    path("switchover/<id:cluster_pk>/", views.switchover_new, name="switchover"),
    path("rules/<id:cluster_pk>/", views.cluster_rules, name="cluster_rules"),
    path("rules/<id:cluster_pk>/save/", views.cluster_rules_save, name="cluster_rules_save"),
    path("drain/<id:server_pk>/", views.drain_new, name="drain"),
    path("restore/<id:server_pk>/", views.restore_new, name="restore"),
]
