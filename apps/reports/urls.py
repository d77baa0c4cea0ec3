from django.urls import path

from . import views

app_name = "reports"
urlpatterns = [
    path("", views.report_list, name="list"),
    path("build/", views.report_build, name="build"),
    path("<int:pk>/", views.report_detail, name="detail"),
    path("<int:pk>/pdf/", views.report_pdf, name="pdf"),
    path("<int:pk>/send/", views.report_send, name="send"),
    path("<int:pk>/charts/<slug:key>.png", views.report_chart, name="chart"),
    path("schedules/", views.schedule_list, name="schedules"),
    path("schedules/new/", views.schedule_edit, name="schedule_new"),
    path("schedules/<int:pk>/", views.schedule_edit, name="schedule_edit"),
    path("schedules/<int:pk>/delete/", views.schedule_delete, name="schedule_delete"),
    path("schedules/<int:pk>/run/", views.schedule_run, name="schedule_run"),
]
