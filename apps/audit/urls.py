from django.urls import path

from . import views

app_name = "audit"
urlpatterns = [
    path("", views.event_list, name="list"),
    path("export.csv", views.export_csv, name="export_csv"),
    path("export.json", views.export_json, name="export_json"),
    path("verify/", views.verify, name="verify"),
    path("<id:pk>/", views.event_detail, name="detail"),
]
