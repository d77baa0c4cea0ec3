from django.urls import path

from . import views

app_name = "dr"
urlpatterns = [
    path("channels/<int:pk>/", views.channel_detail, name="channel"),
    path("channels/<int:pk>/live/", views.channel_live, name="channel_live"),
    path("channels/<int:pk>/move/", views.channel_move, name="channel_move"),
    path("channels/<int:pk>/charts/<slug:name>.json", views.channel_chart, name="channel_chart"),
]
