from django.urls import path

from . import views

app_name = "configuration"
urlpatterns = [
    path("clusters/<int:cluster_pk>/", views.cluster_config, name="cluster"),
    path("clusters/<int:cluster_pk>/drift/", views.cluster_drift, name="drift"),
    path("clusters/<int:cluster_pk>/diff/", views.version_diff, name="diff"),
    path("clusters/<int:cluster_pk>/change-sets/new/", views.change_set_new, name="change_set_new"),
    path("clusters/<int:cluster_pk>/upload/", views.upload, name="upload"),
    path("clusters/<int:cluster_pk>/write-back/", views.write_back, name="write_back"),
    path("versions/<int:pk>/", views.version_detail, name="version"),
    path("versions/<int:pk>/export.yaml", views.version_export, name="export"),
    path("versions/<int:pk>/revert/", views.revert, name="revert"),
    path("nodes/<int:node_pk>/take-runtime/", views.take_runtime, name="take_runtime"),
    path("change-sets/<int:pk>/", views.change_set, name="change_set"),
    path("change-sets/<int:pk>/rows/<str:table_name>/", views.row_form, name="row_form"),
    path("change-sets/<int:pk>/rows/<str:table_name>/delete/", views.delete_row, name="delete_row"),
    path("change-sets/<int:pk>/variables/", views.set_variable, name="set_variable"),
    path("change-sets/<int:pk>/roles/", views.set_roles, name="set_roles"),
    path("change-sets/<int:pk>/edits/<int:index>/remove/", views.remove_edit, name="remove_edit"),
    path("change-sets/<int:pk>/discard/", views.discard, name="discard"),
    path("change-sets/<int:pk>/plan/", views.plan, name="plan"),
]
