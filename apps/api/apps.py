from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "apps.api"

    def ready(self):
        # why: the scheme registers with drf-spectacular when imported, once the apps are loaded
        from . import schema  # noqa: F401  the token scheme, registered with drf-spectacular
