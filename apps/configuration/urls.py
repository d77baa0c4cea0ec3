from django.urls import path

from . import views

app_name = "configuration"
urlpatterns = [
    path("clusters/<id:cluster_pk>/", views.cluster_config, name="cluster"),
    path("clusters/<id:cluster_pk>/drift/", views.cluster_drift, name="drift"),
    path("clusters/<id:cluster_pk>/diff/", views.version_diff, name="diff"),
    path("clusters/<id:cluster_pk>/change-sets/new/", views.change_set_new, name="change_set_new"),
    path("clusters/<id:cluster_pk>/upload/", views.upload, name="upload"),
    path("clusters/<id:cluster_pk>/write-back/", views.write_back, name="write_back"),
    path("versions/<id:pk>/", views.version_detail, name="version"),
    path("versions/<id:pk>/export.yaml", views.version_export, name="export"),
    path("versions/<id:pk>/revert/", views.revert, name="revert"),
    path("nodes/<id:node_pk>/take-runtime/", views.take_runtime, name="take_runtime"),
    path("change-sets/<id:pk>/", views.change_set, name="change_set"),
    path("change-sets/<id:pk>/rows/<str:table_name>/", views.row_form, name="row_form"),
    path("change-sets/<id:pk>/rows/<str:table_name>/delete/", views.delete_row, name="delete_row"),
    path("change-sets/<id:pk>/variables/", views.set_variable, name="set_variable"),
    path("change-sets/<id:pk>/roles/", views.set_roles, name="set_roles"),
    path("change-sets/<id:pk>/edits/<id:index>/remove/", views.remove_edit, name="remove_edit"),
    path("change-sets/<id:pk>/discard/", views.discard, name="discard"),
    path("change-sets/<id:pk>/plan/", views.plan, name="plan"),
]
