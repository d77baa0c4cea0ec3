from django.urls import path

from . import views

app_name = "digests"
urlpatterns = [
    path("", views.digest_list, name="list"),
    path("rules/", views.rule_test, name="rules"),
    path("<id:pk>/", views.digest_detail, name="detail"),
    path("<id:pk>/rule/", views.digest_rule, name="rule"),
    path("<id:pk>/explain/", views.digest_explain, name="explain"),
    path("<id:pk>/chart.json", views.digest_chart, name="chart"),
]
