from django.urls import path

from . import views

app_name = "operations"
urlpatterns = [
    path("", views.operation_list, name="list"),
    path("<int:pk>/", views.operation_detail, name="detail"),
    path("<int:pk>/progress/", views.operation_progress, name="progress"),
    path("<int:pk>/confirm/", views.operation_confirm, name="confirm"),
    path("<int:pk>/cancel/", views.operation_cancel, name="cancel"),
    path("<int:pk>/rollback-now/", views.operation_rollback_now, name="rollback_now"),
    path("pending-rollbacks/", views.pending_rollbacks, name="pending_rollbacks"),
    path("repair/<int:cluster_pk>/", views.repair_new, name="repair"),
    path("switchover/<int:cluster_pk>/", views.switchover_new, name="switchover"),
    path("drain/<int:server_pk>/", views.drain_new, name="drain"),
    path("restore/<int:server_pk>/", views.restore_new, name="restore"),
]
