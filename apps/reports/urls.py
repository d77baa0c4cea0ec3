from django.urls import path

from . import views

app_name = "reports"
urlpatterns = [
    path("", views.report_list, name="list"),
    path("build/", views.report_build, name="build"),
    path("<id:pk>/", views.report_detail, name="detail"),
    path("<id:pk>/pdf/", views.report_pdf, name="pdf"),
    path("<id:pk>/send/", views.report_send, name="send"),
    path("<id:pk>/charts/<slug:key>.png", views.report_chart, name="chart"),
    path("schedules/", views.schedule_list, name="schedules"),
    path("schedules/new/", views.schedule_edit, name="schedule_new"),
    path("schedules/<id:pk>/", views.schedule_edit, name="schedule_edit"),
    path("schedules/<id:pk>/delete/", views.schedule_delete, name="schedule_delete"),
    path("schedules/<id:pk>/run/", views.schedule_run, name="schedule_run"),
]
