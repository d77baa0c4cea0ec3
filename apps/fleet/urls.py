from django.urls import path

from . import views

app_name = "fleet"
urlpatterns = [
    path("adopt/", views.adopt_node, name="adopt"),
]
