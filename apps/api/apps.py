from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "apps.api"

    def ready(self):
        from . import schema  # noqa: F401  the token scheme, registered with drf-spectacular
