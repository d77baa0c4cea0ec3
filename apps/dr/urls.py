from django.urls import path

from . import views

app_name = "dr"
urlpatterns = [
    path("channels/<id:pk>/", views.channel_detail, name="channel"),
    path("channels/<id:pk>/live/", views.channel_live, name="channel_live"),
    path("channels/<id:pk>/move/", views.channel_move, name="channel_move"),
    path("channels/<id:pk>/charts/<slug:name>.json", views.channel_chart, name="channel_chart"),
]
