from django.urls import path

from . import views

app_name = "rollouts"
urlpatterns = [
    path("", views.rollout_list, name="list"),
    path("<id:pk>/", views.rollout_detail, name="detail"),
    path("<id:pk>/live/", views.rollout_live, name="live"),
    path("<id:pk>/<slug:action>/", views.rollout_action, name="action"),
]
